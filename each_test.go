package slidelog_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	. "github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/minitest"
	"github.com/slidelog/slidelog/internal/redistest"
)

// eachServers are the servers an AllowEach test runs on: miniredis (its
// clock set by the test) and a real redis-server.
func eachServers(t *testing.T) map[string]redis.Scripter {
	return map[string]redis.Scripter{"miniredis": minitest.New(t).Rdb, "redis": realRedis(t)}
}

// A per-key rate and a per-customer quota decide as one: a request that
// one denies spends nothing of the other, every Result of a denial names
// the same RetryAfter (when every ask fits), and the request fits exactly
// then, not a microsecond before.
func TestAllowEachChargesNothingForAnothersDenial(t *testing.T) {
	for _, batching := range []Option{WithoutBatching(), WithBatching(8)} {
		m := minitest.New(t)
		l := New(m.Rdb, batching)
		ctx := context.Background()
		perKey := Limit{Events: 3, Window: time.Minute}
		perCustomer := []Limit{{Events: 5, Window: time.Hour}, {Events: 100, Window: 24 * time.Hour}}
		ask := func(key string) []Ask {
			return []Ask{{Key: key, N: 1, Limits: []Limit{perKey}}, {Key: "acme", N: 1, Limits: perCustomer}}
		}
		for i := 0; i < 3; i++ {
			m.At(time.Duration(i) * time.Second)
			rs, err := l.AllowEach(ctx, ask("k1")...)
			if err != nil || !rs[0].Allowed || !rs[1].Allowed {
				t.Fatalf("admission %d: %+v, %v", i, rs, err)
			}
			if rs[0].Remaining != 2-i || rs[1].Remaining != 4-i {
				t.Fatalf("admission %d: Remaining %d and %d, want %d and %d", i, rs[0].Remaining, rs[1].Remaining, 2-i, 4-i)
			}
		}
		// the per-key rate denies: the customer's quota is not charged
		m.At(10 * time.Second)
		rs, err := l.AllowEach(ctx, ask("k1")...)
		if err != nil || rs[0].Allowed || rs[1].Allowed {
			t.Fatalf("the fourth request to k1: %+v, %v; want denied", rs, err)
		}
		if want := time.Minute - 10*time.Second; rs[0].RetryAfter != want || rs[1].RetryAfter != want {
			t.Fatalf("RetryAfter %v and %v, want %v for both", rs[0].RetryAfter, rs[1].RetryAfter, want)
		}
		if rs[0].Remaining != 0 || rs[1].Remaining != 2 || rs[1].Limit != perCustomer[0] {
			t.Fatalf("a denial's Results: %+v; want Remaining 0 and 2 (the quota's own)", rs)
		}
		if p, _ := l.Peek(ctx, "acme", perKey); p.Remaining != 3 {
			t.Fatalf("the customer's key has no single-limit log: Peek %+v", p)
		}
		// the other key of the customer takes the quota's last two
		for i := 0; i < 2; i++ {
			rs, err := l.AllowEach(ctx, ask("k2")...)
			if err != nil || !rs[0].Allowed {
				t.Fatalf("k2's admission %d: %+v, %v", i, rs, err)
			}
		}
		// the quota denies: k3's rate is not charged
		rs, err = l.AllowEach(ctx, ask("k3")...)
		if err != nil || rs[0].Allowed {
			t.Fatalf("the quota spent: %+v, %v; want denied", rs, err)
		}
		if want := time.Hour - 10*time.Second; rs[0].RetryAfter != want || rs[0].Remaining != 3 {
			t.Fatalf("k3's Result %+v: want Remaining 3 (its own) and RetryAfter %v (the quota's)", rs[0], want)
		}
		if p, _ := l.Peek(ctx, "k3", perKey); p.Remaining != 3 {
			t.Fatalf("k3 was charged for the quota's denial: Peek %+v", p)
		}
		// k1 fits again when its oldest event leaves, not a µs before
		m.At(time.Minute - time.Microsecond)
		if rs, _ := l.AllowEach(ctx, Ask{Key: "k1", N: 1, Limits: []Limit{perKey}}); rs[0].Allowed {
			t.Fatalf("admitted 1µs before its RetryAfter: %+v", rs)
		}
		m.At(time.Minute)
		if rs, err := l.AllowEach(ctx, Ask{Key: "k1", N: 1, Limits: []Limit{perKey}}); err != nil || !rs[0].Allowed {
			t.Fatalf("at its RetryAfter: %+v, %v; want admitted", rs, err)
		}
	}
}

// AllowEach shares its logs with AllowN and AllowAll: an ask of one limit
// is AllowN's log, of several AllowAll's, of a calendar quota the quota's;
// and a limit over 128 events is kept compactly as everywhere.
func TestAllowEachSharesLogs(t *testing.T) {
	for name, rdb := range eachServers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l := New(rdb, WithPrefix(uniqueKey(t)+":"))
			rate := Limit{Events: 10, Window: time.Minute}
			big := Limit{Events: 1000, Window: time.Minute} // a compact log
			daily := Daily(50, time.UTC)
			all := []Limit{{Events: 20, Window: time.Hour}, daily}
			for i := 0; i < 200; i++ { // past 128 events: the compact log
				if _, err := l.AllowN(ctx, "big", big, 1); err != nil {
					t.Fatal(err)
				}
			}
			rs, err := l.AllowEach(ctx, Ask{Key: "a", N: 4, Limits: []Limit{rate}}, Ask{Key: "b", N: 4, Limits: all}, Ask{Key: "big", N: 4, Limits: []Limit{big}})
			if err != nil || !rs[0].Allowed || !rs[1].Allowed || !rs[2].Allowed {
				t.Fatalf("%+v, %v", rs, err)
			}
			if r, _ := l.Peek(ctx, "a", rate); r.Remaining != 6 {
				t.Errorf("AllowN's log of a: Peek %+v, want Remaining 6", r)
			}
			if r, _ := l.Peek(ctx, "big", big); r.Remaining != 796 {
				t.Errorf("the compact log: Peek %+v, want Remaining 796", r)
			}
			if r, err := l.AllowAll(ctx, "b", 16, all...); err != nil || !r.Allowed || r.Remaining != 0 {
				t.Errorf("AllowAll on b after 4: %+v, %v; want admitted with Remaining 0", r, err)
			}
			rs, err = l.AllowEach(ctx, Ask{Key: "a", N: 1, Limits: []Limit{rate}}, Ask{Key: "b", N: 1, Limits: all})
			if err != nil || rs[0].Allowed || rs[1].Remaining != 0 || rs[0].Remaining != 6 {
				t.Errorf("b is full: %+v, %v; want denied, a's Remaining 6", rs, err)
			}
			// a Refund of an ask gives back its events
			rs, _ = l.AllowEach(ctx, Ask{Key: "a", N: 2, Limits: []Limit{rate}}, Ask{Key: "big", N: 2, Limits: []Limit{big}})
			if !rs[0].Allowed {
				t.Fatalf("%+v", rs)
			}
			for _, r := range rs {
				if err := l.Refund(ctx, r.Handle()); err != nil {
					t.Fatal(err)
				}
			}
			if r, _ := l.Peek(ctx, "a", rate); r.Remaining != 6 {
				t.Errorf("after the refund: Peek %+v, want Remaining 6", r)
			}
			if r, _ := l.Peek(ctx, "big", big); r.Remaining != 796 {
				t.Errorf("after the refund, the compact log: Peek %+v, want Remaining 796", r)
			}
		})
	}
}

// A key of another type fails the whole AllowEach, and nothing is written
// for any ask.
func TestAllowEachWrongTypeWritesNothing(t *testing.T) {
	for name, rdb := range eachServers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueKey(t) + ":"
			l := New(rdb, WithPrefix(prefix))
			rdb.(*redis.Client).Set(ctx, prefix+"str", "x", 0)
			rate := Limit{Events: 10, Window: time.Minute}
			for _, asks := range [][]Ask{
				{{Key: "a", N: 1, Limits: []Limit{rate}}, {Key: "str", N: 1, Limits: []Limit{rate}}},
				{{Key: "str", N: 1, Limits: []Limit{rate}}, {Key: "a", N: 1, Limits: []Limit{rate}}},
			} {
				if _, err := l.AllowEach(ctx, asks...); !errors.Is(err, ErrWrongType) {
					t.Errorf("%v: %v, want ErrWrongType", asks, err)
				}
			}
			if n := rdb.(*redis.Client).Exists(ctx, prefix+"a").Val(); n != 0 {
				t.Errorf("a's log was written")
			}
		})
	}
}

// A re-sent AllowEach (its reply lost) records nothing twice and stays
// admitted.
func TestAllowEachRetried(t *testing.T) {
	for name, rdb := range map[string]*redis.Client{"miniredis": minitest.New(t).Rdb, "redis": realRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l := New(redistest.Twice{Client: rdb}, WithPrefix(uniqueKey(t)+":"), WithoutBatching())
			rate := Limit{Events: 2, Window: time.Minute}
			quota := []Limit{{Events: 3, Window: time.Hour}, Daily(3, time.UTC)}
			for i := 0; i < 2; i++ {
				rs, err := l.AllowEach(ctx, Ask{Key: "a", N: 1, Limits: []Limit{rate}}, Ask{Key: "c", N: 1, Limits: quota})
				if err != nil || !rs[0].Allowed || rs[0].Remaining != 1-i || rs[1].Remaining != 2-i {
					t.Fatalf("call %d, sent twice: %+v, %v", i, rs, err)
				}
			}
		})
	}
}

func TestAllowEachBadInput(t *testing.T) {
	m := minitest.New(t)
	f := &redistest.Faulty{Client: m.Rdb}
	l := New(f, WithMaxEvents(100))
	rate := Limit{Events: 10, Window: time.Minute}
	many := make([]Ask, MaxLimits+1)
	for i := range many {
		many[i] = Ask{Key: fmt.Sprint(i), N: 1, Limits: []Limit{rate}}
	}
	for _, c := range []struct {
		asks []Ask
		want error
	}{
		{nil, ErrInvalidLimit},
		{[]Ask{{Key: "", N: 1, Limits: []Limit{rate}}}, ErrEmptyKey},
		{[]Ask{{Key: "a", N: 1}}, ErrInvalidLimit},
		{[]Ask{{Key: "a", N: 0, Limits: []Limit{rate}}}, ErrInvalidN},
		{[]Ask{{Key: "a", N: 11, Limits: []Limit{rate}}}, ErrExceedsLimit},
		{[]Ask{{Key: "a", N: 1, Limits: []Limit{{Events: 1000, Window: time.Second}}}}, ErrLimitTooLarge},
		{[]Ask{{Key: "a", N: 1, Limits: []Limit{rate, rate}}}, ErrInvalidLimit},
		{[]Ask{{Key: "a", N: 1, Limits: []Limit{rate}}, {Key: "a", N: 1, Limits: []Limit{{Events: 5, Window: time.Hour}}}}, ErrInvalidLimit},
		{many, ErrInvalidLimit},
		// a key that is another key's AllowAll log: the asks would share it
		{[]Ask{{Key: "x", N: 1, Limits: []Limit{rate, {Events: 5, Window: time.Hour}}}, {Key: "{slidelog:x}:60000000", N: 1, Limits: []Limit{rate}}}, ErrInvalidLimit},
	} {
		rs, err := l.AllowEach(context.Background(), c.asks...)
		if !errors.Is(err, c.want) || rs != nil {
			t.Errorf("%.80v: %v, %v; want %v", c.asks, rs, err, c.want)
		}
	}
	if n := f.Calls.Load(); n != 0 {
		t.Errorf("bad input sent %d calls to Redis", n)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("bad input wrote %v", keys)
	}
}

// Many callers decide overlapping pairs of keys at once, beside AllowN on
// the same keys: no window of any key ever holds more than its limit, and
// each key holds exactly the events of the calls admitted with it.
func TestAllowEachConcurrent(t *testing.T) {
	for name, rdb := range eachServers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l := New(rdb, WithPrefix(uniqueKey(t)+":"), WithBatching(16))
			rate := Limit{Events: 20, Window: time.Hour}
			keys := []string{"k0", "k1", "k2", "k3", "k4"}
			var mu sync.Mutex
			admitted := map[string]int{}
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 40; i++ {
						a, b := keys[(g+i)%5], keys[(g+2*i+1)%5]
						if a == b {
							r, err := l.AllowN(ctx, a, rate, 1)
							if err != nil {
								t.Error(err)
								return
							}
							if r.Allowed {
								mu.Lock()
								admitted[a]++
								mu.Unlock()
							}
							continue
						}
						rs, err := l.AllowEach(ctx, Ask{Key: a, N: 1, Limits: []Limit{rate}}, Ask{Key: b, N: 2, Limits: []Limit{rate}})
						if err != nil {
							t.Error(err)
							return
						}
						if rs[0].Allowed != rs[1].Allowed {
							t.Errorf("half admitted: %+v", rs)
						}
						if rs[0].Allowed {
							mu.Lock()
							admitted[a]++
							admitted[b] += 2
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			for _, k := range keys {
				p, err := l.Peek(ctx, k, rate)
				if err != nil {
					t.Fatal(err)
				}
				if held := rate.Events - p.Remaining; held != admitted[k] || held > rate.Events {
					t.Errorf("%s holds %d events; the admitted calls recorded %d (limit %d)", k, held, admitted[k], rate.Events)
				}
			}
		})
	}
}

// FailOpen admits every ask while Redis is unreachable, marked Degraded.
func TestAllowEachPolicy(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(redistest.DialOnce(&redis.Options{Addr: m.Addr(), MaxRetries: -1}))
	t.Cleanup(func() { _ = rdb.Close() })
	m.Close()
	rate := Limit{Events: 10, Window: time.Minute}
	asks := []Ask{{Key: "a", N: 1, Limits: []Limit{rate}}, {Key: "b", N: 1, Limits: []Limit{rate}}}
	rs, err := New(rdb, WithPolicy(FailOpen), WithoutBreaker()).AllowEach(context.Background(), asks...)
	if err != nil || len(rs) != 2 || !rs[0].Allowed || !rs[1].Degraded() {
		t.Fatalf("FailOpen: %+v, %v", rs, err)
	}
	if _, err := New(rdb, WithoutBreaker()).AllowEach(context.Background(), asks...); err == nil || !strings.Contains(err.Error(), "run script") {
		t.Fatalf("FailClosed: %v, want the Redis error", err)
	}
}

// The keys AllowEach checks (askKeys) are the keys its call writes.
func TestAllowEachKeys(t *testing.T) {
	rate := Limit{Events: 10, Window: time.Minute}
	for _, a := range []Ask{
		{Key: "a", N: 1, Limits: []Limit{rate}},
		{Key: "b}", N: 1, Limits: []Limit{rate, {Events: 5, Window: time.Hour}}},
		{Key: "c", N: 1, Limits: []Limit{Daily(5, time.UTC)}},
		{Key: "{d}", N: 1, Limits: []Limit{rate, Monthly(5, 31, time.UTC)}},
	} {
		m := minitest.New(t)
		sent := &sentKeys{}
		m.Rdb.AddHook(sent)
		l := New(m.Rdb, WithPrefix("{p}:"), WithoutBatching())
		keys, err := l.EachKeys([]Ask{a})
		if err != nil {
			t.Fatal(err)
		}
		if rs, err := l.AllowEach(context.Background(), a); err != nil || !rs[0].Allowed {
			t.Fatal(rs, err)
		}
		checked := slices.Sorted(slices.Values(keys[0]))
		if got := slices.Sorted(slices.Values(sent.keys)); !slices.Equal(checked, got) {
			t.Errorf("%+v: checked %q, the call sent %q", a, checked, got)
		}
		for _, k := range m.Keys() {
			if !slices.Contains(checked, k) {
				t.Errorf("%+v: the call wrote %q, which was not checked", a, k)
			}
		}
	}
}

// sentKeys keeps the keys of the last script call a client sent.
type sentKeys struct{ keys []string }

func (h *sentKeys) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *sentKeys) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 2 && strings.HasPrefix(strings.ToLower(cmd.Name()), "eval") {
			h.keys = h.keys[:0]
			n, _ := args[2].(int)
			for _, k := range args[3 : 3+n] {
				h.keys = append(h.keys, k.(string))
			}
		}
		return next(ctx, cmd)
	}
}
func (h *sentKeys) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A hook hears one observation per AllowEach: op allow_each, N the asks'
// total, the limit of the ask that denied (else of the ask with the
// fewest left).
func TestAllowEachObserved(t *testing.T) {
	var mu sync.Mutex
	var obs []Observation
	hook := HookFunc(func(_ context.Context, o Observation) {
		mu.Lock()
		obs = append(obs, o)
		mu.Unlock()
	})
	l := New(minitest.New(t).Rdb, WithHook(hook))
	loose, tight := Limit{Events: 10, Window: time.Minute}, Limit{Events: 3, Window: time.Hour}
	asks := []Ask{{Key: "a", N: 2, Limits: []Limit{loose}}, {Key: "b", N: 1, Limits: []Limit{tight}}}
	for i := 0; i < 4; i++ {
		if _, err := l.AllowEach(context.Background(), asks...); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(obs) != 4 {
		t.Fatalf("%d observations for 4 calls", len(obs))
	}
	for i, o := range obs {
		if o.Op != "allow_each" || o.N != 3 || o.Allowed != (i < 3) || o.Limit != tight {
			t.Errorf("call %d: %+v; want allow_each, N 3, allowed %v, the tight limit", i, o, i < 3)
		}
	}
}
