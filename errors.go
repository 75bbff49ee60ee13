package slidelog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/slidelog/slidelog/internal/deadline"
	"github.com/slidelog/slidelog/internal/fault"
	"github.com/slidelog/slidelog/internal/waiting"
)

// Sentinel errors; test with errors.Is. Every error slidelog returns for
// bad input wraps one of the first six: bad input is refused before Redis
// is asked, and writes nothing.
var (
	// ErrInvalidLimit: Limit.Events < 1, Limit.Window < 1µs, or a window too
	// long to keep in microseconds exactly (over 2^53µs, about 285 years);
	// for AllowAll also no limit at all, more than MaxLimits, or two limits
	// with one window.
	ErrInvalidLimit = errors.New("slidelog: invalid limit")
	// ErrInvalidN: n < 1.
	ErrInvalidN = errors.New("slidelog: invalid n")
	// ErrExceedsLimit: n > Limit.Events, a request that no window can admit.
	ErrExceedsLimit = errors.New("slidelog: n exceeds the limit's events")
	// ErrEmptyKey: the key is the empty string.
	ErrEmptyKey = errors.New("slidelog: empty key")
	// ErrWrongType: the key's Redis value is no log slidelog wrote: another
	// Redis type (Redis said WRONGTYPE), a string that is no compact log, or
	// a sorted set whose scores a decision read are no event times (whole
	// microseconds below 2^53, such as 1.5). The value is left as it was.
	ErrWrongType = errors.New("slidelog: key holds a value of another Redis type")
	// ErrLimitTooLarge: Limit.Events is over the limiter's WithMaxEvents.
	ErrLimitTooLarge = errors.New("slidelog: limit's log would be too large")
	// ErrNotReplicated: with WithReplicas, fewer replicas than asked for
	// acknowledged an admission's write in time (or the acknowledgment could
	// not be read). The admission is not answered allowed, and its events
	// were taken back where the master could still be reached. It is an
	// unavailability: the Policy answers for it.
	ErrNotReplicated = errors.New("slidelog: not replicated")
	// ErrNotHeld: Lease.Renew found that the lease holds no slot: it was
	// denied, released, or its lease ran out (its events left the window,
	// and another caller may hold the slot now).
	ErrNotHeld = errors.New("slidelog: lease not held")
	// ErrWaitDeadline: Wait's request cannot fit before the context's
	// deadline, so Wait returned at once instead of sleeping until the
	// deadline.
	ErrWaitDeadline = waiting.ErrDeadline
)

// badInput: an error slidelog returns before asking Redis.
func badInput(err error) bool {
	return errors.Is(err, ErrEmptyKey) || errors.Is(err, ErrInvalidLimit) || errors.Is(err, ErrInvalidN) ||
		errors.Is(err, ErrExceedsLimit) || errors.Is(err, ErrLimitTooLarge)
}

// wrap adds context to a Redis failure. When the caller's context is done,
// the error also matches its error (see deadline.Ended): go-redis reports a
// deadline that cut a read short as an i/o timeout.
func wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	switch done := deadline.Ended(ctx); {
	case done != nil && !errors.Is(err, done):
		return fmt.Errorf("slidelog: %s: %w: %w", op, done, err)
	case strings.Contains(err.Error(), "WRONGTYPE"):
		// Redis and miniredis word it differently; both contain WRONGTYPE.
		return fmt.Errorf("slidelog: %s: %w: %w", op, ErrWrongType, err)
	}
	return fmt.Errorf("slidelog: %s: %w", op, err)
}

// unavailable reports whether err means that Redis cannot be reached or
// cannot serve now (see Policy), rather than a mistake: the failures
// fault.Unavailable names, ErrNotReplicated and ErrBreakerOpen.
func unavailable(err error) bool {
	return errors.Is(err, ErrNotReplicated) || errors.Is(err, ErrBreakerOpen) || fault.Unavailable(err)
}

// ErrBreakerOpen: Redis was found unreachable, so the decision was not sent
// and failed at once (the breaker is open). The error also wraps the
// failure that made Redis unreachable, as the breaker's probe met it: a
// dial's error (errors.Is(err, syscall.ECONNREFUSED) for a closed port),
// go-redis' own (its read timeout for a server that accepts connections
// and answers nothing), or the reply of a Redis that cannot serve now
// (LOADING). It is an unavailability: the Policy answers for it.
var ErrBreakerOpen = errors.New("slidelog: Redis unreachable, not asked (breaker open)")

// ErrPanic: the Redis client panicked while it served the call, as go-redis
// does on a reply it cannot read (a bulk length too large to allocate, from
// a proxy or a server that lies). The call's outcome is unknown, as after a
// lost reply. A goroutine slidelog starts never lets a panic out: it
// becomes the error of the calls it served, and the limiter stays usable.
// It is no unavailability: no policy answers for it.
var ErrPanic = errors.New("slidelog: the Redis client panicked")

// panics turns a client's panic into an error wrapping ErrPanic: deferred
// as panics().To(fail), in every goroutine slidelog starts.
func panics() fault.Panics { return fault.Panics{Sentinel: ErrPanic} }
