// Package config holds what a Limiter's options set (slidelog.Option is a
// func(*Config)): the root package checks the values and builds the
// Limiter from them. Values of the root's own types (Policy, Hook) are
// kept as any, since this package imports nothing of the root; the tests
// set the fields no public option sets (internal/optiontest).
package config

import (
	"time"

	"github.com/slidelog/slidelog/internal/ids"
)

// Config is what the options set: each option records its value, and New
// checks them all at once, then builds the Limiter from them.
type Config struct {
	Prefix    string
	Timeout   time.Duration
	MaxEvents int       // WithMaxEvents; 0 (not given): no cap
	Capped    bool      // WithMaxEvents was given
	Batching  Batching  // WithBatching, WithoutBatching: the last given wins
	BatchMax  int       // WithBatching's max
	DenyCache bool      // WithDenyCache
	Policy    any       // WithPolicy: a slidelog.Policy, or nil (FailClosed)
	Shadow    bool      // WithShadow
	Hook      any       // WithHook: a slidelog.Hook, or nil
	Name      string    // WithName
	Replicas  *Replicas // WithReplicas
	NoBreaker bool      // WithoutBreaker

	// CompactAbove is the largest limit whose log is a sorted set: a log
	// of a larger limit is a compact log (compact.lua), 7 bytes an event
	// where a sorted set of more than 128 members (Redis'
	// zset-max-listpack-entries, by default) costs about 100. Up to 128, a
	// sorted set is a listpack, about as small as the compact log's slots
	// (and it grows with its live events, where a compact log's ring
	// doubles). A key is read in the store it is in whatever its limit
	// (script.lua), so instances that disagree about this threshold never
	// split a key's events. No public option sets it; the tests do, to run
	// every case on both stores.
	CompactAbove int
	// ConvertPast is how many live events a sorted set of a limit kept
	// compactly holds before its next admission makes it a compact log
	// (the decision script's convertPast). No public option sets it.
	ConvertPast int
	// BlockLog makes that log a block log (blocklog.lua: an entry per
	// admission, of any weight), the default; false, a compact log of a
	// slot per event (compact.lua), which the tests set to run its code. A
	// decision reads either, whatever this says. No public option sets it.
	BlockLog bool
	// MaxLive is where a log's live events stop (DefaultMaxLive): the
	// decision script's maxLive. No public option sets it; the tests make
	// it small to reach it.
	MaxLive int
	// IDs hands out the event ids (nil: the process's, ids.Process).
	IDs *ids.Source
}

// Replicas is what WithReplicas was given.
type Replicas struct {
	N       int
	Timeout time.Duration
}

// Batching is how decisions travel.
type Batching int

const (
	BatchDefault Batching = iota // on, where the client can pipeline
	BatchOn                      // WithBatching: the client must pipeline
	BatchOff                     // WithoutBatching
)

const (
	// DefaultBatch is the most decisions one pipeline carries by default.
	DefaultBatch = 256
	// DefaultCompactAbove and DefaultConvertPast are 128, a listpack's
	// size by default (CompactAbove, ConvertPast).
	DefaultCompactAbove = 128
	DefaultConvertPast  = 128
	// MaxCount is the most a calendar quota counts, in both limiters
	// (2^52, four times MaxQuota): usage (Charge, Settle) that would take
	// a quota's count past it is recorded nowhere. Past it the count would
	// lose its exactness in a Lua number, then overflow in the client and
	// read as room. A count near it denies every request until its period
	// ends, as any count over the limit does.
	MaxCount = 1 << 52
	// DefaultMaxLive is the most events a sliding window's log counts
	// live, in both limiters (2^47, 131 072 times MaxEvents): usage
	// (Charge, Settle) that would take a log past it is recorded in none
	// of its logs. A block log's running totals are kept mod 2^48, so more
	// would wrap and read as room.
	DefaultMaxLive = 1 << 47
)

// Default is the configuration of New(rdb) with no options.
func Default() Config {
	return Config{Prefix: "slidelog:", BatchMax: DefaultBatch, CompactAbove: DefaultCompactAbove, ConvertPast: DefaultConvertPast, BlockLog: true, MaxLive: DefaultMaxLive}
}
