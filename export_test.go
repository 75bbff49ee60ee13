package slidelog

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/breaker"
	"github.com/slidelog/slidelog/internal/denycache"
	"github.com/slidelog/slidelog/internal/takeback"
	"github.com/slidelog/slidelog/internal/transport"
)

// ScriptSources are the sources of the scripts the library runs, by file
// name, for the tests of package slidelog_test (script_commands_test.go).
var ScriptSources = map[string]string{
	"clock.lua":   clockLua,
	"log.lua":     logLua,
	"compact.lua": compactLua,
	"ids.lua":     idsLua,
	"script.lua":  scriptLua,
	"reset.lua":   resetSrc,
	"refund.lua":  refundLua,
	"renew.lua":   renewLua,
}

// Unavailable reports whether err is an error of a Redis that cannot
// decide (the errors a Policy answers).
var Unavailable = unavailable

// What the external tests read of a Limiter's inside.

// AllKeys is the base of an AllowAll's log keys and its index's key.
func (l *Limiter) AllKeys(key string) (base, index string) { return l.allKeys(key) }

// WindowKey is the key of an AllowAll's log of one window.
var WindowKey = windowKey

// BatchState is how many sends are in flight and how many decisions wait
// for one; ok is false without batching.
func (l *Limiter) BatchState() (flushing, queued int, ok bool) {
	if l.batch == nil {
		return 0, 0, false
	}
	flushing, queued = l.batch.State()
	return flushing, queued, true
}

// Waiting is how many Waits for key are in line.
func (l *Limiter) Waiting(key string) int { return l.waits.Waiting(key) }

// EachKeys is the keys each ask of an AllowEach writes.
func (l *Limiter) EachKeys(asks []Ask) ([][]string, error) {
	_, keys, err := l.checkEach(asks)
	return keys, err
}

// HandleID is the id of a Handle's first event, as Redis holds it.
func HandleID(h Handle) string { return string(h.id[:]) }

// RefundScript and RefundSrc are the refund script, as EVALSHA and EVAL
// send it.
var RefundScript, RefundSrc = refundScript, refundSrc

// SettleBreaker waits until the breaker's probe, if one is out, has
// decided.
func (l *Limiter) SettleBreaker(t *testing.T) { settled(t, l.breaker) }

// settled waits until the breaker's probe, if one runs, has decided: the
// breaker is open or nobody probes. A test then knows what its next call
// meets, however slowly the machine runs the probe.
func settled(t *testing.T, b *breaker.Breaker) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		if open, probing := b.State(); !probing || open {
			return
		}
		if time.Since(start) > time.Minute {
			t.Fatal("the breaker's probe did not decide within a minute")
		}
	}
}

// BreakerOpen reports whether the breaker is open.
func (l *Limiter) BreakerOpen() bool { return l.breaker.Open() }

// RefundEvents is Refund's Redis part, on any client.
var RefundEvents = refundEvents

// The decision script and the parts embed.go joins into it.
var (
	DecideScript    = decideScript
	DecideSrc       = decideSrc
	DecideSource    = decideSource
	DecideScriptFor = decideScriptFor
	ThresholdsLua   = thresholdsLua
	CountLua        = countLua
	PartsSrc        = partsSrc
	BlocklogLua     = blocklogLua
	Inline          = inline
)

// Decode reads script.lua's reply to one decision under limits.
var Decode = decode

// QuotaKey and PeriodsKey are where a calendar quota of a key counts, and
// the index of the key's quotas, from the base AllKeys returns.
var QuotaKey, PeriodsKey = quotaKey, periodsKey

// Panics is how the limiter's layers turn a panic into an error.
var Panics = panics

// The sizes limit.go defines for the scripts: the most events a compact
// log of slots holds, and the longest window.
const (
	MaxSlots  = maxSlots
	MaxWindow = maxWindow
)

// The ops a Hook hears for the breaker's openings and closings.
const (
	OpBreakerOpen  = opBreakerOpen
	OpBreakerClose = opBreakerClose
)

// Prefix is the prefix of the limiter's keys.
func (l *Limiter) Prefix() string { return l.prefix }

// DecisionScript is the limiter's decision script.
func (l *Limiter) DecisionScript() *redis.Script { return l.script }

// InflightKey is the key (without the prefix) of key's in-flight log.
func (l *Limiter) InflightKey(key string) string { return l.inflightKey(key) }

// AllArgsAt is the script call of an AllowAll of n events on key under
// limits (all), or of an Allow under limits[0]: its keys and arguments,
// with arg its first event id and a calendar quota's periods those around
// at.
func (l *Limiter) AllArgsAt(all bool, key string, n int, at time.Time, arg *idArg, limits ...Limit) (keys []string, args []any) {
	q := &request{op: opAllow, key: key, limit: limits[0], n: n}
	if all {
		q = &request{op: opAllowAll, key: key, limits: limits, n: n}
	}
	return l.allArgsAt(q, at, arg)
}

// AllArgs is AllowAll's script call, as the limiter builds it now: a log
// per limit, then their index; its first id is reserved from the limiter's
// ids.
func (l *Limiter) AllArgs(key string, n int, limits ...Limit) (keys []string, args []any, id [idLen]byte) {
	id = l.ids.Reserve(n)
	arg := &idArg{}
	arg.Set(id)
	keys, args = l.AllArgsAt(true, key, n, time.Now(), arg, limits...)
	return keys, args, id
}

// LostAdmission is the take-back the batcher queues for an Allow of one
// event on key under lim whose caller left: the Handle built from the
// request, timed by the admission's reply r.
func (l *Limiter) LostAdmission(key string, lim Limit, r Result) takeback.Job {
	q := request{op: opAllow, key: key, limit: lim, n: 1}
	h := l.handle(&q, []string{l.prefix + key}, r.handle.id)
	h.at = r.at
	return l.takeBack(h)
}

// TakeBacksQueued is how many take-backs wait in the limiter's queue.
func (l *Limiter) TakeBacksQueued() int { return l.takeBacks.Len() }

// SetClock sets the process's clock the limiter guesses calendar periods
// by before it knows Redis' time.
func (l *Limiter) SetClock(clock func() time.Time) { l.clock = clock }

// BreakerState is whether the breaker is open, and whether a probe is out.
func (l *Limiter) BreakerState() (open, probing bool) { return l.breaker.State() }

// BreakerOff reports whether the limiter runs without a breaker.
func (l *Limiter) BreakerOff() bool { return l.breaker.Off() }

// DenyCache is the limiter's deny cache (nil without WithDenyCache).
func (l *Limiter) DenyCache() *denycache.Cache[Limit] { return l.deny }

// SetDenyCache replaces the limiter's deny cache.
func (l *Limiter) SetDenyCache(c *denycache.Cache[Limit]) { l.deny = c }

// Plain reports that the limiter has no deny cache, policy, shadow mode or
// hook.
func (l *Limiter) Plain() bool { return l.plain }

// Batcher is the limiter's batcher (nil without batching).
func (l *Limiter) Batcher() *transport.Batcher { return l.batch }

// SetBatcher makes b the limiter's batcher and its transport.
func (l *Limiter) SetBatcher(b *transport.Batcher) { l.batch, l.transport = b, b }

// Acks is how the limiter waits for replicas (WithReplicas; nil without).
func (l *Limiter) Acks() *transport.Acks { return l.acks }

// HandleKey is the log a Handle's events are in (one limit).
func HandleKey(h Handle) string { return h.key }

// HandleAt is the time a Handle's events were recorded at (µs; 0 unknown).
func HandleAt(h Handle) int64 { return h.at }

// HandleN is how many events a Handle names.
func HandleN(h Handle) int { return h.n }

// HandleFinal is the cost a Handle's admission was settled to.
func HandleFinal(h Handle) int { return h.st.final }

// LostPeriods is h with the ends of its calendar quotas' periods unknown,
// as the take-back of an admission whose reply was lost names them.
func LostPeriods(h Handle) Handle {
	lost := make([]quota, len(*h.quotas))
	for i, q := range *h.quotas {
		lost[i] = quota{key: q.key}
	}
	h.quotas, h.given = &lost, new(atomic.Bool)
	return h
}
