package slidelog

import (
	"testing"
	"time"

	"github.com/slidelog/slidelog/internal/breaker"
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

// The package's test helpers (servers_test.go), for its external tests.
var (
	RealRedis   = realRedis
	UniqueKey   = uniqueKey
	AttackAddrs = attackAddrs
	NewClient   = newClient
	LogLen      = logLen
	// a step of a model trace, and whether a Result is the model's
	RunStep      = runStep
	SameDecision = sameDecision
	// the type of a key ("zset", "string")
	StoreOf = storeOf
)

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

// Generous is a WithReplicas timeout that a healthy replica never reaches.
const Generous = generous

// BatchingModes are the two ways a limiter sends its decisions.
var BatchingModes = batchingModes

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

// BreakerEvents is a Hook that records the breaker's openings and
// closings; Ops lists their ops in order.
type BreakerEvents = breakerEvents

func (h *breakerEvents) Ops() []string { return h.ops() }

// RefundEvents is Refund's Redis part, on any client.
var RefundEvents = refundEvents
