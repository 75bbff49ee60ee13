// Package takeback is the queue of take-backs. Events that no caller was
// told were admitted would stay recorded with nobody to refund them: an acquisition's slots (held for a
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
// One bound for all of them: at most Workers refunds run at once;
// the queue holds a Job per take-back and nothing else, and forgets a
// take-back once its events have left their window anyway (they no longer
// count), so it never outgrows the events admitted in a window. A refund
// that fails is tried again, pausing longer each time, until then; one that
// can never succeed (an error that is no unavailability), or whose window
// ends first, is given up and reported (Config.Report: the Hook's Observation.Op
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
package takeback

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/slidelog/slidelog/internal/deadline"
	"github.com/slidelog/slidelog/internal/fault"
	"github.com/slidelog/slidelog/internal/reply"
)

// Job is one take-back: the refund of N events that count for Window
// after their admission. Once: the refund must not run twice (its logs are
// compact logs or calendar quotas, which tell a second run from the first
// only while they remember it), so one that may have run is never sent
// again.
type Job struct {
	N      int
	Window time.Duration
	Once   bool
	Refund func(context.Context) error
}

// Config is what a Queue is built from.
type Config struct {
	Within time.Duration          // bounds each refund: Timeout, or WithReplicas' timeout
	Report func(n int, err error) // a take-back of n events given up after err
	Panics fault.Panics           // a client's panic in a refund: its error
}

// New returns an empty Queue.
func New(c Config) *Queue { return &Queue{c: c} }

type Queue struct {
	c Config

	mu      sync.Mutex
	queue   []takeBack
	workers int
}

// takeBack is one take-back in the queue.
type takeBack struct {
	j     Job
	until time.Time     // when its events have left their window (this process's clock)
	pause time.Duration // before the next retry
	err   error         // the last failure
}

const (
	// Timeout bounds each refund (without WithReplicas, whose timeout
	// bounds its own).
	Timeout = time.Second
	// Workers is the most refunds of take-backs that one Queue runs at
	// once.
	Workers = 4
	// Take-backs that fail pause this long before their first retry, then
	// twice as long each time, up to a second.
	Pause, MaxPause = 10 * time.Millisecond, time.Second
)

// Add queues the take-back j.
func (t *Queue) Add(j Job) {
	if j.N == 0 {
		return
	}
	t.queued(takeBack{j: j, until: time.Now().Add(j.Window), pause: Pause})
}

// queued puts tb in the queue, and starts a worker for it if fewer than
// takeBackWorkers run.
func (t *Queue) queued(tb takeBack) {
	t.mu.Lock()
	t.queue = append(t.queue, tb)
	start := t.workers < Workers && t.workers < len(t.queue)
	if start {
		t.workers++
	}
	t.mu.Unlock()
	if start {
		go t.work()
	}
}

// work refunds queued take-backs until the queue is empty.
func (t *Queue) work() {
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
func (t *Queue) run(tb takeBack) {
	if !time.Now().Before(tb.until) {
		t.give(tb) // left its window: it no longer counts
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.c.Within)
	err := t.refund(ctx, tb.j)
	cancel()
	switch {
	case err == nil:
	case !fault.Unavailable(err) && !fault.IsPanic(err), tb.j.Once && fault.MayHaveRun(err):
		tb.err = err
		t.give(tb)
	default: // Redis unavailable (and a second run takes back nothing more): again after a pause
		tb.err = err
		pause := tb.pause
		tb.pause = min(2*tb.pause, MaxPause)
		time.AfterFunc(pause, func() { t.queued(tb) })
	}
}

// refund runs j's refund; its panic (the client's) is its error.
func (t *Queue) refund(ctx context.Context, j Job) (err error) {
	defer t.c.Panics.To(func(e error) { err = e })
	return j.Refund(ctx)
}

// give gives tb up: reported to the hook if a refund failed (its events
// stay recorded until their window ends).
func (t *Queue) give(tb takeBack) {
	if tb.err != nil {
		t.c.Report(tb.j.N, tb.err)
	}
}

// Detached runs call, whose admission is to be taken back (job, given the
// call's reply) if its caller leaves before its answer, on a context the
// caller's ending does not cut, and waits for it as long as ctx allows. If
// ctx ends first, the caller gets a fault.Left with ctx's error, and once
// call has answered, its events are taken back if it admitted (or if its
// reply was lost: it may have). A call whose context had ended already is
// not sent at all.
func (t *Queue) Detached(ctx context.Context, job func(reply any) Job, call func(context.Context) (any, error)) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		defer func() { done <- a }()
		defer t.c.Panics.To(func(err error) { a = answer{nil, err} })
		a.v, a.err = call(context.WithoutCancel(ctx))
	}()
	select {
	case a := <-done:
		return a.v, a.err
	case <-ctx.Done():
		go func() {
			a := <-done
			if (a.err == nil && reply.Admits(a.v)) || (a.err != nil && fault.MayHaveRun(a.err)) || notAckedReply(a) {
				t.Add(job(a.v))
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

// Unacked refunds the events of an admission that the replicas did not
// acknowledge, and returns the error that tells the caller so. The refund
// runs within the caller's context; when that context ends first (it may be
// what ended the WAIT), the refund goes on in the background, bounded by
// the WAIT's timeout, unless it may have run and must not run twice (once:
// then it is given up, and reported to the hook).
func (t *Queue) Unacked(ctx context.Context, j Job, unacked error) error {
	if deadline.Ended(ctx) == nil {
		err := t.refund(ctx, j)
		if err == nil {
			return fmt.Errorf("%w; its events were taken back", unacked)
		}
		done := deadline.Ended(ctx)
		if done == nil {
			return fmt.Errorf("%w; taking its events back failed: %w", unacked, err)
		}
		if j.Once && fault.MayHaveRun(err) {
			t.c.Report(j.N, err)
			err = fmt.Errorf("%w; taking its events back was cut short (they may stay recorded until their window ends): %w", unacked, err)
			if !errors.Is(err, done) {
				err = fmt.Errorf("%w: %w", done, err)
			}
			return err
		}
	}
	t.Add(j)
	err := fmt.Errorf("%w; its events are being taken back", unacked)
	if done := deadline.Ended(ctx); !errors.Is(err, done) {
		err = fmt.Errorf("%w: %w", done, err)
	}
	return err
}

// Len is how many take-backs are queued or being refunded now (one paused
// before its retry is neither).
func (t *Queue) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue) + t.workers
}
