package slidelog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrBreakerOpen: Redis was found unreachable, so the decision was not sent
// and failed at once (the breaker is open). The error also wraps the
// failure that made Redis unreachable, as go-redis reported it where it
// could (errors.Is(err, syscall.ECONNREFUSED) for a closed port). It is an
// unavailability: the Policy answers for it.
var ErrBreakerOpen = errors.New("slidelog: Redis unreachable, not asked (breaker open)")

// breaker is what a Limiter knows of Redis being reachable. After
// breakerFailures decisions in a row failed because Redis could not be
// reached or did not answer in time (a connection refused or reset, a
// timeout, a pool with no connection), it opens: decisions fail at once
// with ErrBreakerOpen, which the Policy answers, instead of each paying its
// whole deadline. While open, one probe at a time (a script that reads
// nothing, on the node of the key that failed last, within breakerProbe)
// asks Redis, every breakerEvery; the first that is answered, or any
// decision answered meanwhile, closes it. The hook hears it open and close
// (Observation.Op "breaker_open", with the cause as Err, and
// "breaker_close").
//
// A decision on a Cluster whose keys are on a reachable master resets the
// count, so a Cluster with one master down keeps the breaker closed: only
// decisions whose keys are on the dead master pay their deadline.
type breaker struct {
	rdb     redis.Scripter
	observe func(Observation) // the Limiter's hook
	name    string            // the Limiter's WithName
	off     bool              // WithoutBreaker
	open    atomic.Bool       // decisions fail at once
	failed  atomic.Int32      // decisions in a row that found Redis unreachable
	mu      sync.Mutex
	cause   error  // what made Redis unreachable, the latest known
	key     string // the Redis key of the decision that failed last (a probe goes to its node)
	probing bool
}

const (
	// breakerFailures is how many decisions in a row must find Redis
	// unreachable for the breaker to open: one slow call is no outage.
	breakerFailures = 3
	// breakerEvery is how often a probe asks Redis while the breaker is open.
	breakerEvery = 100 * time.Millisecond
	// breakerProbe bounds each probe (with ContextTimeoutEnabled: go-redis
	// bounds it by its dial and read timeouts otherwise). Long enough for
	// go-redis to give its own cause: v9.22 reports a refused connection
	// after 5 dials 100ms apart, each of its 4 attempts (about 1.7s), and a
	// shorter probe would only learn "context deadline exceeded". A probe
	// under way when Redis returns is answered at its next dial.
	breakerProbe = 5 * time.Second
)

// probeScript reads nothing and writes nothing: it tells whether the
// server that holds KEYS[1] answers.
var probeScript = redis.NewScript("return 1")

// WithoutBreaker sends every decision to Redis, also while Redis is known
// to be unreachable: each then fails after its own deadline. Default: the
// breaker is on (decisions fail at once with ErrBreakerOpen, through the
// Policy, while Redis is unreachable; see ErrBreakerOpen).
func WithoutBreaker() Option {
	return func(c *config) { c.noBreaker = true }
}

// check fails a decision at once while the breaker is open.
func (b *breaker) check() error {
	if b.off || !b.open.Load() {
		return nil
	}
	b.mu.Lock()
	cause := b.cause
	b.mu.Unlock()
	return breakerError{cause}
}

// record learns from a decision's outcome on the Redis key key.
func (b *breaker) record(err error, key string) {
	if b.off {
		return
	}
	if err == nil || !unreachable(err) {
		if err == nil || redisAnswered(err) {
			if b.failed.Load() != 0 {
				b.failed.Store(0)
			}
			if b.open.Load() {
				b.close()
			}
		}
		return
	}
	if b.failed.Add(1) < breakerFailures || b.open.Load() {
		return
	}
	b.mu.Lock()
	if b.open.Load() {
		b.mu.Unlock()
		return
	}
	b.cause, b.key = err, key
	b.open.Store(true)
	start := !b.probing
	b.probing = true
	b.mu.Unlock()
	b.observe(Observation{Op: opBreakerOpen, Name: b.name, Err: err})
	if start {
		go b.probe()
	}
}

// close closes the breaker, once.
func (b *breaker) close() {
	b.mu.Lock()
	was := b.open.Swap(false)
	b.failed.Store(0)
	b.mu.Unlock()
	if was {
		b.observe(Observation{Op: opBreakerClose, Name: b.name})
	}
}

// probe asks Redis, one probe at a time, until it answers or a decision
// closes the breaker.
func (b *breaker) probe() {
	defer func() {
		b.mu.Lock()
		b.probing = false
		b.mu.Unlock()
	}()
	for b.open.Load() {
		b.mu.Lock()
		key := b.key
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), breakerProbe)
		err := b.ask(ctx, key)
		cancel()
		if err == nil || redisAnswered(err) || errors.Is(err, redis.ErrClosed) {
			b.close() // (a closed client: decisions say so themselves)
			return
		}
		b.mu.Lock()
		b.cause = err // a probe's own error: go-redis' cause, not a caller's deadline
		b.mu.Unlock()
		time.Sleep(breakerEvery)
	}
}

// ask runs the probe, whose panic (the client's) is its error.
func (b *breaker) ask(ctx context.Context, key string) (err error) {
	defer recoverTo(func(e error) { err = e })
	return probeScript.Run(ctx, b.rdb, []string{key}).Err()
}

// breakerError is a decision's error while the breaker is open:
// ErrBreakerOpen and the cause.
type breakerError struct{ cause error }

func (e breakerError) Error() string {
	if e.cause == nil {
		return ErrBreakerOpen.Error()
	}
	return fmt.Sprintf("%v: %v", ErrBreakerOpen, e.cause)
}

func (e breakerError) Unwrap() []error { return []error{ErrBreakerOpen, e.cause} }

// unreachable reports whether err means that Redis could not be reached or
// did not answer in time, rather than answered (an error reply, even one a
// Policy answers for, like LOADING), or was never asked because of the
// caller (its context canceled).
func unreachable(err error) bool {
	if redisAnswered(err) || errors.Is(err, ErrNotReplicated) || errors.Is(err, ErrPanic) || errors.Is(err, context.Canceled) {
		return false
	}
	return unavailable(err)
}

// redisAnswered reports whether err is a reply of Redis (an error reply).
func redisAnswered(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}
