package local_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/conformance"
	"github.com/slidelog/slidelog/local"
)

// reference is the package's decisions written as plainly as possible, for
// the traces internal/model does not cover: clocks that step back, keys of
// any bytes, AllowAll of 1 to 4 limits, windows that change, huge counts. A
// log is a list of (instant, events); a key's time never goes back while it
// has logs; only an admission drops expired events, by its window.
type reference struct {
	logs map[refLog][]refRun
	last map[string]int64 // keys with logs: their latest admission
}

type refLog struct {
	key    string
	window int64 // AllowAll: the window; single-limit log: 0
}

type refRun struct {
	at int64
	n  int
}

func (m *reference) decide(key string, limits []slidelog.Limit, n int, record, all bool, clock int64) (d decision) {
	t := clock
	if last, ok := m.last[key]; ok {
		t = max(t, last)
	}
	d.at = t
	counts := make([]int, len(limits))
	fits := true
	for i, lim := range limits {
		w := lim.Window.Microseconds()
		name := refLog{key, 0}
		if all {
			name.window = w
		}
		for _, r := range m.logs[name] {
			if r.at > t-w {
				counts[i] += r.n
			}
		}
		if counts[i] > lim.Events-n {
			fits = false
		}
	}
	d.allowed = fits
	d.remaining = -1
	for i, lim := range limits {
		w := lim.Window.Microseconds()
		name := refLog{key, 0}
		if all {
			name.window = w
		}
		if fits && record { // only an admission drops the expired events
			log := m.logs[name]
			for len(log) > 0 && log[0].at <= t-w {
				log = log[1:]
			}
			m.logs[name] = append(log, refRun{t, n})
			counts[i] += n
			m.last[key] = t
		}
		var log []refRun // the live events
		for _, r := range m.logs[name] {
			if r.at > t-w {
				log = append(log, r)
			}
		}
		rem := lim.Events - counts[i]
		if fits {
			if d.remaining < 0 || rem < d.remaining {
				d.which, d.remaining = i, rem
			}
		} else {
			if d.remaining < 0 || max(rem, 0) < d.remaining {
				d.remaining = max(rem, 0)
			}
			if n > rem {
				k := n - rem // the k-th oldest leaves
				for _, r := range log {
					if k <= r.n {
						if ra := time.Duration(r.at+w-t) * time.Microsecond; ra > d.retry {
							d.which, d.retry = i, ra
						}
						break
					}
					k -= r.n
				}
			}
		}
		if len(log) > 0 {
			d.reset = max(d.reset, time.Duration(log[len(log)-1].at+w-t)*time.Microsecond)
		}
	}
	return d
}

func (m *reference) forget(key string) {
	for name := range m.logs {
		if name.key == key {
			delete(m.logs, name)
		}
	}
	delete(m.last, key)
}

type decision struct {
	allowed      bool
	remaining    int
	retry, reset time.Duration
	at           int64
	which        int
}

// Random traces of every operation, against the reference, every field
// compared.
func TestRandomAgainstReference(t *testing.T) {
	keys := []string{"a", "a\x00bcdefghi", "\x00", "b\xff"}
	windows := []time.Duration{time.Microsecond, 3 * time.Microsecond, 10 * time.Microsecond, 40 * time.Microsecond, time.Millisecond, (1 << 53) * time.Microsecond}
	events := []int{1, 2, 3, 5, 1 << 20, slidelog.MaxEvents - 1, slidelog.MaxEvents} // up to the largest (slidelog.MaxEvents)
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		c := &clock{now: conformance.Epoch}
		l := local.New(local.WithClock(c.Now))
		m := &reference{logs: map[refLog][]refRun{}, last: map[string]int64{}}
		ctx := context.Background()
		now := time.Duration(0)
		limit := func() slidelog.Limit {
			return slidelog.Limit{Events: events[r.IntN(len(events))], Window: windows[r.IntN(len(windows))]}
		}
		for i := range 400 {
			switch r.IntN(8) {
			case 0: // the clock steps back
				now -= time.Duration(r.IntN(50)) * time.Microsecond
			case 1, 2:
			default:
				now += time.Duration(r.IntN(15)) * time.Microsecond
			}
			c.Set(now)
			key := keys[r.IntN(len(keys))]
			op := r.IntN(10)
			var limits []slidelog.Limit
			all := false
			switch {
			case op == 0:
				if err := l.Reset(ctx, key); err != nil {
					t.Fatal(err)
				}
				m.forget(key)
				continue
			case op < 4:
				all = true
				for _, w := range r.Perm(len(windows))[:1+r.IntN(4)] {
					limits = append(limits, slidelog.Limit{Events: events[r.IntN(len(events))], Window: windows[w]})
				}
			default:
				limits = []slidelog.Limit{limit()}
			}
			least := limits[0].Events
			for _, lim := range limits {
				least = min(least, lim.Events)
			}
			n := 1
			switch r.IntN(4) {
			case 0:
				n = least
			case 1:
				n = 1 + r.IntN(min(least, 4))
			case 2:
				n = max(1, least/2+r.IntN(2))
			}
			peek := !all && op == 4
			if peek {
				n = 1
			}
			var res slidelog.Result
			var err error
			switch {
			case all:
				res, err = l.AllowAll(ctx, key, n, limits...)
			case peek:
				res, err = l.Peek(ctx, key, limits[0])
			default:
				res, err = l.AllowN(ctx, key, limits[0], n)
			}
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, i, err)
			}
			want := m.decide(key, limits, n, !peek, all, conformance.Epoch.Add(now).UnixMicro())
			got := decision{res.Allowed, res.Remaining, res.RetryAfter, res.ResetAfter, res.Time().UnixMicro(), -1}
			for j, lim := range limits {
				if lim == res.Limit {
					got.which = j
					break
				}
			}
			if got != want {
				t.Fatalf("seed %d step %d (%q all=%v peek=%v n=%d limits %v, clock %v):\n got %+v\nwant %+v",
					seed, i, key, all, peek, n, limits, now, got, want)
			}
			if !res.Allowed && (res.RetryAfter <= 0 || res.RetryAfter > maxWindow(limits)) {
				t.Fatalf("seed %d step %d: RetryAfter %v outside (0, W]", seed, i, res.RetryAfter)
			}
		}
	}
}
