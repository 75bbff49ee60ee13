// Package fault tells what a failed Redis call means: whether Redis could
// not be reached or serve (an unavailability), whether the call may have
// run all the same, whether it was redirected; and the errors slidelog's
// own layers give a call: an admission the replicas did not acknowledge
// (NotAcked), a caller that left (Left), a client's panic (Panics).
//
// It knows none of the root's sentinel errors: what wraps one is said by
// the layer that was given it (the root's unavailable adds
// ErrNotReplicated and ErrBreakerOpen; Panics carries ErrPanic).
package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// unavailableCodes are the error replies of a Redis that cannot serve now
// but will.
var unavailableCodes = []string{"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "OOM", "NOREPLICAS"}

// Unavailable reports whether err means that Redis cannot be reached or
// cannot serve now, rather than a mistake: an error reply of a Redis that
// cannot serve now (LOADING, BUSY, ..., "max number of clients reached"),
// a network error, a timeout, a connection that ended, or a command
// go-redis never sent (Unsent). A client this process closed is a mistake.
func Unavailable(err error) bool {
	var reply redis.Error
	if errors.As(err, &reply) {
		msg := reply.Error()
		for _, code := range unavailableCodes {
			// A script's failing call: "OOM ..." (Redis 7 and later), or
			// "ERR Error running script ...: -OOM ..." (Redis 6).
			if strings.HasPrefix(msg, code+" ") || strings.Contains(msg, " -"+code+" ") {
				return true
			}
		}
		return strings.Contains(msg, "max number of clients reached")
	}
	if errors.Is(err, redis.ErrClosed) {
		return false // this process closed the client: a mistake, not an outage
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		Unsent(err)
}

// Unsent reports whether err is go-redis' own word for a Redis it could not
// reach or use, so that the command was never sent: every connection busy
// (pool timeout, pool exhausted), every Ring shard down, no Sentinel
// reachable. They are told by their text: go-redis exports none of them,
// or only some versions do.
func Unsent(err error) bool {
	for _, words := range []string{"redis: connection pool timeout", "redis: connection pool exhausted",
		"redis: all ring shards are down", "redis: all sentinels specified in configuration are unreachable"} {
		if strings.Contains(err.Error(), words) {
			return true
		}
	}
	return false
}

// MayHaveRun reports whether a script call that failed with err may have
// run in Redis all the same: its reply was lost (a timeout, the caller's
// context, a connection broken after the write), rather than answered (an
// error reply: the script wrote nothing) or never sent (no connection could
// be had, or the client is closed).
func MayHaveRun(err error) bool {
	var reply redis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &reply), errors.Is(err, redis.ErrClosed):
		return false
	case errors.As(err, &op) && op.Op == "dial":
		return false
	}
	return !Unsent(err)
}

// Answered reports whether err is a reply of Redis (an error reply).
func Answered(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// Redirection reports whether err is a Cluster's MOVED or ASK.
func Redirection(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED ") || redis.HasErrorPrefix(err, "ASK ")
}

// Demoted reports whether err is a WAIT's answer from a master that
// stopped being one while the WAIT blocked: Redis unblocks it with
// "UNBLOCKED force unblock from blocking operation, instance state changed
// (master -> replica?)".
func Demoted(err error) bool { return redis.HasErrorPrefix(err, "UNBLOCKED") }

// NotAcked is the error of an admission that was recorded but not
// acknowledged by the replicas: the reply that comes with it is to be
// taken back.
type NotAcked struct{ Err error }

func (e NotAcked) Error() string { return e.Err.Error() }
func (e NotAcked) Unwrap() error { return e.Err }

// Left is the error of a caller that left before its call answered: its
// context's. What the call recorded, if taken back, is the layer's that
// sent it to take.
type Left struct{ Err error }

func (e Left) Error() string { return e.Err.Error() }
func (e Left) Unwrap() error { return e.Err }

// Panic is the error of a recovered panic of the Redis client: Sentinel
// (the root's ErrPanic), with the panic's value.
type Panic struct {
	Sentinel error
	Value    any
}

func (p Panic) Error() string { return fmt.Sprintf("%v: %v", p.Sentinel, p.Value) }
func (p Panic) Unwrap() error { return p.Sentinel }

// IsPanic reports whether err is, or wraps, a recovered panic.
func IsPanic(err error) bool { return errors.As(err, new(Panic)) }

// Panics turns the panics of the goroutines slidelog starts into errors
// that wrap Sentinel.
type Panics struct{ Sentinel error }

// To, deferred, turns a panic of the goroutine into an error that it hands
// to fail; without a panic it does nothing.
func (p Panics) To(fail func(error)) {
	if v := recover(); v != nil {
		fail(Panic{Sentinel: p.Sentinel, Value: v})
	}
}
