package slidelog

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/config"
	"github.com/slidelog/slidelog/internal/ids"
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
	//go:embed blocklog.lua
	blocklogLua string
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
	//go:embed need.lua
	needLua string

	// sizesLua gives the scripts the sizes limit.go defines: the most
	// slots a compact log of slots has (maxSlots), so that its reader
	// refuses exactly what its writer can never write.
	sizesLua = fmt.Sprintf("local maxSlots = %d -- maxSlots (limit.go)\n", maxSlots)

	// countLua gives them where counts stop: a quota's (config.MaxCount)
	// and a sliding window's log's live events (config.DefaultMaxLive);
	// and the most ids an admission takes (ids.MaxSpan).
	countLua = fmt.Sprintf("local maxCount, maxLive, maxSpan = %d, %d, %d -- config.MaxCount, config.DefaultMaxLive, ids.MaxSpan\n", config.MaxCount, config.DefaultMaxLive, ids.MaxSpan)

	// thresholdsLua gives script.lua its thresholds: convertPast, the live
	// events past which an admission turns a sorted set the client keeps
	// compactly (a negated window) into a compact log: a listpack's 128
	// members, past which Redis keeps a sorted set as a skiplist
	// (config.DefaultConvertPast; a Limiter configured otherwise runs
	// decideSource's script).
	thresholdsLua = "local convertPast = 128 -- a listpack's members (zset-max-listpack-entries)\n"

	// formatLua gives script.lua the format a sorted set of a limit kept
	// compactly becomes: blockLog true (the default), a block log of an
	// entry per admission (blocklog.lua); false, a compact log of a slot
	// per event (compact.lua; config.Config.BlockLog). A decision reads
	// either, whatever this says.
	formatLua = "local blockLog = true -- config.Config.BlockLog\n"

	// partsSrc is need(part) (need.lua): a log's layout and a quota's code
	// (log.lua), the compact log's code (compact.lua), the block log's
	// (blocklog.lua) and the event ids' derivation (ids.lua), each made
	// only by a call that asks for it.
	partsSrc = inline(needLua, map[string]string{"log.lua": logLua, "compact.lua": compactLua, "blocklog.lua": blocklogLua, "ids.lua": idsLua})

	// The sources as Redis runs them: the sizes and thresholds, need (the
	// shared files), the clock, then the script. need comes before the
	// clock, whose locals (call, tonumber, KEYS, ARGV) its functions would
	// otherwise capture, which every call would pay for.
	// scripts/luaops.lua joins what decideSrc names, in its order.
	decideSrc = sizesLua + countLua + thresholdsLua + formatLua + partsSrc + clockLua + scriptLua
	renewSrc  = clockLua + idsLua + renewLua
	refundSrc = sizesLua + countLua + partsSrc + refundLua

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

// inline is src with each line "--[[NAME]]" replaced by files[NAME]; it
// panics on a name files lacks, or one left unused, which the package's
// tests would meet first.
func inline(src string, files map[string]string) string {
	used := 0
	var b strings.Builder
	for line := range strings.Lines(src) {
		marker := strings.TrimSpace(line)
		name, isName := strings.CutPrefix(marker, "--[[")
		name, closed := strings.CutSuffix(name, "]]")
		if !isName || !closed || strings.ContainsAny(name, " []") {
			b.WriteString(line)
			continue
		}
		text, found := files[name]
		if !found {
			panic("slidelog: need.lua names " + name + ", which embed.go does not join")
		}
		used++
		b.WriteString(text)
	}
	if used != len(files) {
		panic("slidelog: need.lua does not name every file embed.go joins into it")
	}
	return b.String()
}

// decideSource is the decision script's source where a sorted set of a
// limit kept compactly becomes a compact log past convertPast live events,
// a block log if blockLog, and a log's live events stop at maxLive:
// decideSrc with its thresholdsLua, formatLua and countLua lines giving
// them.
func decideSource(convertPast int, blockLog bool, maxLive int) string {
	line := fmt.Sprintf("local convertPast = %d -- config.Config.ConvertPast\n", convertPast)
	src := strings.Replace(decideSrc, thresholdsLua, line, 1)
	src = strings.Replace(src, countLua, fmt.Sprintf("local maxCount, maxLive, maxSpan = %d, %d, %d -- config.MaxCount, config.Config.MaxLive, ids.MaxSpan\n", config.MaxCount, maxLive, ids.MaxSpan), 1)
	return strings.Replace(src, formatLua, fmt.Sprintf("local blockLog = %t -- config.Config.BlockLog\n", blockLog), 1)
}

// decideScriptFor is the decision script of a Limiter configured with
// convertPast, blockLog and maxLive: decideScript's for the defaults.
func decideScriptFor(convertPast int, blockLog bool, maxLive int) *redis.Script {
	if convertPast == config.DefaultConvertPast && blockLog && maxLive == config.DefaultMaxLive {
		return decideScript
	}
	return redis.NewScript(decideSource(convertPast, blockLog, maxLive))
}
