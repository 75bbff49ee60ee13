package slidelog_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/ids"
	"github.com/slidelog/slidelog/internal/redistest"
)

const ms = time.Millisecond

// The key expires once its newest event has left the window, rounded up to
// a millisecond; a denial leaves the expiry alone.
func TestExpiry(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(m.Rdb)
	ctx := context.Background()
	lim := slidelog.Limit{Events: 1, Window: 1500 * time.Microsecond}
	m.At(250 * time.Microsecond) // event at .250 ms: leaves the window at 1.750 ms
	if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
		t.Fatalf("first: %+v, %v", r, err)
	}
	// PEXPIREAT ceil(1.750ms) = 2ms: the key outlives its event by under 1ms.
	if ttl := m.TTL("slidelog:k"); ttl != 1750*time.Microsecond {
		t.Errorf("TTL after admission = %v, want 1.75ms (from 0.25ms to the ceiling of 1.75ms)", ttl)
	}
	m.At(time.Millisecond)
	if r, err := l.Allow(ctx, "k", lim); err != nil || r.Allowed {
		t.Fatalf("second: %+v, %v", r, err)
	}
	if ttl := m.TTL("slidelog:k"); ttl != 1750*time.Microsecond {
		t.Errorf("TTL after a denial = %v, want 1.75ms unchanged", ttl)
	}
	m.FastForward(1750*time.Microsecond + time.Microsecond)
	if m.Exists("slidelog:k") {
		t.Errorf("key still exists after its newest event expired")
	}
}

// On a real server the expiry must cover the event's last live microsecond
// even though Redis' millisecond clock lags TIME. A window of a minute and a
// key per round, so that no key expires before the test reads its expiry
// however slow the machine (the rounding does not depend on the window).
func TestExpiryRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	l := slidelog.New(rdb, slidelog.WithPrefix(uniqueKey(t)+":"))
	lim := slidelog.Limit{Events: 1, Window: time.Minute}
	for i := range 50 {
		key := "k" + strconv.Itoa(i)
		r, err := l.Allow(ctx, key, lim)
		if err != nil || !r.Allowed {
			t.Fatalf("round %d: %+v, %v", i, r, err)
		}
		// Deadline of the event in server ms, and the key's expiry.
		at, err := rdb.PExpireTime(ctx, l.Prefix()+key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if lastLive := (r.Time().UnixMicro() + lim.Window.Microseconds() - 1) / 1000; at < time.Duration(lastLive)*ms {
			t.Fatalf("round %d: key expires at %v, before its event's last live ms %d", i, at, lastLive)
		}
		time.Sleep(time.Duration(i%7) * 100 * time.Microsecond) // land on other microseconds of the ms
	}
}

func TestAllowNRecordsDistinctEvents(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(m.Rdb)
	ctx := context.Background()
	lim := slidelog.Limit{Events: 3000, Window: time.Minute}
	// MaxAcquireN events in one call cross the script's 1000-per-ZADD
	// chunks (in a sorted set: a log of in-flight slots is one whatever its
	// limit).
	for _, n := range []int{1, 7, slidelog.MaxAcquireN, slidelog.MaxAcquireN} {
		if s, err := l.AcquireN(ctx, "k", lim, n); err != nil || !s.Allowed {
			t.Fatalf("AcquireN(%d): %+v, %v", n, s.Result, err)
		}
	}
	members, err := m.ZMembers("slidelog:" + l.InflightKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	if want := 8 + 2*slidelog.MaxAcquireN; len(members) != want {
		t.Fatalf("%d members, want %d", len(members), want)
	}
	pre := ids.Process().Prefix()
	for _, mem := range members {
		if len(mem) != ids.Len || mem[:ids.PrefixLen] != string(pre[:]) {
			t.Fatalf("member %x: want %d bytes starting with %x", mem, ids.Len, pre)
		}
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	m := newMini(t)
	f := &redistest.Faulty{Client: m.Rdb}
	l := slidelog.New(f)
	ctx := context.Background()
	cases := []struct {
		key   string
		limit slidelog.Limit
		n     int
		want  error
	}{
		{"", slidelog.PerSecond(1), 1, slidelog.ErrEmptyKey},
		{"k", slidelog.PerSecond(0), 1, slidelog.ErrInvalidLimit},
		{"k", slidelog.PerSecond(-1), 1, slidelog.ErrInvalidLimit},
		{"k", slidelog.Limit{Events: 1, Window: 999 * time.Nanosecond}, 1, slidelog.ErrInvalidLimit},
		{"k", slidelog.Limit{Events: 1, Window: -time.Second}, 1, slidelog.ErrInvalidLimit},
		{"k", slidelog.Limit{Events: 1, Window: slidelog.MaxWindow + time.Microsecond}, 1, slidelog.ErrInvalidLimit},
		{"k", slidelog.PerSecond(3), 0, slidelog.ErrInvalidN},
		{"k", slidelog.PerSecond(3), -2, slidelog.ErrInvalidN},
		{"k", slidelog.PerSecond(3), 4, slidelog.ErrExceedsLimit},
	}
	for i, c := range cases {
		if _, err := l.AllowN(ctx, c.key, c.limit, c.n); !errors.Is(err, c.want) {
			t.Errorf("case %d AllowN: err %v, want %v", i, err, c.want)
		}
		if c.n == 1 {
			if _, err := l.Peek(ctx, c.key, c.limit); !errors.Is(err, c.want) {
				t.Errorf("case %d Peek: err %v, want %v", i, err, c.want)
			}
		}
	}
	if err := l.Reset(ctx, ""); !errors.Is(err, slidelog.ErrEmptyKey) {
		t.Errorf("Reset(\"\"): %v", err)
	}
	if f.Calls.Load() != 0 {
		t.Errorf("bad input reached Redis %d times", f.Calls.Load())
	}
	if n := m.DB(0).Keys(); len(n) != 0 {
		t.Errorf("bad input wrote keys %v", n)
	}
}

func TestWrongTypeKeepsValue(t *testing.T) {
	for name, rdb := range map[string]*redis.Client{"miniredis": newMini(t).Rdb, "redis": realRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l := slidelog.New(rdb, slidelog.WithPrefix(uniqueKey(t)+":"))
			k := l.Prefix() + "k"
			if err := rdb.Set(ctx, k, "precious", 0).Err(); err != nil {
				t.Fatal(err)
			}
			for _, call := range []func() error{
				func() error { _, err := l.Allow(ctx, "k", slidelog.PerSecond(5)); return err },
				func() error { _, err := l.AllowN(ctx, "k", slidelog.PerSecond(5), 3); return err },
				func() error { _, err := l.Peek(ctx, "k", slidelog.PerSecond(5)); return err },
			} {
				err := call()
				if !errors.Is(err, slidelog.ErrWrongType) || !strings.Contains(err.Error(), "WRONGTYPE") {
					t.Errorf("err = %v, want ErrWrongType wrapping Redis' WRONGTYPE", err)
				}
			}
			if v, err := rdb.Get(ctx, k).Result(); v != "precious" || err != nil {
				t.Errorf("value now %q, %v", v, err)
			}
			if ttl := rdb.PTTL(ctx, k).Val(); ttl != -1 {
				t.Errorf("TTL now %v, want none", ttl)
			}
		})
	}
}

// A sorted set another program wrote, whose scores are no event times
// (1.5 µs past a whole one, 1e300): a decision that reads one is an
// ErrWrongType, as a string that is no log is, and writes nothing. (A
// reply that held such a score was an error the caller could not classify.)
func TestForeignSortedSetKeepsValue(t *testing.T) {
	for name, rdb := range map[string]*redis.Client{"miniredis": newMini(t).Rdb, "redis": realRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			now, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, unbatched := range []bool{false, true} {
				var opts []slidelog.Option
				if unbatched {
					opts = append(opts, slidelog.WithoutBatching())
				}
				l := slidelog.New(rdb, append(opts, slidelog.WithPrefix(uniqueKey(t)+":"))...)
				for _, members := range [][]redis.Z{
					{{Score: float64(now.UnixMicro()) - 1000.5, Member: "x"}},
					{{Score: float64(now.UnixMicro()) - 1000, Member: "x"}, {Score: 1e300, Member: "y"}},
				} {
					lim := slidelog.PerHour(len(members))
					base, _ := l.AllKeys("k")
					// the log of Allow and Peek, then AllowAll's and PeekAll's
					for _, k := range []string{l.Prefix() + "k", slidelog.WindowKey(base, time.Hour)} {
						if err := rdb.Del(ctx, k).Err(); err != nil {
							t.Fatal(err)
						}
						if err := rdb.ZAdd(ctx, k, members...).Err(); err != nil {
							t.Fatal(err)
						}
					}
					for i, call := range []func() error{
						func() error { _, err := l.Allow(ctx, "k", lim); return err },
						func() error { _, err := l.Peek(ctx, "k", lim); return err },
						func() error {
							_, err := l.AllowAll(ctx, "k", 1, lim, slidelog.Limit{Events: 100, Window: 24 * time.Hour})
							return err
						},
						func() error { _, err := l.PeekAll(ctx, "k", 1, lim); return err },
					} {
						if err := call(); !errors.Is(err, slidelog.ErrWrongType) {
							t.Errorf("%v: call %d: err = %v, want ErrWrongType", members, i, err)
						}
					}
					for _, k := range []string{l.Prefix() + "k", slidelog.WindowKey(base, time.Hour)} {
						if got := rdb.ZRangeWithScores(ctx, k, 0, -1).Val(); len(got) != len(members) || got[0].Member != "x" {
							t.Errorf("%v: %s now %v", members, k, got)
						}
						if ttl := rdb.PTTL(ctx, k).Val(); ttl != -1 {
							t.Errorf("%s's TTL now %v, want none", k, ttl)
						}
					}
					if keys := rdb.Keys(ctx, l.Prefix()+"*").Val(); len(keys) != 2 {
						t.Errorf("keys now %v, want the two sets only", keys)
					}
				}
			}
		})
	}
}

// After SCRIPT FLUSH (or a restart, or a failover) EVALSHA answers NOSCRIPT
// and the call goes on with EVAL: one more round trip, no error.
func TestNoScriptRecovery(t *testing.T) {
	for name, rdb := range map[string]*redis.Client{"miniredis": newMini(t).Rdb, "redis": realRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			l := slidelog.New(rdb, slidelog.WithPrefix(uniqueKey(t)+":"))
			lim := slidelog.PerMinute(3)
			for i := range 4 {
				if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				r, err := l.Allow(ctx, "k", lim)
				if err != nil {
					t.Fatalf("call %d after SCRIPT FLUSH: %v", i, err)
				}
				if r.Allowed != (i < 3) {
					t.Errorf("call %d: allowed=%v", i, r.Allowed)
				}
			}
			if ok, _ := rdb.ScriptExists(ctx, slidelog.DecideScript.Hash()).Result(); len(ok) != 1 || !ok[0] {
				t.Errorf("script not cached after the EVAL fallback: %v", ok)
			}
		})
	}
}

func TestRedisErrorsAreWrapped(t *testing.T) {
	m := newMini(t)
	boom := errors.New("boom")
	l := slidelog.New(&redistest.Faulty{Client: m.Rdb, Fail: boom})
	ctx := context.Background()
	_, err := l.Allow(ctx, "k", slidelog.PerSecond(1))
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "slidelog: run script: ") {
		t.Errorf("Allow: %v", err)
	}
	_, err = l.Peek(ctx, "k", slidelog.PerSecond(1))
	if !errors.Is(err, boom) {
		t.Errorf("Peek: %v", err)
	}

	closed := redis.NewClient(&redis.Options{Addr: m.Addr()})
	_ = closed.Close()
	_, err = slidelog.New(closed).Allow(ctx, "k", slidelog.PerSecond(1))
	if !errors.Is(err, redis.ErrClosed) {
		t.Errorf("closed client: %v", err)
	}
	if err := slidelog.New(closed).Reset(ctx, "k"); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("Reset on closed client: %v", err)
	}
}

// A caller whose context is done gets an error that matches ctx.Err(), even
// when go-redis reports the cut-short read as an i/o timeout.
func TestContextDone(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	l := slidelog.New(rdb, slidelog.WithPrefix(uniqueKey(t)+":"))

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Allow(canceled, "k", slidelog.PerSecond(1)); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: %v", err)
	}

	// Hold a Redis of the test's own still for a minute (CLIENT PAUSE is in
	// force once it answers; the server ends with the test); a 50ms
	// deadline must end the call early.
	paused := newClient(t, redistest.Start(t))
	pl := slidelog.New(paused)
	if _, err := pl.Allow(ctx, "warm", slidelog.PerSecond(1)); err != nil { // the script loaded, a connection open
		t.Fatal(err)
	}
	if err := newClient(t, paused.Options().Addr).ClientPause(ctx, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	dl, cancel := context.WithTimeout(ctx, 50*ms)
	defer cancel()
	// Had the call waited for the pause to end, it would have succeeded.
	_, err := pl.Allow(dl, "k", slidelog.PerSecond(1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline: err %v, want one matching context.DeadlineExceeded", err)
	}

	// The network can see a deadline pass before the context's timer has
	// run (go-redis sets the connection's deadline to the context's): the
	// error still tells the deadline, on every path.
	// Without retries, so that the error is the write's on an open
	// connection (a dial reports a passed deadline as the context's error
	// by itself, and go-redis dials for a retry).
	once := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = once.Close() })
	for _, opt := range []slidelog.Option{slidelog.WithBatching(256), slidelog.WithoutBatching()} {
		l := slidelog.New(once, slidelog.WithPrefix(uniqueKey(t)+":"), opt)
		if _, err := l.Allow(ctx, "warm", slidelog.PerSecond(1)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Allow(redistest.LateTimer(-time.Second), "k", slidelog.PerSecond(1)); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("deadline passed, timer not run: err %v, want one matching context.DeadlineExceeded", err)
		}
	}
}
