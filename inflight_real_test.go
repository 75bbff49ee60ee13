package slidelog

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Several instances (clients of their own), many goroutines, one key of 3
// holders: never more than 3 run at once, counted by the holders
// themselves; every slot comes back.
func TestAcquireNeverOverHoldersRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	lim := InFlight(3, time.Minute) // no lease runs out: only releases free slots
	var instances []*Limiter
	for range 4 {
		instances = append(instances, New(newClient(t, rdb.Options().Addr), WithPrefix(prefix)))
	}

	// Three hold; every instance is denied the fourth until one releases.
	var held []Lease
	for i := range 3 {
		s, err := instances[i].Acquire(ctx, "hot", lim)
		if err != nil || !s.Allowed {
			t.Fatalf("holder %d: %+v %v", i, s.Result, err)
		}
		held = append(held, s)
	}
	for i, l := range instances {
		if s, err := l.Acquire(ctx, "hot", lim); err != nil || s.Allowed {
			t.Fatalf("instance %d, a fourth holder: %+v %v", i, s.Result, err)
		}
	}
	if err := held[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := instances[3].Acquire(ctx, "hot", lim)
	if err != nil || !s.Allowed {
		t.Fatalf("after a release: %+v %v", s.Result, err)
	}
	for _, s := range []Lease{held[0], held[2], s} {
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	var running, most, admitted, denied atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, l := range instances {
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 40 {
					s, err := l.Acquire(ctx, "hot", lim)
					if err != nil {
						t.Error(err)
						return
					}
					if !s.Allowed {
						denied.Add(1)
						continue
					}
					admitted.Add(1)
					n := running.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(50 * time.Microsecond) // hold a while
					running.Add(-1)
					if err := s.Release(ctx); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if most.Load() > 3 || admitted.Load() == 0 || denied.Load() == 0 {
		t.Errorf("at most %d held at once (limit 3); %d admitted, %d denied", most.Load(), admitted.Load(), denied.Load())
	}
	if n := rdb.ZCard(ctx, prefix+"{"+prefix+"hot}:inflight").Val(); n != 0 {
		t.Errorf("after every release the log holds %d", n)
	}
}

// A holder that never releases (it died) frees its slot exactly a lease
// after it took it: the denial names that instant, to the microsecond, and
// an acquisition then is admitted.
func TestDeadHolderRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	l := New(rdb, WithPrefix(uniqueKey(t)+":"))
	lease := 200 * time.Millisecond
	lim := InFlight(1, lease)
	dead, err := l.Acquire(ctx, "k", lim)
	if err != nil || !dead.Allowed {
		t.Fatal(dead.Result, err)
	}
	d, err := l.Acquire(ctx, "k", lim)
	if err != nil || d.Allowed {
		t.Fatalf("the slot is held: %+v %v", d.Result, err)
	}
	if end := dead.Time().Add(lease); !d.Time().Add(d.RetryAfter).Equal(end) {
		t.Fatalf("denied at %v, retry after %v: not the lease's end %v", d.Time(), d.RetryAfter, end)
	}
	time.Sleep(d.RetryAfter)
	s, err := l.Acquire(ctx, "k", lim)
	if err != nil || !s.Allowed || s.Time().Before(dead.Time().Add(lease)) {
		t.Fatalf("after the dead holder's lease: %+v at %v, %v", s.Result, s.Time(), err)
	}
}

// Renew moves the events to Redis' TIME and the log's expiry with them; it
// never takes back a slot that was released or ran out, even while the
// run-out event is still in the log.
func TestRenewRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	l := New(rdb, WithPrefix(prefix))
	log := prefix + "{" + prefix + "k}:inflight"
	lease := 300 * time.Millisecond
	lim := InFlight(1, lease)
	a, err := l.Acquire(ctx, "k", lim)
	if err != nil || !a.Allowed {
		t.Fatal(a.Result, err)
	}
	time.Sleep(10 * time.Millisecond)
	r, err := a.Renew(ctx)
	if err != nil || !r.Allowed || r.Remaining != 0 || r.ResetAfter != lease || !r.Time().After(a.Time()) {
		t.Fatalf("renew: %+v at %v (acquired at %v), %v", r.Result, r.Time(), a.Time(), err)
	}
	member := a.handle.members()[0].(string)
	if score := rdb.ZScore(ctx, log, member).Val(); int64(score) != r.Time().UnixMicro() {
		t.Errorf("the event is at %v, the renewal at %v", int64(score), r.Time().UnixMicro())
	}
	wantExpiry := (r.Time().UnixMicro() + lease.Microseconds() + 999) / 1000
	if ms := rdb.Do(ctx, "PEXPIRETIME", log).Val(); ms != wantExpiry {
		t.Errorf("the log expires at %v ms, want %v (the renewed event's end, rounded up)", ms, wantExpiry)
	}
	d, err := l.Acquire(ctx, "k", lim)
	if err != nil || d.Allowed || !d.Time().Add(d.RetryAfter).Equal(r.Time().Add(lease)) {
		t.Fatalf("denied %+v at %v: want a retry at the renewed lease's end %v", d.Result, d.Time(), r.Time().Add(lease))
	}
	// A retried renewal (go-redis re-sends a script whose reply was lost)
	// moves the same event again: still one slot.
	if _, err := r.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, log).Val(); n != 1 {
		t.Errorf("after two renewals the log holds %d", n)
	}

	// Released: renew takes nothing back.
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Renew(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("renew after release: %v, want ErrNotHeld", err)
	}
	if n := rdb.Exists(ctx, log).Val(); n != 0 {
		t.Errorf("a renewal of a released lease wrote the log")
	}

	// Run out, still in the log (no admission since removed it): renew
	// leaves it where it is.
	c, err := l.Acquire(ctx, "k", lim)
	if err != nil || !c.Allowed {
		t.Fatal(c.Result, err)
	}
	d, err = l.Acquire(ctx, "k", lim)
	if err != nil || d.Allowed {
		t.Fatal(d.Result, err)
	}
	time.Sleep(d.RetryAfter)
	if _, err := c.Renew(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("renew after the lease ran out: %v, want ErrNotHeld", err)
	}
	cm := c.handle.members()[0].(string)
	if score, err := rdb.ZScore(ctx, log, cm).Result(); err == nil && int64(score) != c.Time().UnixMicro() {
		t.Errorf("a run-out event moved to %v", int64(score))
	}
	if s, err := l.Acquire(ctx, "k", lim); err != nil || !s.Allowed {
		t.Errorf("the slot is free: %+v %v", s.Result, err)
	}
}

// A lease of thousands of slots renews them all (ZADD in chunks of 1000),
// and a log of another type is an error that writes nothing.
func TestRenewManyRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	prefix := uniqueKey(t) + ":"
	l := New(rdb, WithPrefix(prefix))
	log := prefix + "{" + prefix + "k}:inflight"
	lim := InFlight(3000, time.Minute)
	s, err := l.AcquireN(ctx, "k", lim, 2500)
	if err != nil || !s.Allowed {
		t.Fatal(s.Result, err)
	}
	time.Sleep(time.Millisecond)
	r, err := s.Renew(ctx)
	if err != nil || r.Remaining != 500 {
		t.Fatalf("renew: %+v %v", r.Result, err)
	}
	at := strconv.FormatInt(r.Time().UnixMicro(), 10)
	if n := rdb.ZCount(ctx, log, at, at).Val(); n != 2500 {
		t.Errorf("%d of 2500 events renewed", n)
	}
	if err := rdb.Del(ctx, log).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, log, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Renew(ctx); !errors.Is(err, ErrWrongType) {
		t.Errorf("renew of a string: %v, want ErrWrongType", err)
	}
	if v := rdb.Get(ctx, log).Val(); v != "x" {
		t.Errorf("the value became %q", v)
	}
}

// isDecide reports whether cmd runs decide.lua.
func isDecide(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 2 {
		return false
	}
	switch cmd.Name() {
	case "evalsha":
		return a[1] == decideScript.Hash()
	case "eval":
		return a[1] == decideSrc
	}
	return false
}

// lostReply lets the next decide.lua call run in Redis, then loses its
// reply: the caller gets err, after cut (which may end its context), as
// when a deadline or a read timeout cuts the read short.
type lostReply struct {
	armed atomic.Bool
	err   error
	cut   func()
}

func (h *lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isDecide(cmd) || !h.armed.Load() {
			return next(ctx, cmd)
		}
		if err := next(context.WithoutCancel(ctx), cmd); err != nil {
			return err // NOSCRIPT: it did not run
		}
		h.armed.Store(false)
		if h.cut != nil {
			h.cut()
		}
		cmd.SetErr(h.err)
		return h.err
	}
}

func (h *lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// eventually waits until the log holds want events (what a take-back in
// the background leaves), and fails the test if it never does.
func eventually(t *testing.T, rdb *redis.Client, log string, want int64) {
	t.Helper()
	var n int64
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if n = rdb.ZCard(context.Background(), log).Val(); n == want {
			return
		}
	}
	t.Errorf("the in-flight log holds %d events, want %d: a slot nobody holds stays taken", n, want)
}

// An acquisition that ran in Redis but whose caller got an error (its
// context ended while the reply was on its way: a client that went away;
// or a read timeout, which FailLocal answers from the fallback) is taken
// back: before, its slot stayed taken for the whole lease with no holder to
// release it.
func TestAcquireReplyLostRealRedis(t *testing.T) {
	addr := realRedis(t).Options().Addr
	for _, c := range []struct {
		name string
		opts []Option
	}{{"unbatched", []Option{WithoutBatching()}}, {"batched", nil}} {
		t.Run(c.name+", the context ends", func(t *testing.T) {
			rdb := newClient(t, addr)
			ctx, cancel := context.WithCancel(context.Background())
			h := &lostReply{err: context.Canceled, cut: cancel}
			rdb.AddHook(h)
			prefix := uniqueKey(t) + ":"
			l := New(rdb, append(c.opts, WithPrefix(prefix))...)
			h.armed.Store(true)
			s, err := l.Acquire(ctx, "k", InFlight(1, time.Minute))
			if !errors.Is(err, context.Canceled) || s.Allowed {
				t.Fatalf("%+v %v, want context.Canceled", s.Result, err)
			}
			eventually(t, rdb, prefix+"{"+prefix+"k}:inflight", 0)
		})
	}
	t.Run("FailLocal, a read timeout", func(t *testing.T) {
		rdb := newClient(t, addr)
		h := &lostReply{err: &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}}
		rdb.AddHook(h)
		prefix := uniqueKey(t) + ":"
		l := New(rdb, WithPrefix(prefix), WithPolicy(FailLocal(New(newMini(t).rdb), 1)))
		h.armed.Store(true)
		s, err := l.Acquire(context.Background(), "k", InFlight(1, time.Minute))
		if err != nil || !s.Allowed || !s.Degraded() {
			t.Fatalf("%+v %v, want the fallback's lease", s.Result, err)
		}
		eventually(t, rdb, prefix+"{"+prefix+"k}:inflight", 0)
	})
	t.Run("a context that had ended", func(t *testing.T) {
		// nothing was sent: nothing to take back, and no take-back runs
		// (one would wait in the hook until the test ends)
		m := newMini(t)
		refunds := &scriptNames{hold: make(chan struct{})}
		t.Cleanup(func() { close(refunds.hold) })
		m.rdb.AddHook(refunds)
		l := New(m.rdb)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := l.Acquire(ctx, "k", InFlight(1, time.Minute)); !errors.Is(err, context.Canceled) {
			t.Fatalf("%v, want context.Canceled", err)
		}
		if n := l.lost.Load(); n != 0 {
			t.Errorf("%d take-backs of a call never sent", n)
		}
	})
	t.Run("an error reply", func(t *testing.T) {
		// the script ran and wrote nothing: nothing to take back, and no
		// refund is sent
		m := newMini(t)
		refunds := &scriptNames{}
		m.rdb.AddHook(refunds)
		l := New(m.rdb, WithoutBatching())
		if err := m.rdb.Set(context.Background(), "slidelog:{slidelog:k}:inflight", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Acquire(context.Background(), "k", InFlight(1, time.Minute)); !errors.Is(err, ErrWrongType) {
			t.Fatalf("%v, want ErrWrongType", err)
		}
		if n := refunds.refunds.Load(); n != 0 {
			t.Errorf("%d refunds after an error reply", n)
		}
	})
}

// scriptNames counts the refund.lua calls, and holds them until hold is
// closed if it is not nil.
type scriptNames struct {
	refunds atomic.Int64
	hold    chan struct{}
}

func (h *scriptNames) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && (a[1] == refundScript.Hash() || a[1] == refundSrc) {
			h.refunds.Add(1)
			if h.hold != nil {
				<-h.hold
			}
		}
		return next(ctx, cmd)
	}
}

func (h *scriptNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// stall holds the first lone decide.lua call and the first pipeline until
// the test lets them go.
type stall struct {
	lone, pipe     atomic.Bool
	loneIn, pipeIn chan struct{}
	loneGo, pipeGo chan struct{}
	pipeDone       chan struct{} // closed when the held pipeline has answered
}

func newStall() *stall {
	s := &stall{loneIn: make(chan struct{}), pipeIn: make(chan struct{}), loneGo: make(chan struct{}), pipeGo: make(chan struct{}),
		pipeDone: make(chan struct{})}
	s.lone.Store(true)
	s.pipe.Store(true)
	return s
}

func (h *stall) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stall) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isDecide(cmd) && h.lone.CompareAndSwap(true, false) {
			h.loneIn <- struct{}{}
			<-h.loneGo
		}
		return next(ctx, cmd)
	}
}

func (h *stall) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.pipe.CompareAndSwap(true, false) {
			h.pipeIn <- struct{}{}
			<-h.pipeGo
			defer close(h.pipeDone)
		}
		return next(ctx, cmds)
	}
}

// A batched acquisition whose caller leaves (its context ends) while its
// pipeline is in flight: the pipeline goes on and admits it, and it is
// taken back once the pipeline has answered. Before, the slot stayed taken
// for the whole lease: another caller was denied a slot nobody held.
func TestAcquireLeftPipelineRealRedis(t *testing.T) {
	rdb := newClient(t, realRedis(t).Options().Addr)
	h := newStall()
	rdb.AddHook(h)
	prefix := uniqueKey(t) + ":"
	l := New(rdb, WithPrefix(prefix))
	lim := InFlight(2, time.Minute)
	type answer struct {
		s   Lease
		err error
	}
	// a's call is in flight (held), so b's waits for a pipeline (held too)
	a := make(chan answer, 1)
	go func() { s, err := l.Acquire(context.Background(), "k", lim); a <- answer{s, err} }()
	<-h.loneIn
	ctx, cancel := context.WithCancel(context.Background())
	b := make(chan answer, 1)
	go func() { s, err := l.Acquire(ctx, "k", lim); b <- answer{s, err} }()
	<-h.pipeIn
	cancel()
	if got := <-b; !errors.Is(got.err, context.Canceled) || got.s.Allowed {
		t.Fatalf("b left: %+v %v, want context.Canceled", got.s.Result, got.err)
	}
	close(h.pipeGo)
	close(h.loneGo)
	got := <-a
	if got.err != nil || !got.s.Allowed {
		t.Fatalf("a: %+v %v", got.s.Result, got.err)
	}
	// b's pipeline has answered (b's event recorded): then only a's stays,
	// once b's is taken back
	<-h.pipeDone
	eventually(t, rdb, prefix+"{"+prefix+"k}:inflight", 1) // a's
	if c, err := l.Acquire(context.Background(), "k", lim); err != nil || !c.Allowed {
		t.Errorf("the slot b's caller left is free: %+v %v", c.Result, err)
	}
}
