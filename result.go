package slidelog

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/slidelog/slidelog/internal/reply"
)

// Result is one decision.
type Result struct {
	Allowed    bool          // the events were admitted (all of them, or none)
	Limit      Limit         // the limit that was applied
	Remaining  int           // events that could still be admitted right now
	RetryAfter time.Duration // denied: wait this long and the same request fits; allowed: 0
	ResetAfter time.Duration // until the window holds no event of this key

	at       int64  // the decision's time, µs since the Unix epoch
	handle   Handle // the events an admission recorded
	degraded bool   // Redis was unavailable and the policy answered
	fallback *Lease // AcquireN under FailLocal: the lease its fallback took, which the degraded Lease releases and renews
}

// Time is the time the decision was taken at, to the microsecond: Redis
// server time for the Redis limiter, the limiter's clock for slidelog/local.
// A Degraded answer that no one decided (FailOpen, shadow mode's admission
// of a failed call, the renewal of a lease that holds nothing) has this
// process's clock; FailLocal's has its fallback's.
// An admitted event is recorded at this instant, and RetryAfter and
// ResetAfter count from it.
func (r Result) Time() time.Time { return time.UnixMicro(r.at) }

// At returns r decided at t (truncated to the microsecond), for a Decider
// written outside this module: it sets what Time reports.
func (r Result) At(t time.Time) Result {
	r.at = t.UnixMicro()
	return r
}

// Degraded reports that Redis was unavailable and the limiter's Policy (or
// shadow mode) answered.
func (r Result) Degraded() bool { return r.degraded }

// Handle returns what Refund needs to take this admission's events back.
func (r Result) Handle() Handle { return r.handle }

// Handle names the events one admission recorded, so that Refund can take
// exactly those back. The zero Handle (of a denial) refunds nothing.
type Handle struct {
	key  string    // the log the events are in (one limit),
	all  *[]string // or the logs (AllowAll): a pointer keeps Result comparable
	id   [idLen]byte
	n    int
	user string // the caller's key

	window time.Duration // the longest window of its logs: its events count that long
	at     int64         // the time its events were recorded at (µs; 0: unknown), for a compact log's refund

	quotas  *[]quota     // the calendar quotas it counted in (a pointer keeps Result comparable)
	given   *atomic.Bool // a refund of its quotas or compact logs was given (they are no sets: one refund per Handle)
	compact bool         // a log of a limit over compactAbove: a compact log, unless it was a sorted set already
}

// quota is one calendar quota an admission counted in: its key and the
// end of the period it was counted in (µs; 0 unknown, for a take-back of
// an admission whose reply was lost: the quota's last admission, if it is
// this one).
type quota struct {
	key string
	end int64
}

// logs are the keys the events are in.
func (h Handle) logs() []string {
	if h.all != nil {
		return *h.all
	}
	return []string{h.key}
}

// decode reads script.lua's reply to one decision under limits
// (reply.Decode): the Result, with the limit that decided.
func decode(v any, limits []Limit) (Result, error) {
	if at, ok := reply.NeedsPeriod(v); ok {
		return Result{}, fmt.Errorf("slidelog: Redis' time %v is still outside the calendar periods sent after %d tries", time.UnixMicro(at).UTC(), maxPeriodTries)
	}
	d, err := reply.Decode(v, limits, size)
	if err != nil {
		return Result{}, err
	}
	return Result{Allowed: d.Allowed, Limit: limits[d.Which], Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, at: d.At}, nil
}

// size is what reply.Decode needs of a limit: its events, and its window
// in µs (a calendar quota: 0).
func size(l Limit) (events int, window int64) { return l.Events, l.micros() }

// setEnds names, in h, the end of the period each calendar quota among
// limits counted its admission in: the newest of the quota's triple in v
// (an admission's reply: script.lua).
func (h *Handle) setEnds(v any, limits []Limit) {
	if h.quotas == nil {
		return
	}
	newest := reply.Newest(v, len(limits))
	q := 0
	for i, lim := range limits {
		if lim.Calendar() && q < len(*h.quotas) {
			(*h.quotas)[q].end = newest[i]
			q++
		}
	}
}

// timedBy is h with the time its events were recorded at, read from v, its
// admission's reply (when v is one): a compact log keeps no ids, and a
// refund takes back events of that time.
func (h Handle) timedBy(v any) Handle {
	if at, ok := reply.At(v); ok {
		h.at = at
	}
	return h
}
