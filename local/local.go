// Package local is slidelog's sliding window log in process: the same
// semantics as the Redis limiter (github.com/slidelog/slidelog), to the
// microsecond, for one process alone.
//
// It is what a service falls back to when Redis is unreachable (the
// FailLocal policy gives each instance Events/instances of the limit), and a
// limiter in its own right for a single process. A decision at time t counts
// the events admitted in (t-Window, t]; AllowN admits all n events or none,
// AllowAll under every one of its limits or none, AllowEach for every one of
// its keys or none; a denial records nothing; RetryAfter is the exact
// instant the same request fits; ResetAfter the instant the window empties.
// Times come from the clock (time.Now by default, WithClock to inject one)
// truncated to whole microseconds, like Redis' TIME.
//
// Exact by the times it reports. Result.Time() is the instant a decision was
// taken at, and no window (t-Window, t] of those instants ever holds more
// than Events admitted events of a key under a limit, however many
// goroutines call at once:
//   - the clock is read under the key's shard lock, so that decisions on a
//     key are taken in the order of their times (a caller preempted between
//     reading the clock and deciding would otherwise record an event in the
//     past); AllowEach holds the locks of all its keys' shards, taken in the
//     order of the shards, and decides all its keys at that one reading;
//   - a decision is never taken before the key's newest event: at the later
//     of the clock and the key's latest admission. A wall clock that steps
//     back holds a key's time at its newest event until the clock catches
//     up, so that its log stays in order, its admissions follow one another
//     in time, and a denial always waits 0 < RetryAfter <= Window. Nor is a
//     decision taken before every event the idle sweep dropped from its
//     shard had expired;
//   - only an admission writes: it drops the expired events of its window
//     and records its own, as the Redis script does. A Peek or a denial
//     changes nothing, so that it cannot change another caller's decision,
//     nor free, under a shorter window, events that a longer window of the
//     same key still counts.
//
// Memory follows the events recorded, never the limit. A log keeps runs of
// events admitted at one instant (the instant and a running count, 16
// bytes), in a ring that doubles when full and that an admission finding it
// at most a quarter full shrinks to twice what it holds: memory follows the
// distinct instants of the live events, AllowN of any n costs one run and
// O(1) time, a limit of 2^62 events a day costs nothing until events come,
// and a log that empties gives its memory back at its next admission (or to
// the idle sweep). RetryAfter finds the k-th oldest event by a binary search
// over the running counts.
//
// A Limiter is safe for concurrent use by multiple goroutines. Its keys are
// spread over shards with a mutex each; once a known key's ring has grown to
// its size, a denial or a Peek allocates nothing and an admission one small
// record (its Handle's, which Settle reads). Keys may hold any bytes: each
// key has one entry, its single-limit log (Allow, AllowN, Peek, an AllowEach
// ask of one limit) and one log per window for AllowAll (and an AllowEach
// ask of several), like the Redis limiter's keys, and Reset drops the
// entry. Keys whose every event has expired are evicted when a shard grows
// (a live key's expired logs with them).
package local

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/waiting"
)

// A Limiter takes the same decisions as slidelog.Limiter, in process.
var (
	_ slidelog.Decider = (*Limiter)(nil)
	_ slidelog.Eacher  = (*Limiter)(nil)
)

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock sets the clock the limiter reads. Default: time.Now. It is read
// under a shard's lock (so that decisions follow its times), and may step
// back: a key is then decided at its newest event until the clock catches
// up.
func WithClock(now func() time.Time) Option {
	return func(l *Limiter) { l.now = now }
}

// Limiter decides, for any number of keys, whether events fit their limits,
// in this process's memory. Build it with New.
type Limiter struct {
	now    func() time.Time
	seed   maphash.Seed
	shards [shardCount]shard
	waits  waiting.Lines // Wait's callers, in line per key
	held   holders       // the in-flight logs (AcquireN): see inflight.go
}

type shard struct {
	owner *Limiter // (its admissions' Handles name it)
	mu    sync.Mutex
	keys  map[string]*entry
	sweep int   // the size at which the shard next evicts idle keys
	floor int64 // µs: every event the sweep dropped has expired by then
}

// entry is one key's logs. A key is a map key of its own, whatever its
// bytes, so that no key can be taken for another or for one of its logs.
type entry struct {
	last   int64      // µs: the key's latest admission, its newest event
	one    eventLog   // Allow, AllowN and Peek: window of its last admission
	all    []eventLog // AllowAll: one log per window, as in Redis
	quotas []quota    // calendar quotas (Daily, Monthly): a count per quota, of its period
}

// quota is a calendar quota's count: of the period that ends at end (µs).
// Its limit, with no Events, names it: a quota per kind of period, anchor
// and location, whatever its events, as in Redis.
type quota struct {
	of    slidelog.Limit
	end   int64
	count int
}

// findQuota is the quota of lim, or nil.
func (en *entry) findQuota(lim slidelog.Limit) *quota {
	lim.Events = 0
	for i := range en.quotas {
		if en.quotas[i].of == lim {
			return &en.quotas[i]
		}
	}
	return nil
}

// run is the events admitted at one instant.
type run struct {
	at  int64  // µs
	end uint64 // the log's events recorded up to this run's, included (wraps)
}

// eventLog is one log's live events, oldest first: a ring of runs whose
// length is 0 or a power of two. The counts are running totals since the
// log began, modulo 2^64: a difference of two of them is exact because no
// log holds more than MaxInt events at once.
type eventLog struct {
	runs   []run
	head   int    // index of the oldest run
	n      int    // runs held
	total  uint64 // end of the newest run: events ever recorded
	gone   uint64 // end of the last run dropped: events expired
	window int64  // µs: the log's window (AllowAll), or its last admission's
}

const (
	shardCount = 64 // at most 64: AllowEach keeps the shards it locks in a uint64
	sweepAt    = 1024
	minRuns    = 4 // the smallest ring: 64 bytes
)

// New returns an empty Limiter.
func New(opts ...Option) *Limiter {
	l := &Limiter{now: time.Now, seed: maphash.MakeSeed()}
	for i, o := range opts {
		if o == nil {
			panic(fmt.Sprintf("slidelog/local: New: option %d is nil", i+1))
		}
		o(l)
	}
	for i := range l.shards {
		l.shards[i].keys = map[string]*entry{}
		l.shards[i].owner = l
		l.shards[i].sweep = sweepAt
		l.shards[i].floor = minTime
	}
	return l
}

const minTime = -1 << 63

// Allow is shorthand for AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit slidelog.Limit) (slidelog.Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN decides whether n events for key fit limit now, and records them if
// they do: all n, or none. Any n up to limit.Events takes one step and one
// run of the log.
func (l *Limiter) AllowN(_ context.Context, key string, limit slidelog.Limit, n int) (slidelog.Result, error) {
	if err := check(key, limit, n); err != nil {
		return slidelog.Result{}, err
	}
	return l.decide(key, []slidelog.Limit{limit}, n, true, false)
}

// Peek reports what Allow would decide now, and records nothing; its
// Remaining is the events that could be admitted now. It writes nothing at
// all, as in Redis: not even the drop of expired events.
func (l *Limiter) Peek(_ context.Context, key string, limit slidelog.Limit) (slidelog.Result, error) {
	if err := check(key, limit, 1); err != nil {
		return slidelog.Result{}, err
	}
	return l.decide(key, []slidelog.Limit{limit}, 1, false, false)
}

// AllowAll decides n events against several limits at once: every limit
// admits them, or none records anything. Result as slidelog's AllowAll.
// Each window has its own log, apart from the key's single-limit log even
// when there is one limit, as in Redis.
func (l *Limiter) AllowAll(_ context.Context, key string, n int, limits ...slidelog.Limit) (slidelog.Result, error) {
	return l.all(key, n, limits, true)
}

// PeekAll reports what AllowAll would decide now, and records nothing.
// Result as slidelog's PeekAll.
func (l *Limiter) PeekAll(_ context.Context, key string, n int, limits ...slidelog.Limit) (slidelog.Result, error) {
	return l.all(key, n, limits, false)
}

func (l *Limiter) all(key string, n int, limits []slidelog.Limit, record bool) (slidelog.Result, error) {
	if len(limits) == 0 {
		return slidelog.Result{}, fmt.Errorf("%w: AllowAll needs at least one limit", slidelog.ErrInvalidLimit)
	}
	if len(limits) > slidelog.MaxLimits {
		return slidelog.Result{}, fmt.Errorf("%w: AllowAll over %d limits, more than MaxLimits (%d)", slidelog.ErrInvalidLimit, len(limits), slidelog.MaxLimits)
	}
	if err := checkAll(key, n, limits); err != nil {
		return slidelog.Result{}, err
	}
	return l.decide(key, limits, n, record, true)
}

// checkAll reports why n events for key can never be decided against
// limits at once (AllowAll, and an AllowEach ask), or nil: each limit as
// AllowN checks it, and no two quotas of one period nor two windows alike.
// The number of limits is the caller's to check.
func checkAll(key string, n int, limits []slidelog.Limit) error {
	for _, lim := range limits {
		if err := check(key, lim, n); err != nil {
			return err
		}
	}
	sliding := limits
	if calendar(limits) {
		sliding = nil
		for i, lim := range limits {
			if !lim.Calendar() {
				sliding = append(sliding, lim)
				continue
			}
			for _, prev := range limits[:i] {
				a, b := prev, lim
				a.Events, b.Events = 0, 0
				if a == b {
					return fmt.Errorf("%w: two quotas of %v", slidelog.ErrInvalidLimit, lim)
				}
			}
		}
	}
	if w, ok := sharedWindow(sliding); ok {
		return fmt.Errorf("%w: two limits with the window %v", slidelog.ErrInvalidLimit, w)
	}
	return nil
}

// calendar reports whether some of limits are calendar quotas.
func calendar(limits []slidelog.Limit) bool {
	for _, lim := range limits {
		if lim.Calendar() {
			return true
		}
	}
	return false
}

// sharedWindow is a window two limits share (to the microsecond): without
// allocating for the few limits of a usual call.
func sharedWindow(limits []slidelog.Limit) (time.Duration, bool) {
	if len(limits) > 8 {
		seen := make(map[time.Duration]bool, len(limits))
		for _, lim := range limits {
			w := lim.Window.Truncate(time.Microsecond)
			if seen[w] {
				return w, true
			}
			seen[w] = true
		}
		return 0, false
	}
	for i, lim := range limits {
		w := lim.Window.Truncate(time.Microsecond)
		for _, prev := range limits[:i] {
			if prev.Window.Truncate(time.Microsecond) == w {
				return w, true
			}
		}
	}
	return 0, false
}

// Keys is how many keys the limiter holds logs of now (idle ones are
// evicted as the shards grow).
func (l *Limiter) Keys() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.keys)
		s.mu.Unlock()
	}
	return n
}

// Reset forgets every event of key, of its single-limit log and of every
// AllowAll log, at once: one map delete. Any key bytes are one key (a NUL is
// no separator).
func (l *Limiter) Reset(_ context.Context, key string) error {
	if key == "" {
		return slidelog.ErrEmptyKey
	}
	s := l.shard(key)
	s.mu.Lock()
	delete(s.keys, key)
	s.mu.Unlock()
	return nil
}

func check(key string, limit slidelog.Limit, n int) error {
	if key == "" {
		return slidelog.ErrEmptyKey
	}
	return limit.ValidateN(n)
}

func (l *Limiter) shard(key string) *shard { return &l.shards[l.shardOf(key)] }

// shardOf is the index of key's shard.
func (l *Limiter) shardOf(key string) int {
	return int(maphash.String(l.seed, key) % shardCount)
}

// errInternal never happens: a log with fewer live events than k.
var errInternal = errors.New("local: log shorter than its count")

// decide is AllowN (one limit, the single-limit log), Peek (!record) and
// AllowAll (all: a log per window).
func (l *Limiter) decide(key string, limits []slidelog.Limit, n int, record, all bool) (slidelog.Result, error) {
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()

	// The clock under the lock (time).
	en := s.keys[key]
	t := l.time(s, key)

	q := request{limits: limits, n: n, all: all}
	var views [4]view
	var ends [4]int64 // a quota's period's end (µs), 0 for a window
	rd := q.read(en, t, views[:0], ends[:0])
	switch {
	case rd.fits && record:
		return s.admit(key, q, rd, t), nil
	case rd.fits: // Peek
		return q.peek(rd, t), nil
	default:
		return q.deny(rd, t)
	}
}

// request is one key's part of a decision: n events against limits, in
// the key's single-limit log, or (all) in its AllowAll logs. (The key is
// apart: an admission keeps it, and a request that held it would keep its
// limits on the heap too.)
type request struct {
	limits []slidelog.Limit
	n      int
	all    bool
}

// reading is a request's limits read at a decision's time, without a
// write: each limit's live events, its quota's period's end (µs; 0 for a
// window), and whether the request fits them all.
type reading struct {
	vs   []view
	pend []int64
	fits bool
}

// read is q's reading at t of en, its key's entry (nil: none yet), under
// the lock of the key's shard; vs and pend are appended to.
//
// 1-2. Each limit's live events (of no log yet: none), and whether n fit.
// Nothing is written before the decision: only an admission drops the
// expired events, by its window, as in Redis.
func (q request) read(en *entry, t int64, vs []view, pend []int64) reading {
	n := q.n
	fits := true
	for _, lim := range q.limits {
		if lim.Calendar() {
			// a quota: its count, if it is of the period that holds t
			_, end, _ := lim.PeriodAt(time.UnixMicro(t))
			v := view{}
			if en != nil {
				if q := en.findQuota(lim); q != nil && q.end == end.UnixMicro() {
					v.count = q.count
				}
			}
			if v.count > lim.Events-n {
				fits = false
			}
			vs = append(vs, v)
			pend = append(pend, end.UnixMicro())
			continue
		}
		pend = append(pend, 0)
		w := int64(lim.Window / time.Microsecond)
		var e *eventLog
		if en != nil {
			if q.all {
				e = en.find(w)
			} else {
				e = &en.one
			}
		}
		v := e.live(t - w)
		// count + n <= Events, without overflow
		if v.count > lim.Events-n {
			fits = false
		}
		vs = append(vs, v)
	}
	return reading{vs: vs, pend: pend, fits: fits}
}

// admit records q's events for key at t, under the lock of its shard s: rd
// fits.
//
// 3. Admit: drop the expired events, record n at t. The key's entry is
// looked up again: an admission of another key of the shard in the same
// decision (AllowEach) may have swept it since rd was read. The sweep only
// drops events that had expired at t, and quotas of periods that had
// ended: what is left still fits.
func (s *shard) admit(key string, q request, rd reading, t int64) slidelog.Result {
	n := q.n
	r := slidelog.Result{Allowed: true, Remaining: -1}
	which := 0
	en := s.keys[key]
	if en == nil {
		if len(s.keys) >= s.sweep {
			s.evictIdle(t)
		}
		en = &entry{}
		s.keys[key] = en
	}
	en.last = t
	for i, lim := range q.limits {
		if end := rd.pend[i]; end != 0 {
			qu := en.findQuota(lim)
			if qu == nil {
				of := lim
				of.Events = 0
				en.quotas = append(en.quotas, quota{of: of})
				qu = &en.quotas[len(en.quotas)-1]
			}
			qu.end, qu.count = end, rd.vs[i].count+n
			if rem := lim.Events - qu.count; r.Remaining < 0 || rem < r.Remaining {
				which, r.Remaining = i, rem
			}
			r.ResetAfter = max(r.ResetAfter, time.Duration(end-t)*time.Microsecond)
			continue
		}
		// A new AllowAll log may move the others: each is found again.
		w := int64(lim.Window / time.Microsecond)
		e := &en.one
		if q.all {
			if e = en.find(w); e == nil {
				en.all = append(en.all, eventLog{})
				e = &en.all[len(en.all)-1]
			}
		}
		e.expire(t - w)
		e.window = w
		e.push(t, n)
		if rem := lim.Events - e.count(); r.Remaining < 0 || rem < r.Remaining {
			which, r.Remaining = i, rem
		}
		r.ResetAfter = max(r.ResetAfter, time.Duration(w)*time.Microsecond)
	}
	r.Limit = q.limits[which]
	r = r.At(time.UnixMicro(t))
	return r.WithAdmission(newAdmission(s.owner, en, key, q.limits, q.all, n, t))
}

// peek is what a Peek of q answers at t: rd fits, and nothing is written.
func (q request) peek(rd reading, t int64) slidelog.Result {
	r := slidelog.Result{Allowed: true, Remaining: -1}
	which := 0
	for i, lim := range q.limits {
		if rem := lim.Events - rd.vs[i].count; r.Remaining < 0 || rem < r.Remaining {
			which, r.Remaining = i, rem
		}
		r.ResetAfter = max(r.ResetAfter, resetAfter(rd.vs[i], t, lim, rd.pend[i]))
	}
	r.Limit = q.limits[which]
	return r.At(time.UnixMicro(t))
}

// deny is q's denial at t: rd does not fit, and nothing is written.
//
// 4. Deny: the same request fits once the k-th oldest live event has left,
// k = count + n - Events.
func (q request) deny(rd reading, t int64) (slidelog.Result, error) {
	n := q.n
	var r slidelog.Result
	which := 0
	r.Remaining = -1
	for i, lim := range q.limits {
		v := rd.vs[i]
		rem := lim.Events - v.count // below 0 after a smaller limit
		r.Remaining = minNonNeg(r.Remaining, max(rem, 0))
		if n > rem && rd.pend[i] != 0 { // a quota: at its period's end
			if ra := time.Duration(rd.pend[i]-t) * time.Microsecond; ra > r.RetryAfter {
				which, r.RetryAfter = i, ra
			}
		} else if n > rem {
			k := n - rem
			if k > v.count {
				return slidelog.Result{}, errInternal
			}
			if ra := time.Duration(v.kth(k)+int64(lim.Window/time.Microsecond)-t) * time.Microsecond; ra > r.RetryAfter {
				which, r.RetryAfter = i, ra
			}
		}
		r.ResetAfter = max(r.ResetAfter, resetAfter(v, t, lim, rd.pend[i]))
	}
	r.Limit = q.limits[which]
	return r.At(time.UnixMicro(t)), nil
}

// resetAfter is when the log of v, or the quota whose period ends at end
// (µs, not 0), holds no event.
func resetAfter(v view, t int64, lim slidelog.Limit, end int64) time.Duration {
	if end == 0 {
		return v.resetAfter(t, lim.Window)
	}
	if v.count == 0 {
		return 0
	}
	return time.Duration(end-t) * time.Microsecond
}

func minNonNeg(a, b int) int {
	if a < 0 || b < a {
		return b
	}
	return a
}

// evictIdle drops, at t, the expired events of every log of the shard, and
// the keys left with none. The floor then keeps every later decision of
// the shard at or after the instant all the dropped events had expired: a
// key decided again after a clock step back would not count them.
func (s *shard) evictIdle(t int64) {
	drop := func(e *eventLog) {
		if at, ok := e.expire(t - e.window); ok {
			s.floor = max(s.floor, at+e.window)
		}
	}
	for k, en := range s.keys {
		drop(&en.one)
		live := en.all[:0]
		for i := range en.all {
			if drop(&en.all[i]); en.all[i].n > 0 {
				live = append(live, en.all[i])
			}
		}
		clear(en.all[len(live):])
		en.all = live
		quotas := en.quotas[:0]
		for _, q := range en.quotas {
			if q.end > t {
				quotas = append(quotas, q)
			} else {
				s.floor = max(s.floor, q.end)
			}
		}
		clear(en.quotas[len(quotas):])
		en.quotas = quotas
		if en.one.n == 0 {
			en.one = eventLog{}
			if len(en.all) == 0 && len(en.quotas) == 0 {
				delete(s.keys, k)
			}
		}
	}
	s.sweep = max(sweepAt, 2*len(s.keys))
}

// find is the AllowAll log of window w, or nil.
func (en *entry) find(w int64) *eventLog {
	for i := range en.all {
		if en.all[i].window == w {
			return &en.all[i]
		}
	}
	return nil
}

// count is the events the log holds: after expire, its live ones.
func (e *eventLog) count() int { return int(e.total - e.gone) }

func (e *eventLog) slot(i int) *run { return &e.runs[(e.head+i)&(len(e.runs)-1)] }

// expire drops the events at or before cutoff, and reports the instant of
// the newest it dropped. A ring left at most a quarter full shrinks.
func (e *eventLog) expire(cutoff int64) (newest int64, dropped bool) {
	for e.n > 0 {
		r := e.slot(0)
		if r.at > cutoff {
			break
		}
		newest, dropped, e.gone = r.at, true, r.end
		e.head = (e.head + 1) & (len(e.runs) - 1)
		e.n--
	}
	if dropped && len(e.runs) > minRuns && e.n <= len(e.runs)/4 {
		e.resize(max(minRuns, ceilPow2(2*e.n)))
	}
	return newest, dropped
}

// push records n events at t, the log's newest instant or a later one.
func (e *eventLog) push(t int64, n int) {
	e.total += uint64(n)
	if e.n > 0 {
		if r := e.slot(e.n - 1); r.at == t {
			r.end = e.total
			return
		}
	}
	if e.n == len(e.runs) {
		e.resize(max(minRuns, 2*len(e.runs)))
	}
	*e.slot(e.n) = run{at: t, end: e.total}
	e.n++
}

// resize moves the runs to a ring of size c (a power of two, >= e.n).
func (e *eventLog) resize(c int) {
	runs := make([]run, c)
	for i := range e.n {
		runs[i] = *e.slot(i)
	}
	e.runs, e.head = runs, 0
}

// view is a log's live events at a decision, read without a write: the
// runs from first on, base the running count before them.
type view struct {
	e     *eventLog
	first int
	base  uint64
	count int
}

// live is the view of the events after cutoff (of a nil log: none). The
// runs are in order of their instants: a key's admissions follow one another
// in time.
func (e *eventLog) live(cutoff int64) view {
	if e == nil {
		return view{}
	}
	lo, hi := 0, e.n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if e.slot(mid).at > cutoff {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	v := view{e: e, first: lo, base: e.gone}
	if lo > 0 {
		v.base = e.slot(lo - 1).end
	}
	v.count = int(e.total - v.base)
	return v
}

// kth is the instant of the k-th oldest live event (1 <= k <= count): the
// first run whose running count reaches k.
func (v view) kth(k int) int64 {
	lo, hi := v.first, v.e.n-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if v.e.slot(mid).end-v.base >= uint64(k) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return v.e.slot(lo).at
}

// resetAfter is until the window holds no live event (0: none now).
func (v view) resetAfter(t int64, window time.Duration) time.Duration {
	if v.count == 0 {
		return 0
	}
	return time.Duration(v.e.slot(v.e.n-1).at-t)*time.Microsecond + window.Truncate(time.Microsecond)
}

func ceilPow2(n int) int {
	c := 1
	for c < n {
		c <<= 1
	}
	return c
}
