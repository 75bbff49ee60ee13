package local

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/config"
)

// A Limiter settles costs as slidelog.Limiter does.
var _ slidelog.Settler = (*Limiter)(nil)

// admission is what Settle needs of one admission: the Handle of its
// Result names it.
type admission struct {
	l      *Limiter
	en     *entry // its key's entry when it was admitted (a Reset or the idle sweep makes another)
	key    string
	limits []slidelog.Limit // its limits: in inline when they fit
	all    bool             // its logs are the key's AllowAll logs
	n      int              // its events
	at     int64            // µs: when they were recorded
	inline [2]slidelog.Limit

	mu   sync.Mutex
	done bool // settled
}

// newAdmission is the record of an admission of n events for key under
// limits at t: the one allocation an admission makes (its Handle's).
func newAdmission(l *Limiter, en *entry, key string, limits []slidelog.Limit, all bool, n int, t int64) *admission {
	a := &admission{l: l, en: en, key: key, all: all, n: n, at: t}
	if len(limits) <= len(a.inline) {
		a.limits = append(a.inline[:0], limits...)
	} else {
		a.limits = append([]slidelog.Limit(nil), limits...)
	}
	return a
}

// Settle records what the admission h (the Result.Handle of an AllowN,
// AllowAll or AllowEach of this Limiter) actually cost, as
// slidelog.Limiter's Settle: actual < n gives back n-actual of its events
// (in every log and quota it counted in: a quota only while its period
// lasts), actual > n records actual-n more now whatever the logs hold,
// and the Result is the key's state after it, as a Peek of one event. A
// Handle settles once; a second Settle changes nothing and answers the
// key's state. actual may exceed a limit's Events, as far as
// slidelog.Limit.ValidateUsage allows. The context is not used.
func (l *Limiter) Settle(_ context.Context, h slidelog.Handle, actual int) (slidelog.Result, error) {
	a, _ := h.Admission().(*admission)
	if a == nil || a.l != l {
		return slidelog.Result{}, fmt.Errorf("%w: Settle of a Handle that is no admission of this Limiter", slidelog.ErrInvalidN)
	}
	if actual < 0 {
		return slidelog.Result{}, fmt.Errorf("%w: Settle to %d < 0", slidelog.ErrInvalidN, actual)
	}
	for _, lim := range a.limits {
		if err := lim.ValidateUsage(max(actual, 1)); actual > a.n && err != nil {
			return slidelog.Result{}, fmt.Errorf("Settle to %d: %w", actual, err)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	q := request{limits: a.limits, n: 1, all: a.all}
	s := l.shard(a.key)
	s.mu.Lock()
	defer s.mu.Unlock()
	t := l.time(s, a.key)
	if !a.done {
		a.done = true
		switch {
		case actual < a.n && s.keys[a.key] == a.en:
			// (its entry gone: Reset, or every event of it expired and
			// swept; another entry's events of that instant are not its)
			s.giveBack(a.key, q, a.at, a.n-actual)
		case actual > a.n:
			s.force(a.key, q, actual-a.n, t)
		}
	}
	return q.after(s.keys[a.key], t)
}

// Charge records n events for key now in every limit's log (one limit: its
// single-limit log; several: the AllowAll logs), whatever they hold, as
// slidelog.Limiter's Charge: never refused; the Result is the key's state
// after it, as a Peek of one event. n may exceed a limit's Events, as far
// as slidelog.Limit.ValidateUsage allows. The context is not used.
func (l *Limiter) Charge(_ context.Context, key string, n int, limits ...slidelog.Limit) (slidelog.Result, error) {
	switch {
	case len(limits) == 0:
		return slidelog.Result{}, fmt.Errorf("%w: Charge needs at least one limit", slidelog.ErrInvalidLimit)
	case len(limits) > slidelog.MaxLimits:
		return slidelog.Result{}, fmt.Errorf("%w: Charge over %d limits, more than MaxLimits (%d)", slidelog.ErrInvalidLimit, len(limits), slidelog.MaxLimits)
	}
	if err := checkAll(key, 1, limits); err != nil {
		return slidelog.Result{}, err
	}
	for _, lim := range limits {
		if err := lim.ValidateUsage(n); err != nil {
			return slidelog.Result{}, err
		}
	}
	q := request{limits: limits, n: 1, all: len(limits) > 1}
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	t := l.time(s, key)
	recorded := s.force(key, q, n, t)
	r, err := q.after(s.keys[key], t)
	if err == nil && recorded {
		r = r.WithAdmission(newAdmission(l, s.keys[key], key, q.limits, q.all, n, t))
	}
	return r, err
}

// time is the time of a decision on key, under the lock of its shard s:
// the clock, never before the key's newest event nor before every event
// the sweep dropped had expired.
func (l *Limiter) time(s *shard, key string) int64 {
	t := max(l.now().UnixMicro(), s.floor)
	if en := s.keys[key]; en != nil {
		t = max(t, en.last)
	}
	return t
}

// after is the state of en's logs of q (n: 1) at t: a Peek of one event.
func (q request) after(en *entry, t int64) (slidelog.Result, error) {
	var views [4]view
	var ends [4]int64
	rd := q.read(en, t, views[:0], ends[:0])
	if rd.fits {
		return q.peek(rd, t), nil
	}
	return q.deny(rd, t)
}

// force records n events for key at t in every log and quota of q's
// limits, whatever they hold: admit's writes, without its check. A charge
// that would take a log past the most it counts (config.DefaultMaxLive
// live events; a quota, config.MaxCount) is recorded nowhere, as in
// Redis: force reports whether it recorded.
func (s *shard) force(key string, q request, n int, t int64) bool {
	var views [4]view
	var ends [4]int64
	q.n = n
	rd := q.read(s.keys[key], t, views[:0], ends[:0])
	for i, v := range rd.vs {
		most := config.DefaultMaxLive
		if rd.pend[i] != 0 {
			most = config.MaxCount
		}
		if v.count+n > most {
			return false
		}
	}
	s.admit(key, q, rd, t)
	return true
}

// giveBack takes back up to n of key's events recorded at at (µs), in
// every log of q's limits, and n from each quota's count while it is of
// the period at falls in.
func (s *shard) giveBack(key string, q request, at int64, n int) {
	en := s.keys[key]
	if en == nil {
		return // evicted: its events had expired
	}
	for _, lim := range q.limits {
		if lim.Calendar() {
			_, end, _ := lim.PeriodAt(time.UnixMicro(at))
			if qu := en.findQuota(lim); qu != nil && qu.end == end.UnixMicro() {
				qu.count -= min(qu.count, n)
			}
			continue
		}
		e := &en.one
		if q.all {
			e = en.find(int64(lim.Window / time.Microsecond))
		}
		if e != nil {
			e.take(at, n)
		}
	}
}
