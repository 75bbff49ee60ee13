package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/deadline"
	"github.com/slidelog/slidelog/internal/ratefields"
)

// plan is what the server and the client interceptors share: which limit a
// call is decided under, what it weighs, whom it counts against, and the
// status a failure is answered with.
type plan struct {
	limit    slidelog.Limit
	methods  map[string]slidelog.Limit
	limitFor func(ctx context.Context, fullMethod string) (slidelog.Limit, bool)
	key      KeyFunc
	cost     func(ctx context.Context, fullMethod string) int
	onError  func(ctx context.Context, fullMethod string, code codes.Code, err error)
	// scopes: some method has a budget of its own, whose keys begin with
	// its name (fullMethod + " " + key).
	scopes bool
	// local: the statuses stay in this process (the client's), so their
	// messages may say what went wrong; a server's say it to its clients,
	// and never name its Redis or its configuration.
	local bool
}

func newPlan(limit slidelog.Limit, methods map[string]slidelog.Limit,
	limitFor func(context.Context, string) (slidelog.Limit, bool), key KeyFunc,
	cost func(context.Context, string) int, onError func(context.Context, string, codes.Code, error)) plan {
	scopes := false
	for _, l := range methods {
		scopes = scopes || l != (slidelog.Limit{})
	}
	return plan{
		limit:    limit,
		methods:  maps.Clone(methods), // a caller's later change to its map changes nothing
		limitFor: limitFor,
		key:      key,
		cost:     cost,
		onError:  onError,
		scopes:   scopes,
	}
}

// short quotes s for a message, cut to a length a log line holds.
func short(s string) string {
	const most = 64
	if len(s) > most {
		return strconv.Quote(s[:most]) + "..."
	}
	return strconv.Quote(s)
}

// call is one call's decision request.
type call struct {
	key   string
	limit slidelog.Limit
	n     int
}

// Messages of the statuses that are not denials.
const (
	msgInternal    = "grpclimit: the rate limit could not be applied: the configuration has a mistake"
	msgUnavailable = "grpclimit: the rate limiter is unavailable"
)

// canonicalMethod is fullMethod with its leading '/', the name gRPC's
// generated code and Options.Methods use. A gRPC server routes a :path
// without the slash ("pkg.Service/Method") to the same handler when
// GRPC_GO_EXPERIMENTAL_DISABLE_STRICT_PATH_CHECKING is set, and hands a
// stream's interceptors the :path as the client sent it: decided under
// that name, the call would escape its method's limit.
func canonicalMethod(fullMethod string) string {
	if strings.HasPrefix(fullMethod, "/") {
		return fullMethod
	}
	return "/" + fullMethod
}

// resolve finds fullMethod's limit, the call's cost and its key. ok false:
// the call is not limited (pass it through): no limit, or the key function
// skipped it (ErrSkip). An error is the status to
// answer the call with. fullMethod is canonical (canonicalMethod).
func (p *plan) resolve(ctx context.Context, fullMethod string) (c call, ok bool, err error) {
	scoped := false
	if p.limitFor != nil {
		if c.limit, ok = p.limitFor(ctx, fullMethod); !ok {
			return c, false, nil
		}
		if err := c.limit.Validate(); err != nil {
			return c, true, p.answer(ctx, fullMethod, codes.Internal, msgInternal,
				fmt.Errorf("grpclimit: LimitFor returned %v for %s: %w", c.limit, fullMethod, err))
		}
	} else {
		l, named := p.methods[fullMethod]
		switch {
		case named && l == (slidelog.Limit{}):
			return c, false, nil
		case named:
			c.limit, scoped = l, true
		case p.limit == (slidelog.Limit{}):
			return c, false, nil
		default:
			c.limit = p.limit
		}
	}
	c.n = 1
	if p.cost != nil {
		if c.n = p.cost(ctx, fullMethod); c.n < 1 {
			return c, true, p.answer(ctx, fullMethod, codes.Internal, msgInternal,
				fmt.Errorf("grpclimit: Cost returned %d for %s, not at least 1: %w", c.n, fullMethod, slidelog.ErrInvalidN))
		}
	}
	key, err := p.key(ctx, fullMethod)
	if errors.Is(err, ErrSkip) {
		return c, false, nil
	}
	if err != nil {
		return c, true, p.answer(ctx, fullMethod, codes.InvalidArgument,
			"grpclimit: the call does not say whom it counts against: "+err.Error(), err)
	}
	if key == "" {
		return c, true, p.answer(ctx, fullMethod, codes.Internal, msgInternal,
			fmt.Errorf("grpclimit: the key function returned an empty key and no error for %s: %w", fullMethod, slidelog.ErrEmptyKey))
	}
	switch {
	case scoped:
		key = fullMethod + " " + key
	case p.scopes && strings.HasPrefix(key, "/"):
		// fullMethod + " " + another key: a method's budget of another
		// caller, which a key function that returns what a client sent as
		// it is would let the client name.
		err := fmt.Errorf("grpclimit: the key %s begins with '/', as only the keys of a method's own budget do: a key function should prefix what a client sends (PeerIP's \"ip:\", Metadata's \"header:\")", short(key))
		return c, true, p.answer(ctx, fullMethod, codes.InvalidArgument,
			"grpclimit: the call does not say whom it counts against: its key begins with '/'", err)
	}
	c.key = key
	return c, true, nil
}

// fail answers a call whose limiter (AllowN or WaitN) returned err, with
// res its Result.
func (p *plan) fail(ctx context.Context, fullMethod string, c call, res slidelog.Result, err error) error {
	switch {
	case errors.Is(err, slidelog.ErrExceedsLimit):
		return p.answer(ctx, fullMethod, codes.InvalidArgument,
			fmt.Sprintf("grpclimit: the call weighs %d events, more than a limit of %v ever admits", c.n, c.limit), err)
	case ratefields.IsBug(err):
		return p.answer(ctx, fullMethod, codes.Internal, msgInternal, err)
	case errors.Is(err, slidelog.ErrWaitDeadline):
		limit := c.limit
		if res.Limit.Events > 0 {
			limit = res.Limit
		}
		p.report(ctx, fullMethod, codes.ResourceExhausted, err)
		return deniedError(limit, res, err)
	}
	if done := deadline.Ended(ctx); done != nil {
		st := status.FromContextError(done)
		return p.answer(ctx, fullMethod, st.Code(), st.Message(), err)
	}
	return p.answer(ctx, fullMethod, codes.Unavailable, msgUnavailable, err)
}

// answer is the status error of code with msg, for err, told to OnError.
// A local plan's Internal and Unavailable messages say what err says.
func (p *plan) answer(ctx context.Context, fullMethod string, code codes.Code, msg string, err error) error {
	if p.local && (code == codes.Internal || code == codes.Unavailable) {
		msg += ": " + err.Error()
	}
	p.report(ctx, fullMethod, code, err)
	return &statusError{st: status.New(code, msg), cause: err}
}

func (p *plan) report(ctx context.Context, fullMethod string, code codes.Code, err error) {
	if p.onError != nil {
		p.onError(ctx, fullMethod, code, err)
	}
}

// validLimits reports a mistake in the limits of a configuration (what is
// Options or ClientOptions, for the message).
func validLimits(what string, limit slidelog.Limit, methods map[string]slidelog.Limit, limitFor bool) error {
	hasLimit := limit != (slidelog.Limit{})
	switch {
	case limitFor && (hasLimit || len(methods) > 0):
		return fmt.Errorf("grpclimit: %[1]s.LimitFor replaces %[1]s.Limit and %[1]s.Methods: set it alone", what)
	case !limitFor && !hasLimit && len(methods) == 0:
		return fmt.Errorf("grpclimit: %[1]s.Limit, %[1]s.Methods or %[1]s.LimitFor is required", what)
	}
	if hasLimit {
		if err := limit.Validate(); err != nil {
			return fmt.Errorf("grpclimit: %s.Limit: %w", what, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(methods)) {
		if err := validMethod(name); err != nil {
			return fmt.Errorf("grpclimit: %s.Methods: %w", what, err)
		}
		if l := methods[name]; l != (slidelog.Limit{}) {
			if err := l.Validate(); err != nil {
				return fmt.Errorf("grpclimit: %s.Methods[%q]: %w", what, name, err)
			}
		}
	}
	return nil
}

// validMethod: a full method name as gRPC passes it to interceptors,
// "/package.Service/Method". Any other name would never match a call, and
// its method would go unlimited.
func validMethod(name string) error {
	service, method, ok := strings.Cut(strings.TrimPrefix(name, "/"), "/")
	if !strings.HasPrefix(name, "/") || !ok || service == "" || method == "" || strings.Contains(method, "/") {
		return fmt.Errorf("%q is not a full method name (\"/package.Service/Method\")", name)
	}
	return nil
}
