package slidelog

import (
	"errors"
	"fmt"
)

// ErrPanic: the Redis client panicked while it served the call, as go-redis
// does on a reply it cannot read (a bulk length too large to allocate, from
// a proxy or a server that lies). The call's outcome is unknown, as after a
// lost reply. A goroutine slidelog starts never lets a panic out: it
// becomes the error of the calls it served, and the limiter stays usable.
// It is no unavailability: no policy answers for it.
var ErrPanic = errors.New("slidelog: the Redis client panicked")

// panicked is the error of a recovered panic: ErrPanic, with its value.
type panicked struct{ value any }

func (p panicked) Error() string { return fmt.Sprintf("%v: %v", ErrPanic, p.value) }

func (p panicked) Unwrap() error { return ErrPanic }

// recoverTo, deferred, turns a panic of the goroutine into an error that it
// hands to fail; without a panic it does nothing.
func recoverTo(fail func(error)) {
	if v := recover(); v != nil {
		fail(panicked{v})
	}
}
