package slidelog_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/minitest"
)

// twoShards is a go-redis Ring over two miniredis servers whose clocks the
// test sets: keys without a common hash tag land apart, and AllowEach
// decides them apart (with take-backs), as on a Cluster's slots.
func twoShards(t *testing.T) (*redis.Ring, func(d time.Duration)) {
	a, b := miniredis.RunT(t), miniredis.RunT(t)
	a.SetTime(minitest.Epoch)
	b.SetTime(minitest.Epoch)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = ring.Close() })
	return ring, func(d time.Duration) { a.SetTime(minitest.Epoch.Add(d)); b.SetTime(minitest.Epoch.Add(d)) }
}

// apartKeys are two keys the Ring puts on different shards (found by
// writing each and looking at which server holds it).
func apartKeys(t *testing.T, ring *redis.Ring, prefix string) (string, string) {
	ctx := context.Background()
	onFirst := func(k string) bool {
		if err := ring.Set(ctx, prefix+k, "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		defer ring.Del(ctx, prefix+k)
		var first bool
		err := ring.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			if c.Options().Addr == ring.Options().Addrs["a"] {
				first = c.Exists(ctx, prefix+k).Val() == 1
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return first
	}
	for _, k := range []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"} {
		if onFirst(k) != onFirst("k0") {
			return "k0", k
		}
	}
	t.Fatal("no two keys on different shards")
	return "", ""
}

// A request denied across shards: the ask that fitted is taken back and
// answers as a Peek would (its ResetAfter too, not its taken-back event's).
func TestAllowEachApartDenialResults(t *testing.T) {
	ring, _ := twoShards(t)
	ctx := context.Background()
	l := slidelog.New(ring, slidelog.WithoutBatching())
	a, b := apartKeys(t, ring, "slidelog:")
	lim := slidelog.Limit{Events: 2, Window: time.Hour}
	for i := 0; i < 2; i++ {
		if r, err := l.Allow(ctx, b, lim); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	for _, ask := range []slidelog.Ask{{Key: a, N: 1, Limits: []slidelog.Limit{lim}}, {Key: a, N: 1, Limits: []slidelog.Limit{lim, {Events: 5, Window: 24 * time.Hour}}}} {
		rs, err := l.AllowEach(ctx, ask, slidelog.Ask{Key: b, N: 1, Limits: []slidelog.Limit{lim}})
		if err != nil || rs[0].Allowed || rs[1].Allowed {
			t.Fatalf("%+v, %v; want denied", rs, err)
		}
		// a holds nothing: Remaining 2, and its window is empty (ResetAfter 0)
		if rs[0].Remaining != 2 || rs[0].ResetAfter != 0 || rs[0].RetryAfter != time.Hour || rs[0].Limit != lim {
			t.Fatalf("the ask that fitted (%d limits): %+v; want Remaining 2, ResetAfter 0, RetryAfter 1h", len(ask.Limits), rs[0])
		}
	}
}

// lose lets a script call on key run, then answers it with a timeout, as
// a reply lost after Redis ran it; block holds refund calls until their
// context ends (a Redis that stopped answering).
type lose struct {
	key   string
	block bool
}

func (h *lose) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lose) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		isRefund := len(args) > 1 && (args[1] == slidelog.RefundScript.Hash() || args[1] == slidelog.RefundSrc)
		if h.block && isRefund {
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		err := next(ctx, cmd)
		if err == nil && !isRefund && h.key != "" && len(args) > 3 && args[3] == h.key { // (it ran)
			cmd.SetErr(context.DeadlineExceeded)
			return context.DeadlineExceeded
		}
		return err
	}
}
func (h *lose) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// An ask whose reply was lost after it admitted is taken back when the
// request fails, like the asks that answered: no key keeps an event of a
// request that was not admitted.
func TestAllowEachApartLostReply(t *testing.T) {
	ring, _ := twoShards(t)
	ctx := context.Background()
	a, b := apartKeys(t, ring, "slidelog:")
	ring.AddHook(&lose{key: "slidelog:" + a})
	l := slidelog.New(ring, slidelog.WithoutBatching())
	lim := slidelog.Limit{Events: 5, Window: time.Hour}
	_, err := l.AllowEach(ctx, slidelog.Ask{Key: a, N: 1, Limits: []slidelog.Limit{lim}}, slidelog.Ask{Key: b, N: 1, Limits: []slidelog.Limit{lim}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v; want the lost reply's error", err)
	}
	check := slidelog.New(redis.NewRing(ring.Options()), slidelog.WithoutBatching())
	for deadline := time.Now().Add(10 * time.Second); ; {
		pa, _ := check.Peek(ctx, a, lim)
		pb, _ := check.Peek(ctx, b, lim)
		if pa.Remaining == 5 && pb.Remaining == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the failed request: %s holds %d events, %s %d; want none", a, 5-pa.Remaining, b, 5-pb.Remaining)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The take-back of a request denied across shards ends with the caller's
// context, even when Redis does not answer it: the take-back goes on in
// the queue, and the call returns the denial.
func TestAllowEachApartTakeBackBoundedByContext(t *testing.T) {
	ring, _ := twoShards(t)
	a, b := apartKeys(t, ring, "slidelog:")
	l := slidelog.New(ring, slidelog.WithoutBatching())
	lim := slidelog.Limit{Events: 1, Window: time.Hour}
	if r, err := l.Allow(context.Background(), b, lim); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	ring.AddHook(&lose{block: true})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var rs []slidelog.Result
	var err error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rs, err = l.AllowEach(ctx, slidelog.Ask{Key: a, N: 1, Limits: []slidelog.Limit{lim}}, slidelog.Ask{Key: b, N: 1, Limits: []slidelog.Limit{lim}})
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("AllowEach still running 10s after its 200ms context ended")
	}
	if err != nil || rs[0].Allowed || rs[1].Allowed {
		t.Fatalf("%+v, %v; want the denial", rs, err)
	}
}
