package slidelog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/deadline"
	"github.com/slidelog/slidelog/internal/fault"
	"github.com/slidelog/slidelog/internal/reply"
)

// Take-backs. Events that no caller was told were admitted would stay
// recorded with nobody to refund them: an acquisition's slots (held for a
// whole lease, as a dead holder's), and with WithReplicas, an admission the
// replicas did not acknowledge. That happens when the caller's context ends
// while its call is under way (a client that went away), when the reply is
// lost (a read timeout, a connection broken after the write: the script may
// have run), or when the replicas do not acknowledge. Every such take-back
// (a Refund: a no-op for events never recorded) goes through one queue per
// Limiter, and follows what it takes back:
//
//   - a call whose caller may leave before its answer (an acquisition, an
//     acknowledged admission) runs on a context that the caller's ending
//     does not cut (detached): go-redis closes a connection whose read a
//     deadline interrupted, and a take-back sent on another connection
//     could reach Redis before the call still waiting in the first one's
//     buffer. The take-back is queued only once the call has answered,
//     and only if it admitted;
//   - a call whose reply was lost all the same (the client's read timeout,
//     a broken connection) is taken back at once: its command left long
//     before (a read timeout is seconds), or the server closed the
//     connection, and with it every command it had not run.
//
// One bound for all of them: at most takeBackWorkers refunds run at once;
// the queue holds a Handle per take-back and nothing else, and forgets a
// take-back once its events have left their window anyway (they no longer
// count), so it never outgrows the events admitted in a window. A refund
// that fails is tried again, pausing longer each time, until then; one that
// can never succeed (an error that is no unavailability), or whose window
// ends first, is given up and reported to the Hook (Observation.Op
// "take_back", Err the last failure, N the events). None is dropped
// silently.
//
// A refund that may have run (its reply was lost) is tried again only where
// a second run takes back nothing more: a sorted set's events, by id. A
// compact log keeps no ids (a refund takes back events of the admission's
// time, which another admission of the same script call shares) and a
// calendar quota keeps a count; each remembers only its last refunds, so a
// second run, once they are forgotten, would take back another admission's
// events: one its caller was told was admitted, and the window would hold
// more answers than the limit. Such a take-back is given up instead:
// its events may stay recorded until their window ends, stricter, never
// looser.
type takeBacks struct {
	rdb     redis.Scripter
	within  time.Duration     // bounds each refund: takeBackTimeout, or WithReplicas' timeout
	observe func(Observation) // the Limiter's hook
	name    string            // the Limiter's WithName

	mu      sync.Mutex
	queue   []takeBack
	workers int
}

// takeBack is one take-back in the queue.
type takeBack struct {
	h     Handle
	until time.Time     // when its events have left their window (this process's clock)
	pause time.Duration // before the next retry
	err   error         // the last failure
}

const (
	// takeBackTimeout bounds each refund (without WithReplicas, whose
	// timeout bounds its own).
	takeBackTimeout = time.Second
	// takeBackWorkers is the most refunds of take-backs that one Limiter
	// runs at once.
	takeBackWorkers = 4
	// take-backs that fail pause this long before their first retry, then
	// twice as long each time, up to a second
	takeBackPause, takeBackMaxPause = 10 * time.Millisecond, time.Second
)

// add queues the take-back of h's events.
func (t *takeBacks) add(h Handle) {
	if h.n == 0 {
		return
	}
	t.queued(takeBack{h: h, until: time.Now().Add(h.window), pause: takeBackPause})
}

// queued puts tb in the queue, and starts a worker for it if fewer than
// takeBackWorkers run.
func (t *takeBacks) queued(tb takeBack) {
	t.mu.Lock()
	t.queue = append(t.queue, tb)
	start := t.workers < takeBackWorkers && t.workers < len(t.queue)
	if start {
		t.workers++
	}
	t.mu.Unlock()
	if start {
		go t.work()
	}
}

// work refunds queued take-backs until the queue is empty.
func (t *takeBacks) work() {
	for {
		t.mu.Lock()
		if len(t.queue) == 0 {
			t.workers--
			t.mu.Unlock()
			return
		}
		tb := t.queue[0]
		t.queue = t.queue[1:]
		t.mu.Unlock()
		t.run(tb)
	}
}

// run refunds tb once, and queues it again, reports it or is done with it.
func (t *takeBacks) run(tb takeBack) {
	if !time.Now().Before(tb.until) {
		t.give(tb) // left its window: it no longer counts
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.within)
	err := t.refund(ctx, tb.h)
	cancel()
	switch {
	case err == nil:
	case !fault.Unavailable(err) && !fault.IsPanic(err), once(tb.h) && fault.MayHaveRun(err):
		tb.err = err
		t.give(tb)
	default: // Redis unavailable (and a second run takes back nothing more): again after a pause
		tb.err = err
		pause := tb.pause
		tb.pause = min(2*tb.pause, takeBackMaxPause)
		time.AfterFunc(pause, func() { t.queued(tb) })
	}
}

// refund runs refund.lua for h's events, as Refund does (without telling
// the deny cache: a take-back undoes an admission no caller heard of, and a
// denial the cache remembers meanwhile is of another call, only ever too
// strict until it expires); its panic (the client's) is its error.
func (t *takeBacks) refund(ctx context.Context, h Handle) (err error) {
	defer panics().To(func(e error) { err = e })
	return refundEvents(ctx, t.rdb, h)
}

// give gives tb up: reported to the hook if a refund failed (its events
// stay recorded until their window ends).
func (t *takeBacks) give(tb takeBack) {
	if tb.err != nil {
		t.report(tb.h, tb.err)
	}
}

// report tells the hook of the take-back of h given up after err.
func (t *takeBacks) report(h Handle, err error) {
	t.observe(Observation{Op: opTakeBack, Name: t.name, N: h.n, Err: err})
}

// once reports whether h's refund must not run twice: its logs are
// compact logs or calendar quotas, which tell a second run from the first
// only while they remember it (refundEvents), so a refund of h that may
// have run is never sent again.
func once(h Handle) bool { return h.given != nil }

// detached runs call, whose admission h is to be taken back if its caller
// leaves before its answer, on a context the caller's ending does not cut,
// and waits for it as long as ctx allows. If ctx ends first, the caller gets
// fault.Left{Err: ctx.Err()}, and once call has answered, its events are taken back if
// it admitted (or if its reply was lost: it may have). A call whose context
// had ended already is not sent at all.
func (t *takeBacks) detached(ctx context.Context, h Handle, call func(context.Context) (any, error)) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		defer func() { done <- a }()
		defer panics().To(func(err error) { a = answer{nil, err} })
		a.v, a.err = call(context.WithoutCancel(ctx))
	}()
	select {
	case a := <-done:
		return a.v, a.err
	case <-ctx.Done():
		go func() {
			a := <-done
			if (a.err == nil && reply.Admits(a.v)) || (a.err != nil && fault.MayHaveRun(a.err)) || notAckedReply(a) {
				t.add(h.timedBy(a.v))
			}
		}()
		return nil, fault.Left{Err: ctx.Err()}
	}
}

// answer is a script call's reply and error.
type answer struct {
	v   any
	err error
}

// notAckedReply: an admission the replicas did not acknowledge (its reply
// comes with the error).
func notAckedReply(a answer) bool {
	var na fault.NotAcked
	return a.v != nil && errors.As(a.err, &na) && reply.Admits(a.v)
}

// unacked refunds the events of an admission that the replicas did not
// acknowledge, and returns the error that tells the caller so. The refund
// runs within the caller's context; when that context ends first (it may be
// what ended the WAIT), the refund goes on in the background, bounded by
// the WAIT's timeout, unless it may have run and must not run twice (once:
// then it is given up, and reported to the hook).
func (t *takeBacks) unacked(ctx context.Context, h Handle, unacked error) error {
	if deadline.Ended(ctx) == nil {
		err := t.refund(ctx, h)
		if err == nil {
			return fmt.Errorf("%w; its events were taken back", unacked)
		}
		done := deadline.Ended(ctx)
		if done == nil {
			return fmt.Errorf("%w; taking its events back failed: %w", unacked, err)
		}
		if once(h) && fault.MayHaveRun(err) {
			t.report(h, err)
			err = fmt.Errorf("%w; taking its events back was cut short (they may stay recorded until their window ends): %w", unacked, err)
			if !errors.Is(err, done) {
				err = fmt.Errorf("%w: %w", done, err)
			}
			return err
		}
	}
	t.add(h)
	err := fmt.Errorf("%w; its events are being taken back", unacked)
	if done := deadline.Ended(ctx); !errors.Is(err, done) {
		err = fmt.Errorf("%w: %w", done, err)
	}
	return err
}
