package slidelog_test

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/minitest"
	"github.com/slidelog/slidelog/internal/optiontest"
	"github.com/slidelog/slidelog/internal/redistest"
)

// replicaLoss is a hook for a WithReplicas limiter on miniredis (which has
// no replicas): it answers WAIT itself, 1 replica, or 0 for the next
// admission once notAcked is set. It loses the reply of the first refund.lua
// call that runs (its events are taken back, the client gets a read
// timeout), and holds every later one until release is closed. It calls
// cut (the caller's context ends) during the unacknowledged admission's
// WAIT (cutOnWait), or else while the first refund's reply is on its way.
type replicaLoss struct {
	notAcked  atomic.Bool
	cutOnWait bool
	cut       func()
	refunds   atomic.Int64  // refund.lua calls that ran
	lost      chan struct{} // closed once the first refund ran and its reply was lost
	release   chan struct{}
}

func (h *replicaLoss) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *replicaLoss) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "wait" {
			acked := int64(1)
			if h.notAcked.CompareAndSwap(true, false) {
				acked = 0
				if h.cutOnWait {
					h.cut()
				}
			}
			cmd.(*redis.IntCmd).SetVal(acked)
			return nil
		}
		a := cmd.Args()
		if len(a) < 2 || (a[1] != slidelog.RefundScript.Hash() && a[1] != slidelog.RefundSrc) {
			return next(ctx, cmd)
		}
		if h.refunds.Load() > 0 {
			<-h.release
		}
		if err := next(ctx, cmd); err != nil {
			return err // NOSCRIPT: it did not run
		}
		if h.refunds.Add(1) == 1 {
			if !h.cutOnWait {
				h.cut()
			}
			err := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
			cmd.SetErr(err)
			close(h.lost)
			return err
		}
		return nil
	}
}

func (h *replicaLoss) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A compact log keeps no ids: a take-back gives back events of its
// admission's time, and only its table (the last 16 admissions and
// refunds) tells that a refund ran already. Two admissions that share a
// time (on Redis, those of one script call: a batched pipeline's), one
// answered allowed, the other taken back (its replicas did not acknowledge
// it, or its caller left): when the take-back's refund ran but its reply
// was lost (a timeout on a busy machine, a connection cut), running it
// again once 16 more admissions had filled the table took back a second
// event of that time, the allowed one's. Callers were then told more
// admissions in a window than the limit, with WithReplicas, which promises
// none (TestCluster/*/lagging-replica/acked-compact saw 162 of 160). A
// take-back that may have run is not run again: its events may stay
// recorded (stricter, never looser), and the hook is told.
func TestTakeBackOfCompactLogNeverRunsTwice(t *testing.T) {
	connHooks(t)
	// The caller leaves during the WAIT (its take-back is queued), or
	// during the take-back's refund in its context (the rest was queued).
	for _, cutOnWait := range []bool{true, false} {
		t.Run(map[bool]string{true: "caller left during WAIT", false: "caller left during the refund"}[cutOnWait], func(t *testing.T) {
			takeBackOnce(t, cutOnWait)
		})
	}
}

// connHooks skips t where go-redis does not run a client's hooks on the
// *redis.Conn it hands out (v9.5.5, the lowest the module allows, which
// scripts/go-versions.sh tests with: Conn there has hooks of its own):
// WithReplicas sends its WAIT on such a Conn, and the test answers WAIT
// with a hook. The go-redis of the workspace (scripts/test.sh) runs them.
func connHooks(t *testing.T) {
	m := minitest.New(t)
	seen := &redistest.ArgsHook{}
	m.Rdb.AddHook(seen)
	conn := m.Rdb.Conn()
	defer func() { _ = conn.Close() }()
	_ = conn.Ping(context.Background()).Err()
	if len(seen.Args("ping")) == 0 {
		t.Skip("this go-redis does not run a client's hooks on its Conn, where WithReplicas sends WAIT")
	}
}

func takeBackOnce(t *testing.T, cutOnWait bool) {
	m := minitest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := &replicaLoss{cutOnWait: cutOnWait, lost: make(chan struct{}), release: make(chan struct{})}
	var release sync.Once
	defer release.Do(func() { close(h.release) })
	m.Rdb.AddHook(h)
	var mu sync.Mutex
	var given []slidelog.Observation
	hook := slidelog.HookFunc(func(_ context.Context, o slidelog.Observation) {
		if o.Op == "take_back" {
			mu.Lock()
			given = append(given, o)
			mu.Unlock()
		}
	})
	l := slidelog.New(m.Rdb, slidelog.Option(optiontest.ConvertPast(0)), slidelog.WithPrefix(uniqueKey(t)+":"), slidelog.WithReplicas(1, time.Second), slidelog.WithoutBatching(), slidelog.WithHook(hook))
	lim := slidelog.Limit{Events: 200, Window: time.Minute}

	// Two admissions at one time: the first acknowledged, answered allowed;
	// the second not, its caller gone, taken back in the background.
	told := 0
	if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
		t.Fatalf("the first admission: %+v, %v", r, err)
	}
	told++
	left, leave := context.WithCancel(ctx)
	h.cut = leave
	h.notAcked.Store(true)
	if r, err := l.Allow(left, "k", lim); !errors.Is(err, slidelog.ErrNotReplicated) || r.Allowed {
		t.Fatalf("the unacknowledged admission: %+v, %v; want ErrNotReplicated", r, err)
	}
	select {
	case <-h.lost: // its refund ran, and its reply was lost
	case <-time.After(generous):
		t.Fatal("the take-back's refund never ran")
	}
	// 16 admissions later (the table forgot the refund), a refund run again
	// would find the allowed admission's event of that time.
	m.At(time.Millisecond)
	for i := range 16 {
		if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
			t.Fatalf("admission %d: %+v, %v", i, r, err)
		}
		told++
	}
	release.Do(func() { close(h.release) })
	// the take-back is given up (the hook is told), or its refund runs again
	redistest.WaitFor(t, "the take-back to be given up or run again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(given) > 0 || h.refunds.Load() > 1
	})

	m.At(2 * time.Millisecond)
	for {
		r, err := l.Allow(ctx, "k", lim)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			break
		}
		told++
	}
	if told != lim.Events {
		t.Errorf("callers were told %d admissions in one window, limit %d (refund.lua ran %d times for one take-back)",
			told, lim.Events, h.refunds.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(given) != 1 || given[0].N != 1 || given[0].Err == nil {
		t.Errorf("the hook was told of %d take-backs given up (%+v); want the one whose refund may have run", len(given), given)
	}
}

// refundLoss runs refund.lua and loses the reply of its first run (the
// client gets a read timeout): a Refund whose outcome the caller cannot
// know.
type refundLoss struct{ runs atomic.Int64 }

func (h *refundLoss) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *refundLoss) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if len(a) < 2 || (a[1] != slidelog.RefundScript.Hash() && a[1] != slidelog.RefundSrc) {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		if h.runs.Add(1) == 1 {
			err := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
			cmd.SetErr(err)
			return err
		}
		return nil
	}
}
func (h *refundLoss) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A caller's Refund of a compact log's admission whose reply was lost, called
// again after 16 more admissions (the log's table forgot the first run),
// gives back nothing more: a second run would take back another admission
// of the same time. A refund that never reached Redis may be called again.
func TestRefundRetriedAfterALostReply(t *testing.T) {
	m := minitest.New(t)
	hook := &refundLoss{}
	m.Rdb.AddHook(hook)
	l := slidelog.New(m.Rdb, slidelog.WithoutBatching())
	ctx := context.Background()
	lim := slidelog.PerMinute(300)
	if r, err := l.AllowN(ctx, "k", lim, 130); err != nil || !r.Allowed { // past 128: a compact log
		t.Fatal(r, err)
	}
	a, err := l.Allow(ctx, "k", lim)
	if err != nil || !a.Allowed {
		t.Fatal(a, err)
	}
	// b and the 16 after it share a's time (miniredis' clock stands still)
	for i := range 17 {
		if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
			t.Fatal(i, r, err)
		}
	}
	if err := l.Refund(ctx, a.Handle()); err == nil {
		t.Fatal("the refund's lost reply was not reported")
	}
	for i := range 16 {
		if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
			t.Fatal(i, r, err)
		}
	}
	if err := l.Refund(ctx, a.Handle()); err != nil {
		t.Fatal(err)
	}
	if typ := m.Type("slidelog:k"); typ != "string" {
		t.Fatalf("the log is a %s, not a compact log", typ)
	}
	// 130 + 1 + 17 + 16 admitted, a's taken back once: 163 counted
	if p, err := l.Peek(ctx, "k", lim); err != nil || p.Remaining != 300-163 {
		t.Fatalf("after a refund retried: %+v, %v; want %d remaining (refund.lua ran %d times)", p, err, 300-163, hook.runs.Load())
	}

	// one that never reached Redis (a closed client) may be called again
	m2 := minitest.New(t)
	l2 := slidelog.New(m2.Rdb, slidelog.WithoutBatching())
	c, err := l2.Allow(ctx, "k", lim)
	if err != nil || !c.Allowed {
		t.Fatal(c, err)
	}
	closed := redis.NewClient(&redis.Options{Addr: m2.Addr()})
	_ = closed.Close()
	if err := slidelog.RefundEvents(ctx, closed, c.Handle()); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("a refund on a closed client: %v", err)
	}
	if err := l2.Refund(ctx, c.Handle()); err != nil {
		t.Fatal(err)
	}
	if p, err := l2.Peek(ctx, "k", lim); err != nil || p.Remaining != 300 {
		t.Fatalf("a refund retried after it never ran: %+v, %v; want 300 remaining", p, err)
	}
}
