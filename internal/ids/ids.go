// Package ids hands out event ids, the members of a sorted-set log.
//
// An event's id is 8 bytes: a 3-byte prefix drawn at random once per
// Source, then a 5-byte big-endian counter that starts at a random value.
// Ids of one Source are unique until the counter wraps (2^40 events), and
// two Sources collide only if their random prefixes and counter ranges meet
// on one key within one window.
//
// Eight bytes is what keeps a stored event at about 21-24 bytes of Redis
// memory while the key stays a listpack; a 36-character UUID costs about 55.
package ids

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/google/uuid"
)

const (
	Len         = 8         // bytes of an id
	PrefixLen   = 3         // bytes of its prefix
	CounterMask = 1<<40 - 1 // its counter's bits
	// MaxSpan is the most ids one admission takes (Span): a sorted set's
	// admission is at most 1 024 events (an in-flight lease's MaxAcquireN;
	// a rate limit's, at most 128), a member each; a larger one is one
	// entry of a compact log or a quota's count, which keeps its first id
	// only (and a Settle's give-back, an id within its span). So no
	// admission, whatever its n, moves the counter round its 2^40.
	MaxSpan = 1 << 10
)

// Span is how many ids an admission of n events takes: n, at most
// MaxSpan.
func Span(n int) int { return min(n, MaxSpan) }

// Source hands out blocks of consecutive event ids.
type Source struct {
	prefix [PrefixLen]byte
	next   atomic.Uint64
}

// process is the Source every Limiter of the process shares (Process).
var process = New()

// Process returns the Source that the Limiters of this process share: one
// random prefix per process.
func Process() *Source { return process }

// New returns a Source with a random prefix and counter.
func New() *Source {
	r := uuid.New() // 122 random bits from crypto/rand
	var prefix [PrefixLen]byte
	copy(prefix[:], r[:PrefixLen])
	return NewAt(prefix, binary.BigEndian.Uint64(r[8:]))
}

// NewAt returns a Source with the prefix whose next id has the counter
// next (mod 2^40).
func NewAt(prefix [PrefixLen]byte, next uint64) *Source {
	s := &Source{prefix: prefix}
	s.next.Store(next & CounterMask)
	return s
}

// Prefix is the prefix of the Source's ids.
func (s *Source) Prefix() [PrefixLen]byte { return s.prefix }

// Reserve returns the id of the first of n consecutive events (Span(n)
// ids are taken); the script derives the others (prefix, counter+i mod
// 2^40) where it keeps them, a sorted set's n members.
func (s *Source) Reserve(n int) [Len]byte {
	k := uint64(Span(n))
	return At(s.prefix, s.next.Add(k)-k)
}

// At is the id with the prefix and the counter c (mod 2^40): the one
// encoding the client, Refund and the script's derivation agree on.
func At(prefix [PrefixLen]byte, c uint64) (id [Len]byte) {
	c &= CounterMask
	copy(id[:], prefix[:])
	id[3] = byte(c >> 32)
	binary.BigEndian.PutUint32(id[4:], uint32(c))
	return id
}

// Plus is the id of the event k after id (its counter + k, mod 2^40),
// with id's prefix.
func Plus(id [Len]byte, k int) [Len]byte {
	var prefix [PrefixLen]byte
	copy(prefix[:], id[:PrefixLen])
	c := uint64(id[3])<<32 | uint64(binary.BigEndian.Uint32(id[4:]))
	return At(prefix, c+uint64(k))
}

// Arg is a call's first event id as sent to Redis. go-redis writes a
// command's arguments anew for every attempt (a retry after a timeout, a
// Cluster redirect, the EVAL after NOSCRIPT), so the second write on marks
// the id with a ninth byte: the script then knows the call may have run
// before and looks for its own events; a first attempt never pays for it.
// The root package's tests pin that go-redis behaviour on every go-redis
// the module allows (see go.mod). Were a retry ever unmarked, ZADD NX would
// still record its events once, but an admitted call retried into a window
// it had just filled would be answered denied.
type Arg struct {
	b      [Len + 1]byte // the id, then 'r'
	writes atomic.Int32
}

// Set makes a the id.
func (a *Arg) Set(id [Len]byte) {
	copy(a.b[:], id[:])
	a.b[Len] = 'r'
}

// ID is the id a was Set to.
func (a *Arg) ID() (id [Len]byte) {
	copy(id[:], a.b[:Len])
	return id
}

// Writes is how many times the id was written to Redis.
func (a *Arg) Writes() int32 { return a.writes.Load() }

// MarshalBinary implements encoding.BinaryMarshaler for go-redis.
func (a *Arg) MarshalBinary() ([]byte, error) {
	if a.writes.Add(1) == 1 {
		return a.b[:Len], nil
	}
	return a.b[:], nil
}
