// Package local is slidelog's sliding window log in process: the same
// semantics as the Redis limiter (github.com/slidelog/slidelog), to the
// microsecond, for one process alone.
//
// It is what a service falls back to when Redis is unreachable (the
// FailLocal policy gives each instance Events/instances of the limit), and a
// limiter in its own right for a single process. A decision at time t counts
// the events admitted in (t-Window, t]; AllowN admits all n events or none;
// a denial records nothing; RetryAfter is the exact instant the same request
// fits; ResetAfter the instant the window empties. Times come from the
// clock (time.Now by default, WithClock to inject one) truncated to whole
// microseconds, like Redis' TIME.
//
// A Limiter is safe for concurrent use by multiple goroutines. Its keys are
// spread over shards with a mutex each; a key's log is a ring of at most
// Events timestamps, allocated once, so that a decision on a known key
// allocates nothing. Keys whose every event has expired are evicted.
package local

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
	"unsafe"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/resulttime"
)

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock sets the clock the limiter reads. Default: time.Now.
func WithClock(now func() time.Time) Option {
	return func(l *Limiter) { l.now = now }
}

// Limiter decides, for any number of keys, whether events fit their limits,
// in this process's memory. Build it with New.
type Limiter struct {
	now    func() time.Time
	seed   maphash.Seed
	shards [64]shard
}

type shard struct {
	mu    sync.Mutex
	logs  map[string]*eventLog
	sweep int // the size at which the shard next evicts idle keys
}

// eventLog is one key's admitted events, oldest first, in a ring.
type eventLog struct {
	times  []int64 // ring storage, µs
	head   int     // index of the oldest event
	size   int
	window int64 // µs, of the last limit it was decided with: when it empties
}

const sweepAt = 1024

// New returns an empty Limiter.
func New(opts ...Option) *Limiter {
	l := &Limiter{now: time.Now, seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(l)
	}
	for i := range l.shards {
		l.shards[i].logs = map[string]*eventLog{}
		l.shards[i].sweep = sweepAt
	}
	return l
}

// Allow is shorthand for AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit slidelog.Limit) (slidelog.Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN decides whether n events for key fit limit now, and records them if
// they do: all n, or none.
func (l *Limiter) AllowN(_ context.Context, key string, limit slidelog.Limit, n int) (slidelog.Result, error) {
	if err := check(key, limit, n); err != nil {
		return slidelog.Result{}, err
	}
	return l.decide(key, []slidelog.Limit{limit}, n, true)
}

// Peek reports what Allow would decide now, and records nothing; its
// Remaining is the events that could be admitted now.
func (l *Limiter) Peek(_ context.Context, key string, limit slidelog.Limit) (slidelog.Result, error) {
	if err := check(key, limit, 1); err != nil {
		return slidelog.Result{}, err
	}
	return l.decide(key, []slidelog.Limit{limit}, 1, false)
}

// AllowAll decides n events against several limits at once: every limit
// admits them, or none records anything. Result as slidelog's AllowAll.
func (l *Limiter) AllowAll(_ context.Context, key string, n int, limits ...slidelog.Limit) (slidelog.Result, error) {
	if len(limits) == 0 {
		return slidelog.Result{}, fmt.Errorf("%w: AllowAll needs at least one limit", slidelog.ErrInvalidLimit)
	}
	seen := make(map[time.Duration]bool, len(limits))
	for _, lim := range limits {
		if err := check(key, lim, n); err != nil {
			return slidelog.Result{}, err
		}
		w := lim.Window.Truncate(time.Microsecond)
		if seen[w] {
			return slidelog.Result{}, fmt.Errorf("%w: two limits with the window %v", slidelog.ErrInvalidLimit, w)
		}
		seen[w] = true
	}
	return l.decide(key, limits, n, true)
}

// Keys is how many logs the limiter holds now (idle ones are evicted as
// the shards grow).
func (l *Limiter) Keys() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.logs)
		s.mu.Unlock()
	}
	return n
}

// Reset forgets every event of key.
func (l *Limiter) Reset(_ context.Context, key string) error {
	if key == "" {
		return slidelog.ErrEmptyKey
	}
	s := l.shard(key)
	s.mu.Lock()
	for w := range s.logs {
		if logKey(w) == key {
			delete(s.logs, w)
		}
	}
	s.mu.Unlock()
	return nil
}

func check(key string, limit slidelog.Limit, n int) error {
	if key == "" {
		return slidelog.ErrEmptyKey
	}
	return limit.ValidateN(n)
}

func (l *Limiter) shard(key string) *shard {
	return &l.shards[maphash.String(l.seed, key)%uint64(len(l.shards))]
}

// A key with one limit keeps its log under the key itself; with several
// (AllowAll), each window's log is under key + "\x00" + the window, like the
// Redis limiter's one key per window.
func windowKey(key string, w int64) string {
	var b [8]byte
	for i := range b {
		b[i] = byte(w >> (56 - 8*i))
	}
	return key + "\x00" + string(b[:])
}

// logKey is the caller's key of a log's map key.
func logKey(k string) string {
	if len(k) > 9 && k[len(k)-9] == 0 {
		return k[:len(k)-9]
	}
	return k
}

// errInternal never happens: a log with fewer live events than k.
var errInternal = errors.New("local: log shorter than its count")

func (l *Limiter) decide(key string, limits []slidelog.Limit, n int, record bool) (slidelog.Result, error) {
	t := l.now().UnixMicro()
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()

	// 1-2. Each limit's log, its expired events dropped, and whether n fit.
	var logs [4]*eventLog
	var names [4]string
	lg, newKeys := logs[:0], names[:0]
	fits := true
	for _, lim := range limits {
		w := int64(lim.Window / time.Microsecond)
		k := key
		if len(limits) > 1 {
			k = windowKey(key, w)
		}
		e := s.logs[k]
		if e == nil {
			e = &eventLog{}
			newKeys = append(newKeys, k)
		} else {
			newKeys = append(newKeys, "")
		}
		e.window = w
		e.expire(t - w)
		if e.size+n > lim.Events {
			fits = false
		}
		lg = append(lg, e)
	}

	var r slidelog.Result
	which := 0
	if fits {
		r.Allowed = true
		r.Remaining = -1
		for i, lim := range limits {
			e := lg[i]
			if record {
				e.push(t, n, lim.Events)
				if newKeys[i] != "" {
					s.add(newKeys[i], e, t)
				}
			}
			if rem := lim.Events - e.size; r.Remaining < 0 || rem < r.Remaining {
				which, r.Remaining = i, rem
			}
			r.ResetAfter = max(r.ResetAfter, e.resetAfter(t))
		}
	} else {
		r.Remaining = -1
		for i, lim := range limits {
			e := lg[i]
			r.Remaining = minNonNeg(r.Remaining, max(lim.Events-e.size, 0))
			if k := e.size + n - lim.Events; k > 0 {
				if k > e.size {
					return slidelog.Result{}, errInternal
				}
				if ra := time.Duration(e.at(k-1)+e.window-t) * time.Microsecond; ra > r.RetryAfter {
					which, r.RetryAfter = i, ra
				}
			}
			r.ResetAfter = max(r.ResetAfter, e.resetAfter(t))
		}
	}
	r.Limit = limits[which]
	resulttime.Set(unsafe.Pointer(&r), t)
	return r, nil
}

func minNonNeg(a, b int) int {
	if a < 0 || b < a {
		return b
	}
	return a
}

// add stores a new log, evicting idle ones when the shard has grown.
func (s *shard) add(k string, e *eventLog, t int64) {
	if len(s.logs) >= s.sweep {
		for k, old := range s.logs {
			if old.size == 0 || old.at(old.size-1) <= t-old.window {
				delete(s.logs, k)
			}
		}
		s.sweep = max(sweepAt, 2*len(s.logs))
	}
	s.logs[k] = e
}

// expire drops the events at or before cutoff.
func (e *eventLog) expire(cutoff int64) {
	for e.size > 0 && e.times[e.head] <= cutoff {
		e.head = (e.head + 1) % len(e.times)
		e.size--
	}
}

// at is the i-th oldest event (0-based).
func (e *eventLog) at(i int) int64 { return e.times[(e.head+i)%len(e.times)] }

// push records n events at t, growing the ring to hold events if needed.
func (e *eventLog) push(t int64, n, events int) {
	if need := max(events, e.size+n); len(e.times) < need {
		grown := make([]int64, need)
		for i := range e.size {
			grown[i] = e.at(i)
		}
		e.times, e.head = grown, 0
	}
	for range n {
		e.times[(e.head+e.size)%len(e.times)] = t
		e.size++
	}
}

// resetAfter is until the log holds no live event.
func (e *eventLog) resetAfter(t int64) time.Duration {
	if e.size == 0 {
		return 0
	}
	return time.Duration(e.at(e.size-1)+e.window-t) * time.Microsecond
}
