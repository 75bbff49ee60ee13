// Package breaker knows whether Redis is reachable: while it is known not
// to be, decisions fail at once (an Error, wrapping the root's
// ErrBreakerOpen) instead of each paying its whole deadline.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/fault"
)

// Config is what a Breaker is built from.
type Config struct {
	Client  redis.Scripter
	Off     bool                         // WithoutBreaker, or a client of several nodes: it never opens
	Open    error                        // the sentinel its Error wraps (ErrBreakerOpen)
	Panics  fault.Panics                 // a client's panic in a probe: its error
	Observe func(open bool, cause error) // told when it opens (with the cause) and closes
}

// New returns a closed Breaker.
func New(c Config) *Breaker { return &Breaker{c: c} }

// Breaker is what a Limiter knows of Redis being reachable. After
// Failures decisions in a row failed without being served (a
// connection refused or reset, a timeout, no connection in the pool, a
// caller's deadline that ended the call, a reply such as LOADING: see
// unreachable), it asks Redis itself: a probe (a script that reads nothing,
// on the node of the key that failed last). The failures only make it ask:
// a caller's deadline says nothing of Redis, only the probe's own answer
// decides. Served within Confirm, or later but within go-redis' own
// timeouts (a slow Redis, a paused one), the failures were the callers' and
// nothing changes; answered LOADING, BUSY or another reply of a Redis that
// cannot serve now, the breaker opens with it. Not answered quickly, the
// probe dials the server with the client's own dialer, once, without
// go-redis' retries: a dial that fails (connection refused) opens the
// breaker at once, with the dial's error as its cause; a dial that succeeds
// leaves the verdict to the script's answer, bounded by go-redis' own
// timeouts and ProbeTimeout, and no answer opens it.
//
// While open, decisions fail at once with an Error (the root's ErrBreakerOpen, wrapping
// the cause), which the Policy answers, instead of each paying its whole
// deadline. One probe at a time asks Redis every Every, the same way
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
type Breaker struct {
	c       Config
	open    atomic.Bool  // decisions fail at once
	failed  atomic.Int32 // decisions in a row that failed without being served
	mu      sync.Mutex
	cause   error  // what made Redis unreachable, the latest known
	key     string // the Redis key of the decision that failed last (a probe goes to its node)
	probing bool   // a probe goroutine runs
}

const (
	// Failures is how many decisions in a row must fail without an
	// answer before a probe asks Redis: one slow call is no outage.
	Failures = 3
	// Confirm is how long the first probe waits for Redis' answer
	// before it dials the server to learn why there is none: a healthy
	// Redis answers a script that reads nothing in well under a
	// millisecond.
	Confirm = 100 * time.Millisecond
	// Every is how often a probe asks Redis while the breaker is open.
	Every = 100 * time.Millisecond
	// ProbeTimeout bounds a probe whose dial succeeded (with
	// ContextTimeoutEnabled: go-redis bounds it by its dial and read
	// timeouts otherwise, 3s by default): a Redis that accepts connections
	// but answers nothing for that long is down; one that answers sooner,
	// however late, is not.
	ProbeTimeout = 5 * time.Second
)

// probeScript reads nothing and writes nothing: it tells whether the
// server that holds KEYS[1] answers.
var probeScript = redis.NewScript(ProbeSource)

// ProbeSource is the probe's script.
const ProbeSource = "return 1"

// Check fails a decision at once while the breaker is open.
func (b *Breaker) Check() error {
	if b.c.Off || !b.open.Load() {
		return nil
	}
	b.mu.Lock()
	cause := b.cause
	b.mu.Unlock()
	return Error{Sentinel: b.c.Open, Cause: cause}
}

// Record learns from the outcome of a decision sent on the Redis key key.
func (b *Breaker) Record(err error, key string) {
	if b.c.Off {
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
	if b.failed.Add(1) < Failures {
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
func (b *Breaker) close() {
	b.mu.Lock()
	was := b.open.Swap(false)
	b.failed.Store(0)
	b.mu.Unlock()
	if was {
		b.c.Observe(false, nil)
	}
}

// probe asks Redis whether it answers: first to confirm the failures,
// then, while open, every Every until it answers or a decision
// closes the breaker. It is the only goroutine that probes (probing), and
// it stops probing under mu, in the same step that finds the breaker
// closed or closes it.
func (b *Breaker) probe() {
	b.mu.Lock()
	key := b.key
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), Confirm)
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
		b.c.Observe(true, err)
	}
	for {
		time.Sleep(Every)
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
				b.c.Observe(false, nil)
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
// connections answers within go-redis' own timeouts and ProbeTimeout, or
// is down.
func (b *Breaker) reach(key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), ProbeTimeout)
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
func (b *Breaker) dial(ctx context.Context) (err error) {
	defer b.c.Panics.To(func(e error) { err = e })
	c, ok := b.c.Client.(interface{ Options() *redis.Options })
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
func (b *Breaker) ask(ctx context.Context, key string) (err error) {
	defer b.c.Panics.To(func(e error) { err = e })
	return probeScript.Run(ctx, b.c.Client, []string{key}).Err()
}

// Error is a decision's error while the breaker is open: Sentinel (the
// root's ErrBreakerOpen) and the cause.
type Error struct{ Sentinel, Cause error }

func (e Error) Error() string {
	if e.Cause == nil {
		return e.Sentinel.Error()
	}
	return fmt.Sprintf("%v: %v", e.Sentinel, e.Cause)
}

func (e Error) Unwrap() []error { return []error{e.Sentinel, e.Cause} }

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

// State reports whether the breaker is open and whether a probe runs.
func (b *Breaker) State() (open, probing bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open.Load(), b.probing
}

// Off reports whether the breaker never opens.
func (b *Breaker) Off() bool { return b.c.Off }

// Open reports whether the breaker is open.
func (b *Breaker) Open() bool { return b.open.Load() }
