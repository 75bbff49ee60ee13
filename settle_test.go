package slidelog_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/compactlog"
	"github.com/slidelog/slidelog/internal/ids"
	"github.com/slidelog/slidelog/internal/optiontest"
	"github.com/slidelog/slidelog/internal/redistest"
)

// settleStore is one kind of log a Settle or a Charge meets: what admits,
// what looks, and the limits a Charge names.
type settleStore struct {
	name   string
	opts   []slidelog.Option
	limits []slidelog.Limit
	fill   int // events admitted first (a log of a limit over 128 becomes a compact log past 128)
}

func settleStores() []settleStore {
	return []settleStore{
		{name: "sorted set", limits: []slidelog.Limit{slidelog.PerHour(100)}},
		{name: "block log", limits: []slidelog.Limit{slidelog.PerHour(1000)}, fill: 200},
		{name: "slot log", opts: []slidelog.Option{slidelog.Option(optiontest.SlotLog())}, limits: []slidelog.Limit{slidelog.PerHour(1000)}, fill: 200},
		{name: "daily quota", limits: []slidelog.Limit{slidelog.Daily(100, time.UTC)}},
		{name: "allowall with a quota", limits: []slidelog.Limit{slidelog.PerHour(1000), slidelog.Daily(5000, time.UTC)}, fill: 200},
	}
}

func (s settleStore) admit(ctx context.Context, l *slidelog.Limiter, n int) (slidelog.Result, error) {
	if len(s.limits) == 1 {
		return l.AllowN(ctx, "k", s.limits[0], n)
	}
	return l.AllowAll(ctx, "k", n, s.limits...)
}

func (s settleStore) remaining(t *testing.T, ctx context.Context, l *slidelog.Limiter) int {
	t.Helper()
	var r slidelog.Result
	var err error
	if len(s.limits) == 1 {
		r, err = l.Peek(ctx, "k", s.limits[0])
	} else {
		r, err = l.PeekAll(ctx, "k", 1, s.limits...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r.Remaining
}

// Settle gives back exactly what an admission did not use and records what
// it used over its estimate, in every kind of log and in calendar quotas;
// a second Settle changes nothing; a Refund after it gives back what the
// admission finally cost; a Charge records whatever the logs hold. On
// miniredis and on a real server.
func TestSettle(t *testing.T) {
	for _, srv := range []struct {
		name string
		rdb  func(t *testing.T) *redis.Client
	}{
		{"miniredis", func(t *testing.T) *redis.Client { return newMini(t).Rdb }},
		{"redis-server", func(t *testing.T) *redis.Client { return realRedis(t) }},
	} {
		for _, s := range settleStores() {
			t.Run(srv.name+"/"+s.name, func(t *testing.T) {
				ctx := context.Background()
				l := slidelog.New(srv.rdb(t), append([]slidelog.Option{slidelog.WithPrefix(uniqueKey(t) + ":")}, s.opts...)...)
				if s.fill > 0 {
					if r, err := s.admit(ctx, l, s.fill); err != nil || !r.Allowed {
						t.Fatalf("fill: %+v, %v", r, err)
					}
				}
				base := s.remaining(t, ctx, l)
				check := func(what string, r slidelog.Result, err error, want int) {
					t.Helper()
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					if r.Remaining != want || !r.Allowed {
						t.Fatalf("%s: %+v; want Remaining %d, allowed", what, r, want)
					}
					if got := s.remaining(t, ctx, l); got != want {
						t.Fatalf("%s: a Peek after it sees %d remaining, want %d", what, got, want)
					}
				}

				// below the estimate: 6 of 10 given back
				a, err := s.admit(ctx, l, 10)
				if err != nil || !a.Allowed {
					t.Fatalf("admit: %+v, %v", a, err)
				}
				r, err := l.Settle(ctx, a.Handle(), 4)
				check("Settle 10 to 4", r, err, base-4)
				r, err = l.Settle(ctx, a.Handle(), 9)
				check("a second Settle", r, err, base-4)
				if err := l.Refund(ctx, a.Handle()); err != nil {
					t.Fatal(err)
				}
				if got := s.remaining(t, ctx, l); got != base {
					t.Fatalf("Refund after Settle to 4: %d remaining, want %d", got, base)
				}

				// over the estimate: 15 more recorded
				a, err = s.admit(ctx, l, 10)
				if err != nil || !a.Allowed {
					t.Fatalf("admit: %+v, %v", a, err)
				}
				r, err = l.Settle(ctx, a.Handle(), 25)
				check("Settle 10 to 25", r, err, base-25)
				if err := l.Refund(ctx, a.Handle()); err != nil {
					t.Fatal(err)
				}
				if got := s.remaining(t, ctx, l); got != base {
					t.Fatalf("Refund after Settle to 25: %d remaining, want %d", got, base)
				}

				// a Charge: recorded whatever the logs hold, then refunded
				r, err = l.Charge(ctx, "k", 7, s.limits...)
				check("Charge 7", r, err, base-7)
				if err := l.Refund(ctx, r.Handle()); err != nil {
					t.Fatal(err)
				}

				// past the limit: the key stays over until the charge leaves
				if base > 0 {
					if r, err := s.admit(ctx, l, base); err != nil || !r.Allowed {
						t.Fatalf("admit the rest: %+v, %v", r, err)
					}
				}
				r, err = l.Charge(ctx, "k", 5, s.limits...)
				if err != nil || r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 {
					t.Fatalf("Charge past the limit: %+v, %v; want recorded, one more denied with a RetryAfter", r, err)
				}
				if d, err := s.admit(ctx, l, 1); err != nil || d.Allowed || d.RetryAfter != r.RetryAfter-d.Time().Sub(r.Time()) {
					t.Fatalf("an admission after it: %+v, %v; want denied until %v after the charge", d, err, r.RetryAfter)
				}
			})
		}
	}
}

// A Settle or a Charge that go-redis sends twice (its reply lost: later
// runs each script twice, the second marked as re-sent) counts once.
func TestSettleRetried(t *testing.T) {
	for _, s := range settleStores() {
		if s.opts != nil {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			m := newMini(t)
			ctx := context.Background()
			l := slidelog.New(later{Client: m.Rdb, m: m, d: ms})
			if s.fill > 0 {
				if r, err := s.admit(ctx, l, s.fill); err != nil || !r.Allowed {
					t.Fatalf("fill: %+v, %v", r, err)
				}
			}
			base := s.remaining(t, ctx, l)
			if r, err := l.Charge(ctx, "k", 3, s.limits...); err != nil || r.Remaining != base-3 {
				t.Fatalf("Charge 3 sent twice: %+v, %v; want Remaining %d", r, err, base-3)
			}
			a, err := s.admit(ctx, l, 2)
			if err != nil || !a.Allowed {
				t.Fatal(a, err)
			}
			if r, err := l.Settle(ctx, a.Handle(), 9); err != nil || r.Remaining != base-12 {
				t.Fatalf("Settle 2 to 9 sent twice: %+v, %v; want Remaining %d", r, err, base-12)
			}
			a, err = s.admit(ctx, l, 10)
			if err != nil || !a.Allowed {
				t.Fatal(a, err)
			}
			if r, err := l.Settle(ctx, a.Handle(), 1); err != nil || r.Remaining != base-13 {
				t.Fatalf("Settle 10 to 1 sent twice: %+v, %v; want Remaining %d", r, err, base-13)
			}
		})
	}
}

// Bad input to Settle and Charge is refused before Redis is asked, and
// writes nothing.
func TestSettleBadInput(t *testing.T) {
	m := newMini(t)
	ctx := context.Background()
	l := slidelog.New(m.Rdb)
	lim := slidelog.PerMinute(10)
	a, err := l.AllowN(ctx, "k", lim, 2)
	if err != nil || !a.Allowed {
		t.Fatal(a, err)
	}
	before := m.Dump()
	for name, c := range map[string]struct {
		call func() (slidelog.Result, error)
		want error
	}{
		"Settle below 0":             {func() (slidelog.Result, error) { return l.Settle(ctx, a.Handle(), -1) }, slidelog.ErrInvalidN},
		"Settle over the limit":      {func() (slidelog.Result, error) { return l.Settle(ctx, a.Handle(), 11) }, slidelog.ErrExceedsLimit},
		"Settle of the zero Handle":  {func() (slidelog.Result, error) { return l.Settle(ctx, slidelog.Handle{}, 1) }, slidelog.ErrInvalidN},
		"Charge of 0":                {func() (slidelog.Result, error) { return l.Charge(ctx, "k", 0, lim) }, slidelog.ErrInvalidN},
		"Charge over the limit":      {func() (slidelog.Result, error) { return l.Charge(ctx, "k", 11, lim) }, slidelog.ErrExceedsLimit},
		"Charge of no limit":         {func() (slidelog.Result, error) { return l.Charge(ctx, "k", 1) }, slidelog.ErrInvalidLimit},
		"Charge of an empty key":     {func() (slidelog.Result, error) { return l.Charge(ctx, "", 1, lim) }, slidelog.ErrEmptyKey},
		"Charge of two limits alike": {func() (slidelog.Result, error) { return l.Charge(ctx, "k", 1, lim, slidelog.PerMinute(20)) }, slidelog.ErrInvalidLimit},
		"Charge of a limit too large": {func() (slidelog.Result, error) {
			return l.Charge(ctx, "k", 1, slidelog.Limit{Events: slidelog.MaxEvents + 1, Window: time.Hour})
		}, slidelog.ErrInvalidLimit},
	} {
		r, err := c.call()
		if !errors.Is(err, c.want) || r != (slidelog.Result{}) {
			t.Errorf("%s: %+v, %v; want %v", name, r, err, c.want)
		}
	}
	if after := m.Dump(); after != before {
		t.Errorf("bad input wrote to Redis:\n%s\nwas\n%s", after, before)
	}
	// the Handle is still settleable after the refusals
	if r, err := l.Settle(ctx, a.Handle(), 1); err != nil || r.Remaining != 9 {
		t.Fatalf("Settle after the refusals: %+v, %v", r, err)
	}
}

// Many instances settle and charge one key at once: the key holds exactly
// what every admission finally cost.
func TestSettleConcurrent(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	lim := slidelog.PerHour(100000)
	const workers, each = 8, 25
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			l := slidelog.New(rdb, slidelog.WithPrefix(prefix)) // an instance each
			for i := range each {
				a, err := l.AllowN(ctx, "k", lim, 50)
				if err == nil && !a.Allowed {
					err = fmt.Errorf("denied: %+v", a)
				}
				if err == nil {
					_, err = l.Settle(ctx, a.Handle(), 20+(w+i)%61) // 20 to 80
				}
				if err == nil {
					_, err = l.Charge(ctx, "k", 3, lim)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	want := 0
	for w := range workers {
		for i := range each {
			want += 20 + (w+i)%61 + 3
		}
	}
	r, err := slidelog.New(rdb, slidelog.WithPrefix(prefix)).Peek(ctx, "k", lim)
	if err != nil || r.Remaining != lim.Events-want {
		t.Fatalf("after %d settles and charges: %+v, %v; want Remaining %d", workers*each, r, err, lim.Events-want)
	}
}

// replyLost runs each script, and while armed answers it with a read
// error, as a reply lost after Redis ran the call (a timeout, a cut
// connection): the caller cannot tell whether it ran.
type replyLost struct {
	*redis.Client
	armed *atomic.Bool
}

func (c replyLost) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmd := c.Client.EvalSha(ctx, sha, keys, args...)
	return c.lose(ctx, cmd)
}

func (c replyLost) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return c.lose(ctx, c.Client.Eval(ctx, src, keys, args...))
}

func (c replyLost) lose(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	if cmd.Err() != nil || !c.armed.Load() {
		return cmd
	}
	lost := redis.NewCmd(ctx)
	lost.SetErr(&net.OpError{Op: "read", Net: "tcp", Err: io.ErrUnexpectedEOF})
	return lost
}

// A Settle whose reply was lost may be called again with the same actual,
// and counts once; with another actual it is refused (it may have run).
func TestSettleAfterLostReply(t *testing.T) {
	for _, s := range settleStores() {
		if s.opts != nil {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			m := newMini(t)
			ctx := context.Background()
			armed := new(atomic.Bool)
			l := slidelog.New(replyLost{Client: m.Rdb, armed: armed}, slidelog.WithoutBatching())
			if s.fill > 0 {
				if r, err := s.admit(ctx, l, s.fill); err != nil || !r.Allowed {
					t.Fatalf("fill: %+v, %v", r, err)
				}
			}
			base := s.remaining(t, ctx, l)
			for _, actual := range []int{25, 3} { // over, then below, an admission of 10
				a, err := s.admit(ctx, l, 10)
				if err != nil || !a.Allowed {
					t.Fatal(a, err)
				}
				armed.Store(true)
				if _, err := l.Settle(ctx, a.Handle(), actual); err == nil {
					t.Fatalf("Settle to %d with its reply lost: no error", actual)
				}
				armed.Store(false)
				if _, err := l.Settle(ctx, a.Handle(), actual+1); !errors.Is(err, slidelog.ErrInvalidN) {
					t.Fatalf("Settle to another actual after a lost reply: %v; want ErrInvalidN", err)
				}
				r, err := l.Settle(ctx, a.Handle(), actual)
				if err != nil || r.Remaining != base-actual {
					t.Fatalf("Settle to %d again: %+v, %v; want Remaining %d (counted once)", actual, r, err, base-actual)
				}
				if err := l.Refund(ctx, a.Handle()); err != nil {
					t.Fatal(err)
				}
				if got := s.remaining(t, ctx, l); got != base {
					t.Fatalf("after the Refund: %d remaining, want %d", got, base)
				}
			}
		})
	}
}

// The hook hears a Settle and a Charge as "settle" and "charge": their N,
// and whether one more event fits after them.
func TestSettleHook(t *testing.T) {
	m := newMini(t)
	ctx := context.Background()
	var seen []slidelog.Observation
	l := slidelog.New(m.Rdb, slidelog.WithHook(slidelog.HookFunc(func(_ context.Context, o slidelog.Observation) { seen = append(seen, o) })))
	lim := slidelog.PerMinute(10)
	a, err := l.AllowN(ctx, "k", lim, 4)
	if err != nil || !a.Allowed {
		t.Fatal(a, err)
	}
	if _, err := l.Settle(ctx, a.Handle(), 9); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Charge(ctx, "k", 5, lim); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Charge(ctx, "", 5, lim); !errors.Is(err, slidelog.ErrEmptyKey) {
		t.Fatal(err)
	}
	type obs struct {
		op      string
		n       int
		allowed bool
		limit   slidelog.Limit
		failed  bool
	}
	var got []obs
	for _, o := range seen {
		got = append(got, obs{o.Op, o.N, o.Allowed, o.Limit, o.Err != nil})
	}
	want := []obs{{"allow", 4, true, lim, false}, {"settle", 9, true, lim, false}, {"charge", 5, false, lim, false}, {"charge", 5, false, lim, true}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("observations %v, want %v", got, want)
	}
}

// A Settle after a Refund of the same admission changes nothing. Two
// admissions A and B at one instant (miniredis' clock stands still): a
// compact log or a quota takes back events of A's time, or a count, which
// after Refund(A) would be B's.
func TestSettleAfterRefund(t *testing.T) {
	for _, s := range settleStores() {
		t.Run(s.name, func(t *testing.T) {
			ctx := context.Background()
			m := newMini(t)
			l := slidelog.New(m.Rdb, append([]slidelog.Option{slidelog.WithPrefix(uniqueKey(t) + ":")}, s.opts...)...)
			if s.fill > 0 {
				if r, err := s.admit(ctx, l, s.fill); err != nil || !r.Allowed {
					t.Fatalf("fill: %+v, %v", r, err)
				}
			}
			base := s.remaining(t, ctx, l)
			a, err := s.admit(ctx, l, 10)
			if err != nil || !a.Allowed {
				t.Fatal(a, err)
			}
			if b, err := s.admit(ctx, l, 10); err != nil || !b.Allowed {
				t.Fatal(b, err)
			}
			if err := l.Refund(ctx, a.Handle()); err != nil {
				t.Fatal(err)
			}
			r, err := l.Settle(ctx, a.Handle(), 3)
			if err != nil || r.Remaining != base-10 || s.remaining(t, ctx, l) != base-10 {
				t.Fatalf("Settle(A, 3) after Refund(A): %+v, %v; want B's 10 counted: %d remaining", r, err, base-10)
			}
		})
	}
}

// Redis' clock steps back between two admissions: a compact log records
// the second at its newest event's time, not at the decision's; a Settle
// below n still gives back exactly n-actual, and a Refund after it what
// the admission finally cost.
func TestSettleClockBack(t *testing.T) {
	for _, s := range settleStores()[1:3] {
		t.Run(s.name, func(t *testing.T) {
			ctx := context.Background()
			m := newMini(t)
			l := slidelog.New(m.Rdb, append([]slidelog.Option{slidelog.WithPrefix(uniqueKey(t) + ":")}, s.opts...)...)
			m.At(2 * time.Second)
			if r, err := s.admit(ctx, l, s.fill); err != nil || !r.Allowed {
				t.Fatalf("fill: %+v, %v", r, err)
			}
			m.At(time.Second) // back one second
			base := s.remaining(t, ctx, l)
			a, err := s.admit(ctx, l, 10)
			if err != nil || !a.Allowed {
				t.Fatal(a, err)
			}
			if r, err := l.Settle(ctx, a.Handle(), 4); err != nil || r.Remaining != base-4 || s.remaining(t, ctx, l) != base-4 {
				t.Fatalf("Settle 10 to 4 after the clock stepped back: %+v, %v; want %d remaining", r, err, base-4)
			}
			if err := l.Refund(ctx, a.Handle()); err != nil {
				t.Fatal(err)
			}
			if got := s.remaining(t, ctx, l); got != base {
				t.Fatalf("Refund after the Settle: %d remaining, want %d", got, base)
			}
		})
	}
}

// A Settle (or a Refund) of a large admission whose log is gone (Reset,
// or expired) gives back nothing, and does not keep Redis busy deriving
// and removing ids that no key holds: no ZREM runs for a key that does not
// exist (counted on a server of the test's own, in its commandstats).
func TestSettleGoneKey(t *testing.T) {
	ctx := context.Background()
	rdb := newClient(t, redistest.Start(t))
	l := slidelog.New(rdb)
	lim := slidelog.Limit{Events: 1 << 22, Window: time.Hour}
	zrems := func() int64 { n, _ := redistest.CommandStat(rdb, "zrem", "calls"); return n }
	for _, how := range []string{"Settle", "Refund"} {
		a, err := l.AllowN(ctx, "k", lim, lim.Events)
		if err != nil || !a.Allowed {
			t.Fatal(a, err)
		}
		if err := l.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		before := zrems()
		if how == "Settle" {
			_, err = l.Settle(ctx, a.Handle(), 0)
		} else {
			err = l.Refund(ctx, a.Handle())
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := zrems() - before; n > 0 {
			t.Errorf("%s of %d events of a Reset key: %d ZREMs", how, lim.Events, n)
		}
		if r, err := l.Peek(ctx, "k", lim); err != nil || r.Remaining != lim.Events {
			t.Fatalf("%s: %+v, %v", how, r, err)
		}
	}
}

// A Handle settled through another Limiter (another prefix) is settled on
// its own admission's keys: give-back and excess alike.
func TestSettleOtherLimiter(t *testing.T) {
	ctx := context.Background()
	m := newMini(t)
	l1, l2 := slidelog.New(m.Rdb, slidelog.WithPrefix("one:")), slidelog.New(m.Rdb, slidelog.WithPrefix("two:"))
	lim := slidelog.PerHour(100)
	for _, actual := range []int{30, 4} {
		a, err := l1.AllowN(ctx, "k", lim, 10)
		if err != nil || !a.Allowed {
			t.Fatal(a, err)
		}
		if _, err := l2.Settle(ctx, a.Handle(), actual); err != nil {
			t.Fatal(err)
		}
		if err := l1.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	a, err := l1.AllowN(ctx, "k", lim, 10)
	if err != nil || !a.Allowed {
		t.Fatal(a, err)
	}
	r, err := l2.Settle(ctx, a.Handle(), 30)
	p2, _ := l2.Peek(ctx, "k", lim)
	if err != nil || r.Remaining != 70 || p2.Remaining != 100 {
		t.Fatalf("l2.Settle(l1's Handle of 10, 30): %+v, %v; l2's key %d remaining; want 70 on l1's key, l2's untouched", r, err, p2.Remaining)
	}
}

// Charges past a slot log's limit (an older version's format) grow its
// string by a quarter at least: the charges after it write in place
// instead of rewriting the whole log each time.
func TestSettleSlotLogPastLimit(t *testing.T) {
	ctx := context.Background()
	m := newMini(t)
	l := slidelog.New(m.Rdb, slidelog.Option(optiontest.SlotLog()))
	lim := slidelog.PerHour(1000)
	if r, err := l.AllowN(ctx, "k", lim, lim.Events); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	size := func() int { return len(must(m.Get("slidelog:k"))) }
	full := size()
	var sizes []int
	for range 5 {
		if _, err := l.Charge(ctx, "k", 1, lim); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, size())
	}
	if sizes[0] < full+7*lim.Events/4 || sizes[4] != sizes[0] {
		t.Fatalf("a full log of %d bytes, charged one event at a time: %v bytes; want it grown by a quarter once", full, sizes)
	}
	if r, err := l.Peek(ctx, "k", lim); err != nil || r.Remaining != 0 || r.Allowed {
		t.Fatalf("%+v, %v", r, err)
	}
	if times, err := compactlog.Times([]byte(must(m.Get("slidelog:k")))); err != nil || len(times) != lim.Events+5 {
		t.Fatalf("the log reads %d times, %v; want %d", len(times), err, lim.Events+5)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Usage past a limit's Events (a response that cost more than a whole
// window allows) is recorded, on an empty key too: the key stays over
// until it leaves the window. A limit of at most 128 events takes at most
// its Events at once.
func TestChargePastTheLimit(t *testing.T) {
	for name, rdb := range map[string]*redis.Client{"miniredis": newMini(t).Rdb, "redis-server": realRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l := slidelog.New(rdb, slidelog.WithPrefix(uniqueKey(t)+":"))
			for key, limits := range map[string][]slidelog.Limit{"one": {slidelog.PerHour(1000)}, "all": {slidelog.PerHour(1000), slidelog.Daily(20000, time.UTC)}} {
				r, err := l.Charge(ctx, key, 1500, limits...)
				if err != nil || r.Allowed || r.Remaining != 0 || r.RetryAfter != time.Hour {
					t.Fatalf("%s: Charge 1500 of 1000 on an empty key: %+v, %v; want over for the hour", key, r, err)
				}
				a, err := l.AllowAll(ctx, key+"-settled", 1, limits...)
				if len(limits) == 1 {
					a, err = l.AllowN(ctx, key+"-settled", limits[0], 1)
				}
				if err != nil || !a.Allowed {
					t.Fatal(a, err)
				}
				if r, err := l.Settle(ctx, a.Handle(), 2500); err != nil || r.Allowed || r.RetryAfter != time.Hour {
					t.Fatalf("%s: Settle 1 to 2500: %+v, %v; want over for the hour", key, r, err)
				}
			}
			if _, err := l.Charge(ctx, "small", 101, slidelog.PerHour(100)); !errors.Is(err, slidelog.ErrExceedsLimit) {
				t.Fatalf("Charge 101 of a limit of 100: %v; want ErrExceedsLimit", err)
			}
		})
	}
}

// A Handle made by Result.WithAdmission carries its Decider's record,
// which Handle.Admission reads back; the Redis Limiter settles and refunds
// none (but under FailLocal, whose fallback made it), writing nothing.
func TestWithAdmission(t *testing.T) {
	ctx := context.Background()
	m := newMini(t)
	l := slidelog.New(m.Rdb)
	type record struct{ n int }
	rec := &record{n: 3}
	r := slidelog.Result{Allowed: true, Limit: slidelog.PerHour(10)}.WithAdmission(rec)
	if got, _ := r.Handle().Admission().(*record); got != rec {
		t.Fatalf("Admission() = %v, want the record given", r.Handle().Admission())
	}
	if a := (slidelog.Result{}).Handle().Admission(); a != nil {
		t.Fatalf("the zero Handle's Admission() = %v, want nil", a)
	}
	if _, err := l.Settle(ctx, r.Handle(), 1); !errors.Is(err, slidelog.ErrInvalidN) {
		t.Errorf("Settle of another Decider's Handle: %v, want ErrInvalidN", err)
	}
	if err := l.Refund(ctx, r.Handle()); !errors.Is(err, slidelog.ErrInvalidN) {
		t.Errorf("Refund of another Decider's Handle: %v, want ErrInvalidN", err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("keys written: %v", keys)
	}
	// a nil record is no admission: the zero Handle, which refunds nothing
	zero := string(make([]byte, 8))
	m.Rdb.ZAdd(ctx, "", redis.Z{Score: 1, Member: zero})
	if h := (slidelog.Result{Allowed: true}).WithAdmission(nil).Handle(); h != (slidelog.Handle{}) {
		t.Errorf("WithAdmission(nil)'s Handle: %+v, want the zero one", h)
	} else if err := l.Refund(ctx, h); err != nil || m.Rdb.ZCard(ctx, "").Val() != 1 {
		t.Errorf("Refund of WithAdmission(nil)'s Handle: %v; the raw key \"\" holds %d members, want 1", err, m.Rdb.ZCard(ctx, "").Val())
	}
}

// Usage past a limit is never refused, but a log's live events stop at
// maxLive (2^47 by default; a block log's running totals wrap at 2^48, and
// 2^18 charges of MaxEvents made a full log read as empty and admit
// MaxEvents more): a charge that would take a log past it is recorded
// nowhere, and its Handle refunds nothing (a refund of it took back other
// charges' events of its microsecond). Here maxLive is 5 000
// (optiontest.MaxLive), on a block log.
func TestChargeStopsAtMaxLive(t *testing.T) {
	ctx := context.Background()
	lim := slidelog.PerHour(1000)
	onBoth(t, func(t *testing.T, rdb *redis.Client, m *mini) {
		prefix := uniqueKey(t) + ":"
		l := slidelog.New(rdb, slidelog.WithPrefix(prefix), slidelog.Option(optiontest.MaxLive(5000)))
		at := func(d time.Duration) {
			if m != nil {
				m.At(d)
			}
		}
		held := func(want int64) {
			t.Helper()
			if n := logLen(t, rdb, prefix+"k"); n != want {
				t.Fatalf("the log holds %d events, want %d", n, want)
			}
		}
		at(0)
		if r, err := l.Charge(ctx, "k", 4500, lim); err != nil || r.Allowed || r.Remaining != 0 {
			t.Fatalf("Charge(4 500): %+v, %v", r, err)
		}
		at(30 * time.Minute)
		if _, err := l.Charge(ctx, "k", 400, lim); err != nil {
			t.Fatal(err)
		}
		held(4900)
		c, err := l.Charge(ctx, "k", 600, lim) // (4 900 + 600 > 5 000)
		if err != nil || c.Allowed || c.Remaining != 0 || c.Handle() != (slidelog.Handle{}) {
			t.Fatalf("Charge(600) past maxLive: %+v, %v; want no room and the zero Handle", c, err)
		}
		held(4900)
		if err := l.Refund(ctx, c.Handle()); err != nil {
			t.Fatal(err)
		}
		held(4900)
		if _, err := l.Charge(ctx, "k", 100, lim); err != nil { // (what fits is recorded)
			t.Fatal(err)
		}
		held(5000)
		if m == nil {
			return // (the rest needs a set clock)
		}
		at(time.Hour + 30*time.Minute - time.Microsecond) // the first charge has expired, not the others
		if p, err := l.Peek(ctx, "k", lim); err != nil || !p.Allowed || p.Remaining != 500 {
			t.Fatalf("Peek after the first charge expired: %+v, %v; want 500 recorded, 500 remaining", p, err)
		}
	})
}

// An admission takes at most ids.MaxSpan ids whatever its n (a quota's n
// may reach MaxQuota, past the ids' 2^40), so two admissions of 2^40 in a
// row never share a first id: a re-sent second one (here the EVAL after
// NOSCRIPT) is counted, not taken for the first's retry, and each one's
// Refund gives back its own events.
func TestHugeAdmissionsKeepTheirOwnIds(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	l := slidelog.New(rdb, slidelog.WithPrefix(uniqueKey(t)+":"))
	q := slidelog.Daily(1<<41, time.UTC)
	a, err := l.AllowN(ctx, "k", q, 1<<40)
	if err != nil || !a.Allowed || a.Remaining != 1<<40 {
		t.Fatalf("A: %+v, %v", a, err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	b, err := l.AllowN(ctx, "k", q, 1<<40)
	if err != nil || !b.Allowed || b.Remaining != 0 || slidelog.HandleID(b.Handle()) == slidelog.HandleID(a.Handle()) {
		t.Fatalf("B, re-sent after NOSCRIPT: %+v, %v (ids %x, %x); want admitted, counted", b, err, slidelog.HandleID(a.Handle()), slidelog.HandleID(b.Handle()))
	}
	if c, err := l.AllowN(ctx, "k", q, 1); err != nil || c.Allowed {
		t.Fatalf("C: %+v, %v; want denied", c, err)
	}
	for _, h := range []slidelog.Handle{a.Handle(), b.Handle()} {
		if err := l.Refund(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := l.Peek(ctx, "k", q); err != nil || p.Remaining != 1<<41 {
		t.Fatalf("after both refunds: %+v, %v; want 2^41 left", p, err)
	}
}

// A Handle of more than ids.MaxSpan events (a block log's admission, which
// took only MaxSpan ids) refunded or settled after its key became a sorted
// set of other admissions' events takes none of theirs: their ids follow
// its span. (It took 976 of 2 000 charged events.)
func TestStaleHugeHandleTakesNoOtherEvents(t *testing.T) {
	for _, how := range []string{"Refund", "Settle"} {
		t.Run(how, func(t *testing.T) {
			onBoth(t, func(t *testing.T, rdb *redis.Client, m *mini) {
				ctx := context.Background()
				prefix := uniqueKey(t) + ":"
				l := slidelog.New(rdb, slidelog.WithPrefix(prefix), slidelog.Option(optiontest.IDs(ids.NewAt([3]byte{'s', 'h', 'h'}, 1000))))
				a, err := l.AllowN(ctx, "k", slidelog.PerHour(5000), 2000)
				if err != nil || !a.Allowed {
					t.Fatalf("A: %+v, %v", a, err)
				}
				if err := l.Reset(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				for range 20 { // (a sorted set of 2 000 members, whose ids follow A's span)
					if _, err := l.Charge(ctx, "k", 100, slidelog.PerHour(100)); err != nil {
						t.Fatal(err)
					}
				}
				if how == "Refund" {
					err = l.Refund(ctx, a.Handle())
				} else {
					_, err = l.Settle(ctx, a.Handle(), 500)
				}
				if err != nil {
					t.Fatal(err)
				}
				if n := logLen(t, rdb, prefix+"k"); n != 2000 {
					t.Errorf("%s of A after its key was reset: the charges' log holds %d events, want 2 000", how, n)
				}
			})
		})
	}
}
