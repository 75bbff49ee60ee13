package slidelog

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The scripts, each with its KEYS, ARGV and reply in its header. Each runs
// with EVALSHA and falls back to EVAL on NOSCRIPT, so a restarted or flushed
// server costs one extra round trip, never an error.
var (
	//go:embed clock.lua
	clockLua string
	//go:embed log.lua
	logLua string
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

	//go:embed ids.lua
	idsLua string

	// sizesLua gives the scripts the sizes limit.go defines: the most
	// slots a compact log has (MaxEvents), so that its reader refuses
	// exactly what its writer can never write.
	sizesLua = fmt.Sprintf("local maxSlots = %d -- MaxEvents (limit.go)\n", MaxEvents)

	// thresholdsLua gives script.lua its thresholds: convertPast, the live
	// events past which an admission turns a sorted set the client keeps
	// compactly (a negated window) into a compact log: a listpack's 128
	// members, past which Redis keeps a sorted set as a skiplist.
	thresholdsLua = "local convertPast = 128 -- a listpack's members (zset-max-listpack-entries)\n"

	// The sources as Redis runs them: the sizes and thresholds, a log's
	// layout (log.lua: a quota's code) and the compact log's code, the event
	// ids' derivation, the clock, then the script. The functions of the
	// shared files come before the clock, whose locals (call, tonumber,
	// KEYS, ARGV) they would otherwise capture, which every call would pay
	// for. scripts/luaops.lua joins what decideSrc names, in its order.
	decideSrc = sizesLua + thresholdsLua + logLua + compactLua + idsLua + clockLua + scriptLua
	renewSrc  = clockLua + idsLua + renewLua
	refundSrc = sizesLua + logLua + compactLua + idsLua + refundLua

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
