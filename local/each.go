package local

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/slidelog/slidelog"
)

// The shards an AllowEach locks are the bits of a uint64: a shardCount
// over 64 does not compile.
const _ = uint64(1) << (shardCount - 1)

// AllowEach decides several keys' requests at once: every ask is admitted,
// its N events recorded against each of its limits, or none records
// anything. An ask of one limit is decided as AllowN decides it (in the
// key's single-limit log), an ask of several as AllowAll does (a log per
// window, calendar quotas among them), so that AllowEach, AllowN and
// AllowAll on one key see each other's events. A request admitted by one
// key's limits but denied by another's spends nothing of the first.
//
// It is one decision, atomic with respect to every other decision of the
// limiter: it holds the lock of every shard its keys are in (taken in the
// order of the shards, so that concurrent calls never deadlock) and decides
// every ask at one time t (Result.Time of every Result): the clock read
// under the locks, never before any of its keys' newest event nor before
// the events its shards' idle sweeps dropped had expired, as AllowN takes
// it for one key.
//
// The Results are one per ask, in order, each with its own Limit,
// Remaining and ResetAfter, as AllowN or AllowAll would report for that ask
// alone. When denied, no Result is Allowed and every RetryAfter is the same:
// the largest per-ask RetryAfter, the instant at which every ask fits. Then
// an ask that fits on its own reports as Peek would: Remaining is what its
// tightest limit has left without this request, and Limit that limit.
//
// Bad input writes nothing and returns nil Results and an error (test with
// errors.Is): no ask at all, an ask without limits, two asks of one key
// (put both limits in one ask), or over MaxLimits limits in all, wrap
// slidelog.ErrInvalidLimit; an empty Key wraps slidelog.ErrEmptyKey; an ask
// that AllowN or AllowAll would refuse (N against each limit, two limits of
// one window, two quotas of one period) wraps the error they would return.
// The context is not used: the decision is in memory.
func (l *Limiter) AllowEach(_ context.Context, asks ...slidelog.Ask) ([]slidelog.Result, error) {
	total, err := checkEach(asks)
	if err != nil {
		return nil, err
	}

	var locked uint64 // the shards, a bit each: locked in the order of their index
	for _, a := range asks {
		locked |= 1 << l.shardOf(a.Key)
	}
	for m := locked; m != 0; m &= m - 1 {
		l.shards[bits.TrailingZeros64(m)].mu.Lock()
	}
	defer func() {
		for m := locked; m != 0; m &= m - 1 {
			l.shards[bits.TrailingZeros64(m)].mu.Unlock()
		}
	}()

	// The clock under the locks, and never before any key's newest event
	// nor before every event the sweep dropped from its shard had expired.
	t := l.now().UnixMicro()
	for m := locked; m != 0; m &= m - 1 {
		t = max(t, l.shards[bits.TrailingZeros64(m)].floor)
	}
	for _, a := range asks {
		if en := l.shard(a.Key).keys[a.Key]; en != nil {
			t = max(t, en.last)
		}
	}

	// Every ask read at t before anything is written.
	qs := make([]request, len(asks))
	rds := make([]reading, len(asks))
	views := make([]view, total) // each ask's part in turn
	ends := make([]int64, total)
	fits := true
	for i, a := range asks {
		qs[i] = request{limits: a.Limits, n: a.N, all: len(a.Limits) > 1}
		k := len(a.Limits)
		rds[i] = qs[i].read(l.shard(a.Key).keys[a.Key], t, views[:0:k], ends[:0:k])
		views, ends = views[k:], ends[k:]
		fits = fits && rds[i].fits
	}

	rs := make([]slidelog.Result, len(asks))
	if fits {
		for i, a := range asks {
			rs[i] = l.shard(a.Key).admit(a.Key, qs[i], rds[i], t)
		}
		return rs, nil
	}
	var retry time.Duration
	for i := range asks {
		if rds[i].fits {
			rs[i] = qs[i].peek(rds[i], t)
			rs[i].Allowed = false
			continue
		}
		if rs[i], err = qs[i].deny(rds[i], t); err != nil {
			return nil, err
		}
		retry = max(retry, rs[i].RetryAfter)
	}
	for i := range rs {
		rs[i].RetryAfter = retry
	}
	return rs, nil
}

// checkEach reports why asks can never be decided (AllowEach's bad input),
// or nil and the number of their limits.
func checkEach(asks []slidelog.Ask) (total int, err error) {
	if len(asks) == 0 {
		return 0, fmt.Errorf("%w: AllowEach needs at least one ask", slidelog.ErrInvalidLimit)
	}
	for i, a := range asks {
		if a.Key == "" {
			return 0, fmt.Errorf("%w: AllowEach's ask %d", slidelog.ErrEmptyKey, i)
		}
		if len(a.Limits) == 0 {
			return 0, fmt.Errorf("%w: AllowEach's ask %d has no limit", slidelog.ErrInvalidLimit, i)
		}
		total += len(a.Limits)
	}
	if total > slidelog.MaxLimits {
		return 0, fmt.Errorf("%w: AllowEach over %d limits, more than MaxLimits (%d)", slidelog.ErrInvalidLimit, total, slidelog.MaxLimits)
	}
	// at most MaxLimits asks: each pair compared
	for i, a := range asks {
		for j, prev := range asks[:i] {
			if prev.Key == a.Key {
				return 0, fmt.Errorf("%w: AllowEach's asks %d and %d have one key: put both limits in one ask", slidelog.ErrInvalidLimit, j, i)
			}
		}
	}
	for i, a := range asks {
		if err := checkAll(a.Key, a.N, a.Limits); err != nil {
			return 0, fmt.Errorf("AllowEach's ask %d: %w", i, err)
		}
	}
	return total, nil
}
