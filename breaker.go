package slidelog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/config"
	"github.com/slidelog/slidelog/internal/fault"
)

// ErrBreakerOpen: Redis was found unreachable, so the decision was not sent
// and failed at once (the breaker is open). The error also wraps the
// failure that made Redis unreachable, as the breaker's probe met it: a
// dial's error (errors.Is(err, syscall.ECONNREFUSED) for a closed port),
// go-redis' own (its read timeout for a server that accepts connections
// and answers nothing), or the reply of a Redis that cannot serve now
// (LOADING). It is an unavailability: the Policy answers for it.
var ErrBreakerOpen = errors.New("slidelog: Redis unreachable, not asked (breaker open)")

// breaker is what a Limiter knows of Redis being reachable. After
// breakerFailures decisions in a row failed without being served (a
// connection refused or reset, a timeout, no connection in the pool, a
// caller's deadline that ended the call, a reply such as LOADING: see
// unreachable), it asks Redis itself: a probe (a script that reads nothing,
// on the node of the key that failed last). The failures only make it ask:
// a caller's deadline says nothing of Redis, only the probe's own answer
// decides. Served within breakerConfirm, or later but within go-redis' own
// timeouts (a slow Redis, a paused one), the failures were the callers' and
// nothing changes; answered LOADING, BUSY or another reply of a Redis that
// cannot serve now, the breaker opens with it. Not answered quickly, the
// probe dials the server with the client's own dialer, once, without
// go-redis' retries: a dial that fails (connection refused) opens the
// breaker at once, with the dial's error as its cause; a dial that succeeds
// leaves the verdict to the script's answer, bounded by go-redis' own
// timeouts and breakerProbe, and no answer opens it.
//
// While open, decisions fail at once with ErrBreakerOpen (wrapping the
// cause), which the Policy answers, instead of each paying its whole
// deadline. One probe at a time asks Redis every breakerEvery, the same way
// (a dial, then the script); the first that is served, even late, or any
// decision served meanwhile, closes it. The hook hears it open and close
// (Observation.Op "breaker_open", with the cause as Err, and
// "breaker_close").
//
// One goroutine at most probes, and the open state changes under mu with
// who probes, so a breaker is never left open with nobody probing.
//
// It is off for a Cluster and a Ring (New): their nodes fail one at a time,
// and one node down must not stop the decisions the others can take.
type breaker struct {
	rdb     redis.Scripter
	observe func(Observation) // the Limiter's hook
	name    string            // the Limiter's WithName
	off     bool              // WithoutBreaker, or a client of several nodes
	open    atomic.Bool       // decisions fail at once
	failed  atomic.Int32      // decisions in a row that failed without being served
	mu      sync.Mutex
	cause   error  // what made Redis unreachable, the latest known
	key     string // the Redis key of the decision that failed last (a probe goes to its node)
	probing bool   // a probe goroutine runs
}

const (
	// breakerFailures is how many decisions in a row must fail without an
	// answer before a probe asks Redis: one slow call is no outage.
	breakerFailures = 3
	// breakerConfirm is how long the first probe waits for Redis' answer
	// before it dials the server to learn why there is none: a healthy
	// Redis answers a script that reads nothing in well under a
	// millisecond.
	breakerConfirm = 100 * time.Millisecond
	// breakerEvery is how often a probe asks Redis while the breaker is open.
	breakerEvery = 100 * time.Millisecond
	// breakerProbe bounds a probe whose dial succeeded (with
	// ContextTimeoutEnabled: go-redis bounds it by its dial and read
	// timeouts otherwise, 3s by default): a Redis that accepts connections
	// but answers nothing for that long is down; one that answers sooner,
	// however late, is not.
	breakerProbe = 5 * time.Second
)

// probeScript reads nothing and writes nothing: it tells whether the
// server that holds KEYS[1] answers.
var probeScript = redis.NewScript("return 1")

// WithoutBreaker sends every decision to Redis, also while Redis is known
// to be unreachable: each then fails after its own deadline. Default: the
// breaker is on for a single server or a Sentinel failover client
// (decisions fail at once with ErrBreakerOpen, through the Policy, while
// Redis is unreachable; see ErrBreakerOpen), off for a Cluster and a Ring.
func WithoutBreaker() Option {
	return func(c *config.Config) { c.NoBreaker = true }
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

// record learns from the outcome of a decision sent on the Redis key key.
func (b *breaker) record(err error, key string) {
	if b.off {
		return
	}
	if served(err) {
		if b.failed.Load() != 0 {
			b.failed.Store(0)
		}
		if b.open.Load() {
			b.close()
		}
		return
	}
	if !unreachable(err) {
		return
	}
	if b.failed.Add(1) < breakerFailures {
		return
	}
	b.mu.Lock()
	if b.probing {
		b.mu.Unlock()
		return
	}
	b.probing, b.key = true, key
	b.mu.Unlock()
	go b.probe()
}

// close closes the breaker (a decision was answered), once.
func (b *breaker) close() {
	b.mu.Lock()
	was := b.open.Swap(false)
	b.failed.Store(0)
	b.mu.Unlock()
	if was {
		b.observe(Observation{Op: opBreakerClose, Name: b.name})
	}
}

// probe asks Redis whether it answers: first to confirm the failures,
// then, while open, every breakerEvery until it answers or a decision
// closes the breaker. It is the only goroutine that probes (probing), and
// it stops probing under mu, in the same step that finds the breaker
// closed or closes it.
func (b *breaker) probe() {
	b.mu.Lock()
	key := b.key
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), breakerConfirm)
	err := b.ask(ctx, key)
	cancel()
	if !answered(err) {
		err = b.reach(key)
	}
	if answered(err) { // the failures were the callers'
		b.mu.Lock()
		b.failed.Store(0)
		b.probing = false
		b.mu.Unlock()
		return
	}
	b.mu.Lock()
	b.cause = err
	opened := !b.open.Swap(true)
	b.mu.Unlock()
	if opened {
		b.observe(Observation{Op: opBreakerOpen, Name: b.name, Err: err})
	}
	for {
		time.Sleep(breakerEvery)
		b.mu.Lock()
		if !b.open.Load() { // a decision was answered
			b.probing = false
			b.mu.Unlock()
			return
		}
		key := b.key
		b.mu.Unlock()
		err := b.reach(key)
		b.mu.Lock()
		if answered(err) {
			was := b.open.Swap(false)
			b.failed.Store(0)
			b.probing = false
			b.mu.Unlock()
			if was {
				b.observe(Observation{Op: opBreakerClose, Name: b.name})
			}
			return
		}
		b.cause = err // the probe's own error: go-redis' cause or the dial's, not a caller's deadline
		b.mu.Unlock()
	}
}

// reach asks Redis with no caller's deadline: a dial of the server first,
// which tells a refused connection at once (go-redis retries a failed dial
// for as long as its caller waits, and its caller then learns only that
// its deadline passed), then the script, which a server that accepts
// connections answers within go-redis' own timeouts and breakerProbe, or
// is down.
func (b *breaker) reach(key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), breakerProbe)
	defer cancel()
	if err := b.dial(ctx); err != nil {
		return err
	}
	return b.ask(ctx, key)
}

// dial connects to the client's server once, as go-redis would (its
// dialer, with its address, TLS and dial timeout; a Sentinel client's
// dials the current master), without its retries, and hangs up. A client
// that tells no options (not a *redis.Client) is not dialed.
func (b *breaker) dial(ctx context.Context) (err error) {
	defer panics().To(func(e error) { err = e })
	c, ok := b.rdb.(interface{ Options() *redis.Options })
	if !ok {
		return nil
	}
	opt := c.Options()
	if opt == nil || opt.Dialer == nil {
		return nil
	}
	conn, err := opt.Dialer(ctx, opt.Network, opt.Addr)
	if err != nil {
		return err
	}
	_ = conn.Close()
	return nil
}

// answered reports whether a probe's err means Redis served it (or this
// process closed the client: decisions then say so themselves).
func answered(err error) bool {
	return served(err) || errors.Is(err, redis.ErrClosed)
}

// served reports whether err, a decision's or a probe's, means that Redis
// served the call: no error, or an error reply of a Redis that serves (such
// as WRONGTYPE or NOPERM), not one of a Redis that cannot serve now (such as
// LOADING or BUSY: an unavailability, which the breaker counts as a
// failure).
func served(err error) bool {
	return err == nil || fault.Answered(err) && !fault.Unavailable(err)
}

// ask runs the probe, whose panic (the client's) is its error.
func (b *breaker) ask(ctx context.Context, key string) (err error) {
	defer panics().To(func(e error) { err = e })
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

// unreachable reports whether err means that Redis could not be reached,
// did not answer in time, or answered that it cannot serve now (LOADING,
// BUSY, ...: go-redis retries LOADING until a short deadline ends, so its
// caller may only see the deadline), rather than served the call, or was
// never asked because of the caller (its context canceled).
func unreachable(err error) bool {
	if served(err) || errors.As(err, new(fault.NotAcked)) || fault.IsPanic(err) || errors.Is(err, context.Canceled) {
		return false
	}
	return fault.Unavailable(err)
}

// severalNodes reports whether rdb spreads keys over several servers (a
// Cluster, a Ring, or a type that embeds one), where the breaker is off.
func severalNodes(rdb redis.Scripter) bool {
	switch rdb.(type) {
	case interface{ Options() *redis.ClusterOptions }, interface{ Options() *redis.RingOptions }:
		return true
	}
	return false
}
