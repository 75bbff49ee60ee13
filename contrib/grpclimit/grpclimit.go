// Package grpclimit is gRPC middleware for slidelog: server interceptors
// that limit the calls a service accepts, and client interceptors that pace
// the calls a service makes to a partner's quota. It is a module of its own,
// so that gRPC never reaches the core's importers.
//
//	limit := grpclimit.Options{Limiter: limiter, Limit: slidelog.PerMinute(100), Name: "api"}
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limit)),
//		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limit)),
//	)
//
// A unary call counts once; a stream counts once, when it opens (its
// messages are not counted). Every decided call carries the IETF rate-limit
// fields of draft-ietf-httpapi-ratelimit-headers-11 as response header
// metadata, formatted as package httplimit formats them:
//
//	ratelimit-policy: "<name>";q=<events>;w=<window seconds>
//	ratelimit: "<name>";r=<remaining>;t=<seconds>
//
// where <name> is Options.Name as an RFC 8941 string, and windows and waits
// are whole seconds, rounded up; with Options.Rules, each field is a list
// of one item per rule (below). A call is answered:
//
//   - admitted: by the handler, with both fields.
//   - denied: codes.ResourceExhausted, with both fields and a
//     google.rpc.RetryInfo detail whose retry_delay is Result.RetryAfter,
//     exact to the microsecond.
//   - heavier than the limit (Cost over Limit.Events, which no window ever
//     admits): codes.InvalidArgument, with ratelimit-policy alone; nothing
//     is recorded. The call, as made, is invalid whatever the window holds
//     (InvalidArgument, not FailedPrecondition, which tells a client that a
//     change of the system's state would let it through).
//   - without a key (the KeyFunc failed): codes.InvalidArgument, uncounted.
//   - by a bug in the configuration's functions (Cost below 1, LimitFor
//     returning an invalid limit, Key returning "" without an error) or a
//     limiter error that no recovery of Redis cures (slidelog.ErrLimitTooLarge,
//     slidelog.ErrWrongType): codes.Internal, and OnError's error says what is
//     wrong. It is never Unavailable: a bug must not look like an outage.
//   - when the limiter is unavailable (Redis down or slow under
//     slidelog.FailClosed): codes.Unavailable. Under FailOpen or FailLocal,
//     the limiter's policy answers and the call is admitted or denied as
//     usual.
//   - when the call's context ends during the decision: its own
//     codes.Canceled or codes.DeadlineExceeded.
//   - skipped (the KeyFunc returned ErrSkip): by the handler, with no
//     field, uncounted.
//
// The errors keep their cause for errors.Is and errors.As in the process
// (an outer logging interceptor sees slidelog.ErrWrongType); only the status
// goes over the wire.
//
// By default a call counts against its peer's IP address (PeerIP); behind
// a proxy, only the proxies named in IPKey.TrustedProxies are believed, in
// the one metadata entry IPKey.Header names. Metadata keys calls by an
// entry such as an API key.
//
// Mistakes a configuration shows on its own (no Limiter, no limit, an
// invalid Limit or Methods entry, a method name that cannot match, a Name
// that is not a valid string; with Rules: Limit, Methods, LimitFor, Key or
// Name beside them, a Limiter that is not a slidelog.Eacher, a rule without
// a valid and distinct name, a Key or a valid limit, two limits of one rule
// on one window, more than slidelog.MaxLimits limits in all) make the
// interceptor constructors panic;
// Options.Validate and ClientOptions.Validate report them as an error
// instead.
//
// # Several limits per call: Rules
//
// Options.Rules hold a call to several limits at once, each counted against
// a key of its own (httplimit's Rules, in gRPC's terms): 100 a minute per
// API key and 10 000 a day per customer. A rule's Key is told the method,
// and returns ErrSkip for a call the rule does not apply to. Every rule that
// applies is decided in one slidelog.Eacher's AllowEach (the Limiter must be
// one): the call is admitted by all of them, or recorded by none. The
// fields list every applying rule, in order, formatted as httplimit formats
// them:
//
//	ratelimit-policy: "perkey";q=100;w=60, "customer";q=10000;w=86400
//	ratelimit: "perkey";r=37;t=0, "customer";r=9000;t=43200
//
// A denial is codes.ResourceExhausted with a google.rpc.RetryInfo detail
// (when every rule fits: the shared RetryAfter of AllowEach) and a
// google.rpc.QuotaFailure detail whose violation names the rule that denied
// (quota_id; the first whose own limit had no room for the call), as does
// the message. In ratelimit, a rule that had room shows its own state. The
// other answers are a single limit's; a call every rule skips is let
// through uncounted, with no field.
package grpclimit

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/ratefields"
)

// Limiter is what the server interceptors need: a slidelog.Decider, such as
// *slidelog.Limiter or *local.Limiter (they call AllowN only; with
// Options.Rules, AllowEach, of a Limiter that is also a slidelog.Eacher).
type Limiter = slidelog.Decider

// Options configure the server interceptors. Limiter, and Limit, Methods,
// LimitFor or Rules, are required.
type Options struct {
	Limiter Limiter

	// Limit is the limit of every method that Methods does not name. Those
	// methods share one budget per key.
	Limit slidelog.Limit
	// Methods are limits by full method name ("/package.Service/Method"),
	// each a budget of its own per key: the call counts against the key
	// fullMethod + " " + Key's key, so that one log is never decided under
	// two windows. A call of any other method whose key begins with '/' is
	// answered InvalidArgument, uncounted: its key could name a named
	// method's budget of another caller. A method mapped to the zero Limit is passed through,
	// uncounted (a health check). A call's name is looked up with its
	// leading '/', and Key, Cost, LimitFor and OnError are told it so,
	// whether or not the client sent the slash.
	Methods map[string]slidelog.Limit
	// LimitFor is a limit per call (e.g. by the caller's plan), in place of
	// Limit and Methods; ok false passes the call through, uncounted. The
	// call counts against Key's key as it is: limits of different windows
	// need different keys (Key is told the method).
	LimitFor func(ctx context.Context, fullMethod string) (limit slidelog.Limit, ok bool)

	Key  KeyFunc                                          // whom a call counts against (ErrSkip: not counted); default: PeerIP(IPKey{})
	Cost func(ctx context.Context, fullMethod string) int // events a call weighs (AllowN; under Rules, each rule's), at least 1; default 1

	// Rules hold each call to several limits at once, each counted against
	// a key of its own (100 a minute per API key and 10 000 a day per
	// customer), in place of Limit, Methods, LimitFor, Key and Name, which
	// are then left unset (a rule has its own; a rule's Key is told the
	// method, and skips the methods it does not limit with ErrSkip). Every
	// rule that applies to a call is decided in one AllowEach, so Limiter
	// must be a slidelog.Eacher (*slidelog.Limiter and *local.Limiter are): the call is
	// admitted by every rule, or denied and recorded by none. A call every
	// rule skips is let through uncounted, with no rate-limit field. The
	// fields list every applying rule, in order (see the package
	// documentation). Default: none.
	Rules []Rule

	// Name is the policy's name in the rate-limit fields: printable ASCII
	// (0x20 to 0x7E) only, as RFC 8941 strings allow. Default: "default".
	Name string

	// OnError is told of every call that no decision could be had for, with
	// the code it is answered (InvalidArgument, Internal, Unavailable, or the
	// context's Canceled or DeadlineExceeded) and the error that caused it;
	// it is the place to log. It runs on the call's goroutine. Default: none.
	OnError func(ctx context.Context, fullMethod string, code codes.Code, err error)
}

// Validate reports the configuration mistake the interceptor constructors
// would panic on, or nil.
func (o Options) Validate() error {
	if o.Limiter == nil {
		return errors.New("grpclimit: Options.Limiter is nil")
	}
	if len(o.Rules) > 0 {
		return o.validRules()
	}
	if err := validLimits("Options", o.Limit, o.Methods, o.LimitFor != nil); err != nil {
		return err
	}
	if err := ratefields.ValidName(o.Name); err != nil {
		return fmt.Errorf("grpclimit: Options.Name %q: %w", o.Name, err)
	}
	return nil
}

// UnaryServerInterceptor returns an interceptor that decides every unary
// call before its handler runs and sets the rate-limit fields with
// grpc.SetHeader. It panics if o.Validate reports a mistake.
func UnaryServerInterceptor(o Options) grpc.UnaryServerInterceptor {
	s := newServer(o)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, a, err := s.decide(ctx, info.FullMethod)
		if md != nil {
			// Fails only outside a gRPC server (nothing to send it on).
			_ = grpc.SetHeader(ctx, md)
		}
		if err != nil {
			return nil, err
		}
		if a != nil {
			tctx := ctx
			a.setTrailer = func(md metadata.MD) error { return grpc.SetTrailer(tctx, md) }
			ctx = context.WithValue(ctx, admissionKey{}, a)
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns an interceptor that decides every stream
// once, when it opens, before its handler runs, and sets the rate-limit
// fields with the stream's SetHeader. It panics if o.Validate reports a
// mistake.
func StreamServerInterceptor(o Options) grpc.StreamServerInterceptor {
	s := newServer(o)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, a, err := s.decide(ss.Context(), info.FullMethod)
		if md != nil {
			_ = ss.SetHeader(md)
		}
		if err != nil {
			return err
		}
		if a != nil {
			inner := ss
			a.setTrailer = func(md metadata.MD) error { inner.SetTrailer(md); return nil }
			ss = &admittedStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), admissionKey{}, a)}
		}
		return handler(srv, ss)
	}
}

// server is a valid Options with its defaults filled in.
type server struct {
	plan
	limiter Limiter
	name    string          // Options.Name as an RFC 8941 string
	rules   []rule          // Options.Rules, if set (then plan's limits and key are unused)
	eacher  slidelog.Eacher // the Limiter, with Rules
}

func newServer(o Options) *server {
	if err := o.Validate(); err != nil {
		panic(err.Error())
	}
	if len(o.Rules) > 0 {
		return &server{plan: newPlan(slidelog.Limit{}, nil, nil, nil, o.Cost, o.OnError), limiter: o.Limiter,
			rules: newRules(o.Rules), eacher: o.Limiter.(slidelog.Eacher)}
	}
	if o.Key == nil {
		o.Key = PeerIP(IPKey{})
	}
	if o.Name == "" {
		o.Name = "default"
	}
	return &server{
		plan:    newPlan(o.Limit, o.Methods, o.LimitFor, o.Key, o.Cost, o.OnError),
		limiter: o.Limiter,
		name:    ratefields.String(o.Name),
	}
}

// decide decides a call of fullMethod: the header metadata to send (nil for
// none), its admission (for Settle; nil when it was not admitted), and the
// error to answer it with, or nil to let it through.
func (s *server) decide(ctx context.Context, fullMethod string) (metadata.MD, *admission, error) {
	fullMethod = canonicalMethod(fullMethod)
	if s.rules != nil {
		return s.decideRules(ctx, fullMethod)
	}
	c, ok, err := s.resolve(ctx, fullMethod)
	if !ok || err != nil {
		return nil, nil, err
	}
	res, err := s.limiter.AllowN(ctx, c.key, c.limit, c.n)
	if err != nil {
		var md metadata.MD
		if errors.Is(err, slidelog.ErrExceedsLimit) {
			// The key's log was not read: the policy alone, as httplimit's 413.
			md = metadata.Pairs(policyField, ratefields.Policy(s.name, c.limit))
		}
		return md, nil, s.fail(ctx, fullMethod, c, res, err)
	}
	limit := c.limit
	if res.Limit.Events > 0 {
		limit = res.Limit // a fallback may have applied its share
	}
	md := metadata.Pairs(policyField, ratefields.Policy(s.name, limit), stateField, ratefields.State(s.name, res))
	if !res.Allowed {
		return md, nil, deniedError(limit, res, nil)
	}
	return md, s.admitted([]string{s.name}, []slidelog.Result{res}), nil
}
