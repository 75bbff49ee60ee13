package slidelog

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts, each with its KEYS, ARGV and reply in its header. Each runs
// with EVALSHA and falls back to EVAL on NOSCRIPT, so a restarted or flushed
// server costs one extra round trip, never an error.
var (
	//go:embed clock.lua
	clockLua string
	//go:embed compact.lua
	compactLua string
	//go:embed script.lua
	scriptLua string
	//go:embed reset.lua
	resetSrc string
	//go:embed refund.lua
	refundLua string
	//go:embed renew.lua
	renewLua string

	// The sources as Redis runs them: the clock, the compact log's code,
	// then the script.
	decideSrc = clockLua + compactLua + scriptLua
	renewSrc  = clockLua + renewLua
	refundSrc = compactLua + refundLua

	// decideScript takes every decision: Allow, AllowN, Peek, AllowAll,
	// AcquireN, and batches of them.
	decideScript = redis.NewScript(decideSrc)
	// resetScript forgets every log of a key (Reset).
	resetScript = redis.NewScript(resetSrc)
	// refundScript takes an admission's events back (Refund).
	refundScript = redis.NewScript(refundSrc)
	// renewScript moves an in-flight lease's events to now (Lease.Renew).
	renewScript = redis.NewScript(renewSrc)
)
