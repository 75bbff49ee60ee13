// Package model is the limiter's contract (docs/semantics.md) written as plainly
// as possible: one deque of event times per key, oldest first. The Redis
// limiter's tests, its integration suite and the in-process limiter are all
// held against it.
package model

import (
	"github.com/slidelog/slidelog/internal/config"
	"math/rand/v2"
	"time"
)

// Decision is what a call answers. Durations are whole microseconds.
type Decision struct {
	Allowed    bool
	Remaining  int
	RetryAfter time.Duration
	ResetAfter time.Duration
}

// Log holds the admitted events' times (µs) of every key.
type Log struct {
	logs map[string][]int64
}

// New returns an empty Log.
func New() *Log { return &Log{logs: map[string][]int64{}} }

// Decide is AllowN (record) or Peek (!record) of n events for key against
// events per window, at server time t (µs).
func (m *Log) Decide(key string, events int, window time.Duration, n int, t int64, record bool) Decision {
	w := window.Microseconds()
	log := m.logs[key]
	gone := 0
	for gone < len(log) && log[gone] <= t-w {
		gone++
	}
	log = log[gone:] // 1: the expired events are gone
	if record {
		m.logs[key] = log
	}
	count := len(log) // 2
	var d Decision
	if count+n <= events { // 3
		d.Allowed = true
		if record {
			for range n {
				log = append(log, t)
			}
			m.logs[key] = log
			count += n
		}
	} else { // 4: wait for the k-th oldest, k = count+n-events
		d.RetryAfter = us(log[count+n-events-1] + w - t)
	}
	d.Remaining = max(events-count, 0)
	if len(log) > 0 {
		d.ResetAfter = us(log[len(log)-1] + w - t)
	}
	return d
}

// Refund takes back up to n of key's events recorded at t (µs): Refund
// of an admission recorded then (events of one time are alike).
func (m *Log) Refund(key string, t int64, n int) {
	log := m.logs[key][:0]
	for _, at := range m.logs[key] {
		if at == t && n > 0 {
			n--
			continue
		}
		log = append(log, at)
	}
	m.logs[key] = log
}

// Charge records n events for key at t (µs) whatever its log holds
// (Charge: usage, never refused), and answers as a Peek of one event
// after it.
func (m *Log) Charge(key string, events int, window time.Duration, n int, t int64) Decision {
	m.force(key, window, n, t)
	return m.Decide(key, events, window, 1, t, false)
}

// force drops key's expired events at t and records n at t.
func (m *Log) force(key string, window time.Duration, n int, t int64) {
	log := m.logs[key]
	gone := 0
	for gone < len(log) && log[gone] <= t-window.Microseconds() {
		gone++
	}
	log = log[gone:]
	if len(log)+n > config.DefaultMaxLive {
		n = 0 // past the most a log counts: recorded nowhere, as in both limiters
	}
	for range n {
		log = append(log, t)
	}
	m.logs[key] = log
}

// Settle is the Settle at t (µs) of an admission of n events for key
// recorded at at: actual < n takes back n-actual of its events (those
// still held), actual > n records actual-n more at t, whatever the log
// holds. It answers as a Peek of one event after it.
func (m *Log) Settle(key string, events int, window time.Duration, at int64, n, actual int, t int64) Decision {
	switch {
	case actual < n:
		m.Refund(key, at, n-actual)
	case actual > n:
		m.force(key, window, actual-n, t)
	}
	return m.Decide(key, events, window, 1, t, false)
}

// Forget drops every event of key (Reset).
func (m *Log) Forget(key string) { delete(m.logs, key) }

func us(v int64) time.Duration { return time.Duration(v) * time.Microsecond }

// Step is one call of a trace.
type Step struct {
	Key     string
	Events  int
	Window  time.Duration
	N       int           // events asked for (1 for a Peek)
	Advance time.Duration // the clock moves this much before the call
	Peek    bool
}

// RandomTrace draws steps over three keys, each with its own window of up
// to 3ms, whose clock moves land often on the exact edges: a whole window,
// a window less 1µs, 1µs, or not at all. A key's events may change (a plan
// change); its window does not.
func RandomTrace(r *rand.Rand, steps int) []Step {
	keys := []string{"a", "b", "c"}
	windows := map[string]time.Duration{}
	events := map[string]int{}
	for _, k := range keys {
		windows[k] = time.Duration(1+r.IntN(3000)) * time.Microsecond
		events[k] = 1 + r.IntN(6)
	}
	out := make([]Step, steps)
	for i := range out {
		k := keys[r.IntN(len(keys))]
		w, e := windows[k], events[k]
		if r.IntN(20) == 0 {
			e = 1 + r.IntN(6)
		}
		var adv time.Duration
		switch r.IntN(6) {
		case 0:
		case 1:
			adv = w
		case 2:
			adv = w - time.Microsecond
		case 3:
			adv = time.Microsecond
		default:
			adv = time.Duration(r.IntN(int(w/time.Microsecond)+1)) * time.Microsecond
		}
		s := Step{Key: k, Events: e, Window: w, N: 1 + r.IntN(e), Advance: adv, Peek: r.IntN(5) == 0}
		if s.Peek {
			s.N = 1
		}
		out[i] = s
	}
	return out
}

// Lim is one limit of DecideAll.
type Lim struct {
	Events int
	Window time.Duration
}

// DecideAll is AllowAll (record) or its Peek (!record): n events against
// several limits, each with its own log (under key and its window), all
// admitted or none. which is the limit that decided: denied, the one with
// the latest RetryAfter (the first on a tie); allowed, the one with the
// fewest Remaining (the first on a tie).
func (m *Log) DecideAll(key string, lims []Lim, n int, t int64, record bool) (d Decision, which int) {
	each := make([]Decision, len(lims))
	fits := true
	for i, l := range lims {
		each[i] = m.Decide(logName(key, l.Window, len(lims)), l.Events, l.Window, n, t, false)
		fits = fits && each[i].Allowed
	}
	if fits && record {
		for i, l := range lims {
			each[i] = m.Decide(logName(key, l.Window, len(lims)), l.Events, l.Window, n, t, true)
		}
	}
	d.Allowed = fits
	d.Remaining = -1
	for i, e := range each {
		if fits {
			if d.Remaining < 0 || e.Remaining < d.Remaining {
				which, d.Remaining = i, e.Remaining
			}
		} else {
			if d.Remaining < 0 || e.Remaining < d.Remaining {
				d.Remaining = e.Remaining
			}
			if e.RetryAfter > d.RetryAfter {
				which, d.RetryAfter = i, e.RetryAfter
			}
		}
		d.ResetAfter = max(d.ResetAfter, e.ResetAfter)
	}
	return d, which
}

func logName(key string, w time.Duration, limits int) string {
	if limits == 1 {
		return key
	}
	return key + "/" + w.String()
}

// Ask is one key's part of DecideEach: n events against its limits (one:
// the key's single-limit log, as Decide; several: its AllowAll logs).
type Ask struct {
	Key  string
	N    int
	Lims []Lim
}

// DecideEach is AllowEach: every ask is admitted, or none records
// anything. Each ask's Decision is its own (as DecideAll, or Decide for one
// limit, would answer it: an ask that fits in a denied call as a peek), and
// which names the limit each names; a denial is every ask's, with the
// largest RetryAfter of them all, the instant at which every ask fits.
func (m *Log) DecideEach(asks []Ask, t int64) (ds []Decision, which []int) {
	decide := func(a Ask, record bool) (Decision, int) {
		if len(a.Lims) == 1 {
			return m.Decide(a.Key, a.Lims[0].Events, a.Lims[0].Window, a.N, t, record), 0
		}
		return m.DecideAll(a.Key, a.Lims, a.N, t, record)
	}
	ds, which = make([]Decision, len(asks)), make([]int, len(asks))
	fits := true
	for i, a := range asks {
		ds[i], which[i] = decide(a, false)
		fits = fits && ds[i].Allowed
	}
	if fits {
		for i, a := range asks {
			ds[i], which[i] = decide(a, true)
		}
		return ds, which
	}
	var wait time.Duration
	for _, d := range ds {
		wait = max(wait, d.RetryAfter)
	}
	for i := range ds {
		ds[i].Allowed, ds[i].RetryAfter = false, wait
	}
	return ds, which
}
