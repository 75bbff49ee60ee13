package slidelog

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/config"
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

	//go:embed ids.lua
	idsLua string

	// sizesLua gives the scripts the sizes limit.go defines: the most
	// slots a compact log has (MaxEvents), so that its reader refuses
	// exactly what its writer can never write.
	sizesLua = fmt.Sprintf("local maxSlots = %d -- MaxEvents (limit.go)\n", MaxEvents)

	// The sources as Redis runs them: the clock, the sizes, the compact
	// log's code, the event ids' derivation, then the script.
	decideSrc = decideSource(config.DefaultConvertPast)
	renewSrc  = clockLua + idsLua + renewLua
	refundSrc = sizesLua + compactLua + idsLua + refundLua

	// decideScript takes every decision: Allow, AllowN, Peek, AllowAll,
	// AcquireN, and batches of them (of a Limiter with the default
	// convertPast: decideScriptFor).
	decideScript = redis.NewScript(decideSrc)
	// resetScript forgets every log of a key (Reset).
	resetScript = redis.NewScript(resetSrc)
	// refundScript takes an admission's events back (Refund).
	refundScript = redis.NewScript(refundSrc)
	// renewScript moves an in-flight lease's events to now (Lease.Renew).
	renewScript = redis.NewScript(renewSrc)
)

// decideSource is the decision script's source where a sorted set of a
// limit kept compactly becomes a compact log past convertPast live events
// (script.lua reads the local convertPast, joined here like maxSlots).
func decideSource(convertPast int) string {
	src := clockLua + sizesLua + fmt.Sprintf("local convertPast = %d -- config.Config.ConvertPast\n", convertPast) +
		compactLua + idsLua + scriptLua
	// TEMPORARY, until script.lua reads convertPast itself: its literal
	// threshold is made the local's. Once it does, this finds nothing.
	return strings.Replace(src, "count + n > 128", "count + n > convertPast", 1)
}

// decideScriptFor is the decision script of a Limiter configured with
// convertPast: decideScript's for the default.
func decideScriptFor(convertPast int) *redis.Script {
	if convertPast == config.DefaultConvertPast {
		return decideScript
	}
	return redis.NewScript(decideSource(convertPast))
}
