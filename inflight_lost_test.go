package slidelog_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
)

// isDecide reports whether cmd runs script.lua.
func isDecide(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 2 {
		return false
	}
	switch cmd.Name() {
	case "evalsha":
		return a[1] == slidelog.DecideScript.Hash()
	case "eval":
		return a[1] == slidelog.DecideSrc
	}
	return false
}

// lostReply lets the next script.lua call run in Redis, then loses its
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
// back, so that its slot is not taken for the whole lease with no holder to
// release it.
func TestAcquireReplyLostRealRedis(t *testing.T) {
	addr := realRedis(t).Options().Addr
	for _, c := range []struct {
		name string
		opts []slidelog.Option
	}{{"unbatched", []slidelog.Option{slidelog.WithoutBatching()}}, {"batched", nil}} {
		t.Run(c.name+", the context ends", func(t *testing.T) {
			rdb := newClient(t, addr)
			ctx, cancel := context.WithCancel(context.Background())
			h := &lostReply{err: context.Canceled, cut: cancel}
			rdb.AddHook(h)
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(rdb, append(c.opts, slidelog.WithPrefix(prefix))...)
			h.armed.Store(true)
			s, err := l.Acquire(ctx, "k", slidelog.InFlight(1, time.Minute))
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
		l := slidelog.New(rdb, slidelog.WithPrefix(prefix), slidelog.WithPolicy(slidelog.FailLocal(slidelog.New(newMini(t).Rdb), 1)))
		h.armed.Store(true)
		s, err := l.Acquire(context.Background(), "k", slidelog.InFlight(1, time.Minute))
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
		m.Rdb.AddHook(refunds)
		l := slidelog.New(m.Rdb)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := l.Acquire(ctx, "k", slidelog.InFlight(1, time.Minute)); !errors.Is(err, context.Canceled) {
			t.Fatalf("%v, want context.Canceled", err)
		}
		if n := l.TakeBacksQueued(); n != 0 {
			t.Errorf("%d take-backs of a call never sent", n)
		}
	})
	t.Run("an error reply", func(t *testing.T) {
		// the script ran and wrote nothing: nothing to take back, and no
		// refund is sent
		m := newMini(t)
		refunds := &scriptNames{}
		m.Rdb.AddHook(refunds)
		l := slidelog.New(m.Rdb, slidelog.WithoutBatching())
		if err := m.Rdb.Set(context.Background(), "slidelog:{slidelog:k}:inflight", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Acquire(context.Background(), "k", slidelog.InFlight(1, time.Minute)); !errors.Is(err, slidelog.ErrWrongType) {
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
		if a := cmd.Args(); len(a) > 1 && (a[1] == slidelog.RefundScript.Hash() || a[1] == slidelog.RefundSrc) {
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

// stall holds the first lone script.lua call and the first pipeline until
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
// taken back once the pipeline has answered: no other caller is denied a
// slot nobody holds.
func TestAcquireLeftPipelineRealRedis(t *testing.T) {
	rdb := newClient(t, realRedis(t).Options().Addr)
	h := newStall()
	rdb.AddHook(h)
	prefix := uniqueKey(t) + ":"
	l := slidelog.New(rdb, slidelog.WithPrefix(prefix))
	lim := slidelog.InFlight(2, time.Minute)
	type answer struct {
		s   slidelog.Lease
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

// Acquisitions whose callers' deadlines (0.1-3ms) end while their calls are
// under way, many at once, on a healthy server: once every holder has
// released and every take-back is over, no slot is held: a take-back never
// reaches Redis before the acquisition it takes back (go-redis closes a
// connection whose read a deadline cut, and a take-back sent on another
// could overtake it), and none is dropped however many there are.
func TestAcquireTakeBacksFollowRealRedis(t *testing.T) {
	for _, mode := range batchingModes {
		t.Run(mode.Name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: realRedis(t).Options().Addr, ContextTimeoutEnabled: true, PoolSize: 128})
			t.Cleanup(func() { _ = rdb.Close() })
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(rdb, slidelog.WithPrefix(prefix), mode.Opt)
			lim := slidelog.InFlight(5, 30*time.Second)
			var admitted, failed atomic.Int64
			var wg sync.WaitGroup
			for g := range 96 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 1))
					for range 40 {
						d := 100*time.Microsecond + time.Duration(r.Int64N(int64(2900*time.Microsecond)))
						ctx, cancel := context.WithTimeout(context.Background(), d)
						s, err := l.Acquire(ctx, "k", lim)
						cancel()
						switch {
						case err != nil:
							failed.Add(1)
						case s.Allowed:
							admitted.Add(1)
							if err := s.Release(context.Background()); err != nil {
								t.Errorf("release: %v", err)
							}
						}
					}
				}()
			}
			wg.Wait()
			if failed.Load() == 0 {
				t.Fatalf("no acquisition failed (%d admitted): the deadlines cut no call, nothing was tested", admitted.Load())
			}
			eventually(t, rdb, prefix+"{"+prefix+"k}:inflight", 0)
			t.Logf("%d admitted and released, %d failed", admitted.Load(), failed.Load())
		})
	}
}
