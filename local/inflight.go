package local

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/slidelog/slidelog"
)

// A Limiter takes the same in-flight decisions as slidelog.Limiter, in
// process.
var _ slidelog.Acquirer = (*Limiter)(nil)

// holders keeps the in-flight logs: a Limiter of their own, made at the
// first acquisition, with the same clock. Apart from the rate logs, as in
// Redis: an acquisition never counts against Allow of the same key, nor
// Allow against it, Reset does not release holders, and Keys counts the
// rate logs' keys only.
type holders struct {
	once sync.Once
	l    *Limiter
}

// holders is the limiter of l's in-flight logs.
func (l *Limiter) holders() *Limiter {
	l.held.once.Do(func() { l.held.l = New(WithClock(l.now)) })
	return l.held.l
}

// Acquire is shorthand for AcquireN(ctx, key, limit, 1).
func (l *Limiter) Acquire(ctx context.Context, key string, limit slidelog.Limit) (slidelog.Lease, error) {
	return l.AcquireN(ctx, key, limit, 1)
}

// AcquireN takes n slots of key's in-flight limit (slidelog.InFlight) if
// they are free now, all n or none, as slidelog.Limiter's AcquireN does:
// the same decision (AllowN on key's in-flight log, apart from its rate
// logs), and a Lease whose Release takes back exactly this acquisition's
// events and whose Renew moves them to now.
//
// A release takes n events off the run of the acquisition's instant (and
// the running counts after it), and drops the run if it empties: what is
// left is the log the other acquisitions would have made alone. A renewal
// moves them to a run at now, as an admission then would record them. Both
// run under the key's shard lock, at the clock's time, never before the
// log's newest event. Release is idempotent and a no-op once the events
// have left the window; Renew then fails with slidelog.ErrNotHeld. Reset
// does not touch in-flight logs: as in Redis, it never releases holders.
//
// Exact by the times it reports: an acquisition at t (Result.Time) is
// admitted only if the slots held at t, acquired or last renewed in
// (t-lease, t] and not released, leave room for its n, so no instant ever
// has more than limit.Events slots held, however many goroutines call.
func (l *Limiter) AcquireN(ctx context.Context, key string, limit slidelog.Limit, n int) (slidelog.Lease, error) {
	if limit.Calendar() {
		return slidelog.NewLease(slidelog.Result{}, nil), fmt.Errorf("%w: %v is a calendar quota, not an in-flight limit", slidelog.ErrInvalidLimit, limit)
	}
	if n > slidelog.MaxAcquireN && key != "" && limit.ValidateN(n) == nil {
		// (as the Redis limiter refuses it: the same errors, in its order)
		return slidelog.NewLease(slidelog.Result{}, nil), fmt.Errorf("%w: AcquireN of %d > MaxAcquireN (%d)", slidelog.ErrInvalidN, n, slidelog.MaxAcquireN)
	}
	h := l.holders()
	r, err := h.AllowN(ctx, key, limit, n)
	if err != nil || !r.Allowed {
		return slidelog.NewLease(r, nil), err
	}
	s := &slot{l: h, key: key, limit: limit, n: n, at: r.Time().UnixMicro()}
	return slidelog.NewLease(r, s.release).WithRenew(s.renew), nil
}

// slot is one acquisition's events in an in-flight log: n events at the
// instant at. Its fields after n are guarded by the lock of key's shard.
type slot struct {
	l     *Limiter // the in-flight logs' limiter
	key   string
	limit slidelog.Limit
	n     int

	at       int64 // µs: the instant of its events (the acquisition's, or the last renewal's)
	released bool
}

// release takes the slot's events back, once.
func (s *slot) release(context.Context) error {
	sh := s.l.shard(s.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.released {
		return nil
	}
	s.released = true
	if en := sh.keys[s.key]; en != nil {
		en.one.take(s.at, s.n)
	}
	return nil
}

// renew moves the slot's events to now, while they are still in the window.
func (s *slot) renew(context.Context) (slidelog.Result, error) {
	sh := s.l.shard(s.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.released {
		return slidelog.Result{}, fmt.Errorf("%w: it was released", slidelog.ErrNotHeld)
	}
	en := sh.keys[s.key]
	t := max(s.l.now().UnixMicro(), sh.floor)
	if en != nil {
		t = max(t, en.last)
	}
	w := int64(s.limit.Window / time.Microsecond)
	// Its events are in the log while their run is: runs are dropped whole,
	// and no later run is made at an instant the log has left behind.
	if en == nil || s.at <= t-w || !en.one.take(s.at, s.n) {
		return slidelog.Result{}, fmt.Errorf("%w: its lease ran out", slidelog.ErrNotHeld)
	}
	e := &en.one
	e.expire(t - w)
	e.window = w
	e.push(t, s.n)
	en.last = t
	s.at = t
	return slidelog.Result{
		Allowed:    true,
		Limit:      s.limit,
		Remaining:  max(s.limit.Events-e.count(), 0),
		ResetAfter: time.Duration(w) * time.Microsecond,
	}.At(time.UnixMicro(t)), nil
}

// take removes n of the events recorded at the instant at, if the log still
// has a run there, and reports whether it had. The runs after it count n
// fewer (or, when fewer runs come before it, the runs before it and the
// expired ones count n more: the differences are the same), and a run left
// empty is dropped, moving the runs on its shorter side.
func (e *eventLog) take(at int64, n int) bool {
	lo, hi := 0, e.n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if e.slot(mid).at < at {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	i := lo
	if i == e.n || e.slot(i).at != at {
		return false
	}
	if i < e.n-i {
		for j := range i {
			e.slot(j).end += uint64(n)
		}
		e.gone += uint64(n)
	} else {
		for j := i; j < e.n; j++ {
			e.slot(j).end -= uint64(n)
		}
		e.total -= uint64(n)
	}
	before := e.gone
	if i > 0 {
		before = e.slot(i - 1).end
	}
	if e.slot(i).end != before {
		return true
	}
	if i < e.n-1-i {
		for j := i; j > 0; j-- {
			*e.slot(j) = *e.slot(j - 1)
		}
		e.head = (e.head + 1) & (len(e.runs) - 1)
	} else {
		for j := i; j < e.n-1; j++ {
			*e.slot(j) = *e.slot(j + 1)
		}
	}
	e.n--
	return true
}
