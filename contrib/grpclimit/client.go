package grpclimit

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/local"
)

// Waiter is what the client interceptors need: WaitN blocks until n events
// for key fit limit and records them, and returns at once with an error
// wrapping slidelog.ErrWaitDeadline when they cannot fit before the
// context's deadline. *slidelog.Limiter (one quota shared by every instance
// of the caller) and *local.Limiter (one process) are Waiters.
type Waiter interface {
	WaitN(ctx context.Context, key string, limit slidelog.Limit, n int) (slidelog.Result, error)
}

var (
	_ Waiter = (*slidelog.Limiter)(nil)
	_ Waiter = (*local.Limiter)(nil)
)

// ClientOptions configure the client interceptors, which pace a service's
// own calls to a partner's quota. Waiter, Key or KeyFor, and Limit, Methods
// or LimitFor, are required.
type ClientOptions struct {
	Waiter Waiter

	// Limit is the quota of every method that Methods does not name. Those
	// methods share one budget per key.
	Limit slidelog.Limit
	// Methods are quotas by full method name ("/package.Service/Method"),
	// each a budget of its own per key (fullMethod + " " + the key). A
	// method mapped to the zero Limit is called without waiting.
	Methods map[string]slidelog.Limit
	// LimitFor is a quota per call, in place of Limit and Methods; ok false
	// makes the call without waiting. The call counts against the key as it
	// is: quotas of different windows need different keys.
	LimitFor func(ctx context.Context, fullMethod string) (limit slidelog.Limit, ok bool)

	// Key is the quota's key, e.g. "partner:acme": every instance of the
	// caller that shares the limiter and the key shares the quota.
	Key string
	// KeyFor is a key per call (e.g. the tenant a call is made for), in
	// place of Key. ErrSkip makes the call without waiting. Another error
	// fails the call InvalidArgument, not made; so
	// does a key that begins with '/' for a method Methods does not name,
	// when Methods gives some method a budget of its own (as on the server:
	// it could name another key's budget of that method).
	KeyFor KeyFunc
	// Cost is the events a call weighs (WaitN), at least 1. Default 1.
	Cost func(ctx context.Context, fullMethod string) int

	// OnError is told of every call the interceptor does not make, with the
	// code it fails with and the error that caused it; it is the place to
	// log. It runs on the caller's goroutine. Default: none.
	OnError func(ctx context.Context, fullMethod string, code codes.Code, err error)
}

// Validate reports the configuration mistake the client interceptor
// constructors would panic on, or nil.
func (o ClientOptions) Validate() error {
	switch {
	case o.Waiter == nil:
		return errors.New("grpclimit: ClientOptions.Waiter is nil")
	case o.Key == "" && o.KeyFor == nil:
		return errors.New("grpclimit: ClientOptions.Key or ClientOptions.KeyFor is required")
	case o.Key != "" && o.KeyFor != nil:
		return errors.New("grpclimit: ClientOptions.KeyFor replaces ClientOptions.Key: set one")
	}
	return validLimits("ClientOptions", o.Limit, o.Methods, o.LimitFor != nil)
}

// UnaryClientInterceptor returns an interceptor that waits, before each
// call it limits, until the call fits its quota (Waiter.WaitN), then makes
// it. A call that cannot be made is not sent, and fails with:
//
//   - codes.ResourceExhausted when it cannot fit before the context's
//     deadline: it fails at once, not at the deadline, with a
//     google.rpc.RetryInfo detail (the wait the quota asked for) and an
//     error that wraps slidelog.ErrWaitDeadline;
//   - the context's codes.DeadlineExceeded or codes.Canceled when the
//     context ends while the call waits (a call waiting its turn behind
//     others of the same key ends with its context), as a call gRPC itself
//     could not finish; the error wraps the context's error;
//   - codes.InvalidArgument when it weighs more than its quota ever admits,
//     or KeyFor failed;
//   - codes.Internal for a bug in the configuration's functions or a
//     limiter error no recovery of Redis cures (slidelog.ErrWrongType,
//     slidelog.ErrLimitTooLarge);
//   - codes.Unavailable when the limiter is unavailable (Redis down under
//     slidelog.FailClosed; FailOpen and FailLocal answer for it instead).
//
// Every such error wraps the limiter's, for errors.Is.
//
// The interceptor runs once per call: the attempts gRPC itself retries or
// hedges (a service config's retryPolicy or hedgingPolicy) go out below it,
// each a call to the partner, and are not paced. Retry in the caller, above
// the interceptor, to have every attempt wait its turn.
//
// It panics if o.Validate reports a mistake.
func UnaryClientInterceptor(o ClientOptions) grpc.UnaryClientInterceptor {
	c := newClient(o)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := c.wait(ctx, method); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor returns an interceptor that waits, before each
// stream it limits opens, as UnaryClientInterceptor waits before a call: a
// stream counts once, when it opens. It panics if o.Validate reports a
// mistake.
func StreamClientInterceptor(o ClientOptions) grpc.StreamClientInterceptor {
	c := newClient(o)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if err := c.wait(ctx, method); err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}

// client is a valid ClientOptions.
type client struct {
	plan
	waiter Waiter
}

func newClient(o ClientOptions) *client {
	if err := o.Validate(); err != nil {
		panic(err.Error())
	}
	key := o.KeyFor
	if key == nil {
		fixed := o.Key
		key = func(context.Context, string) (string, error) { return fixed, nil }
	}
	c := &client{plan: newPlan(o.Limit, o.Methods, o.LimitFor, key, o.Cost, o.OnError), waiter: o.Waiter}
	c.local = true
	if o.KeyFor == nil {
		// One key names no other key's budget, whatever its bytes: it is
		// never refused for beginning with '/'.
		c.scopes = false
	}
	return c
}

// wait waits until a call of fullMethod fits, or returns the status it
// fails with.
func (c *client) wait(ctx context.Context, fullMethod string) error {
	fullMethod = canonicalMethod(fullMethod)
	call, ok, err := c.resolve(ctx, fullMethod)
	if !ok || err != nil {
		return err
	}
	res, err := c.waiter.WaitN(ctx, call.key, call.limit, call.n)
	if err != nil {
		return c.fail(ctx, fullMethod, call, res, err)
	}
	if !res.Allowed {
		// A Waiter that returned a denial without an error: not one of
		// slidelog's, and not one to trust with the call.
		return c.answer(ctx, fullMethod, codes.Internal, msgInternal,
			fmt.Errorf("grpclimit: the Waiter returned a denial without an error for %s", fullMethod))
	}
	return nil
}
