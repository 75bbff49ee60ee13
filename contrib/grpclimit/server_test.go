package grpclimit_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/grpclimit"
	"github.com/slidelog/slidelog/internal/redistest"
	"github.com/slidelog/slidelog/local"
)

func unary(o grpclimit.Options) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(o))}
}

func both(o grpclimit.Options) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(o)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(o)),
	}
}

// Steps at fixed server times: admitted calls carry both fields, a denied
// one ResourceExhausted with the exact RetryAfter as RetryInfo.
func TestUnaryAdmittedAndDenied(t *testing.T) {
	m, rdb := mini(t)
	s := serve(t, unary(grpclimit.Options{Limiter: slidelog.New(rdb), Limit: slidelog.PerMinute(2), Name: "api"}))
	const policy = `"api";q=2;w=60`
	steps := []struct {
		at    time.Duration
		code  codes.Code
		state string
		retry time.Duration // -1: no RetryInfo
	}{
		{0, codes.OK, `"api";r=1;t=0`, -1},
		{10 * time.Second, codes.OK, `"api";r=0;t=60`, -1},
		{25 * time.Second, codes.ResourceExhausted, `"api";r=0;t=35`, 35 * time.Second},
		{60*time.Second - time.Microsecond, codes.ResourceExhausted, `"api";r=0;t=1`, time.Microsecond},
		{60 * time.Second, codes.OK, `"api";r=0;t=60`, -1},
		{61 * time.Second, codes.ResourceExhausted, `"api";r=0;t=9`, 9 * time.Second},
	}
	for i, step := range steps {
		m.SetTime(epoch.Add(step.at))
		a := s.checkOnce(t)
		p, st := a.fields()
		if a.code != step.code || p != policy || st != step.state || a.retry != step.retry {
			t.Errorf("step %d (at %v): %v; want %v policy=%q state=%q retry=%v", i, step.at, a, step.code, policy, step.state, step.retry)
		}
		if a.code == codes.ResourceExhausted && !strings.Contains(a.msg, "rate limit of 2 per 1m0s reached") {
			t.Errorf("step %d: message %q does not say which limit", i, a.msg)
		}
	}
	if got := s.calls.Load(); got != 3 {
		t.Errorf("%d calls reached the service, want the 3 admitted", got)
	}
}

// On a real Redis: the RetryInfo is exactly the RetryAfter the limiter
// decided, whatever the clock.
func TestUnaryDeniedRealRedis(t *testing.T) {
	rec := &recorder{Decider: slidelog.New(realRedis(t), slidelog.WithPrefix(uniqueName(t)))}
	s := serve(t, unary(grpclimit.Options{Limiter: rec, Limit: slidelog.PerMinute(1), Name: `a "quoted" \ name`}))
	first, second := s.checkOnce(t), s.checkOnce(t)
	_, results := rec.seen()
	if len(results) != 2 {
		t.Fatalf("%d decisions, want 2", len(results))
	}
	const policy = `"a \"quoted\" \\ name";q=1;w=60`
	if p, _ := first.fields(); first.code != codes.OK || p != policy {
		t.Errorf("first call: %v; want OK with policy %q", first, policy)
	}
	retry := results[1].RetryAfter
	if second.code != codes.ResourceExhausted || second.retry != retry || retry <= 0 || retry > time.Minute {
		t.Errorf("second call: %v; want ResourceExhausted with RetryInfo %v (the limiter's RetryAfter)", second, retry)
	}
	if got := s.calls.Load(); got != 1 {
		t.Errorf("%d calls reached the service, want 1", got)
	}
}

// A stream counts once, when it opens: its messages are not counted, and
// a second stream is denied with both fields in its header.
func TestStreamCountsOnceWhenItOpens(t *testing.T) {
	_, rdb := mini(t)
	rec := &recorder{Decider: slidelog.New(rdb)}
	s := serve(t, both(grpclimit.Options{Limiter: rec, Limit: slidelog.PerMinute(1)}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING} {
		if i > 0 {
			s.health.SetServingStatus("", want)
		}
		msg, err := stream.Recv()
		if err != nil || msg.GetStatus() != want {
			t.Fatalf("message %d: %v, %v; want %v", i, msg.GetStatus(), err, want)
		}
	}
	header, err := stream.Header()
	if p, st := header.Get("ratelimit-policy"), header.Get("ratelimit"); err != nil ||
		len(p) != 1 || p[0] != `"default";q=1;w=60` || len(st) != 1 || st[0] != `"default";r=0;t=60` {
		t.Errorf("open stream's header: %v, %v", header, err)
	}
	second := s.watchOpen(context.Background())
	if p, st := second.fields(); second.code != codes.ResourceExhausted || second.retry != time.Minute ||
		p != `"default";q=1;w=60` || st != `"default";r=0;t=60` {
		t.Errorf("second stream: %v; want ResourceExhausted, retry 1m0s, both fields", second)
	}
	if keys, _ := rec.seen(); len(keys) != 2 {
		t.Errorf("%d decisions, want 2 (one per stream, none per message)", len(keys))
	}
}

// Methods: a budget per named method, the zero Limit passes a method
// through uncounted, every other method shares Limit's budget.
func TestMethods(t *testing.T) {
	_, rdb := mini(t)
	rec := &recorder{Decider: slidelog.New(rdb)}
	s := serve(t, both(grpclimit.Options{
		Limiter: rec,
		Limit:   slidelog.PerMinute(2),
		Methods: map[string]slidelog.Limit{check: slidelog.PerMinute(1), watch: {}},
	}))
	ctx := context.Background()
	var got []codes.Code
	for _, call := range []func() codes.Code{
		func() codes.Code { return s.checkOnce(t).code },
		func() codes.Code { return s.checkOnce(t).code },
		func() codes.Code { return s.listCall(ctx).code },
		func() codes.Code { return s.listCall(ctx).code },
		func() codes.Code { return s.listCall(ctx).code },
		func() codes.Code { return s.watchOpen(ctx).code },
		func() codes.Code { return s.watchOpen(ctx).code },
		func() codes.Code { return s.watchOpen(ctx).code },
	} {
		got = append(got, call())
	}
	want := []codes.Code{codes.OK, codes.ResourceExhausted, codes.OK, codes.OK, codes.ResourceExhausted, codes.OK, codes.OK, codes.OK}
	if !slices.Equal(got, want) {
		t.Errorf("codes %v, want %v", got, want)
	}
	if a := s.watchOpen(ctx); len(a.header.Get("ratelimit")) != 0 {
		t.Errorf("an unlimited method's header has rate-limit fields: %v", a.header)
	}
	keys, _ := rec.seen()
	wantKeys := []string{check + " ip:127.0.0.1", check + " ip:127.0.0.1", "ip:127.0.0.1", "ip:127.0.0.1", "ip:127.0.0.1"}
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("keys %q, want %q", keys, wantKeys)
	}
}

// LimitFor decides per call; false passes it through.
func TestLimitFor(t *testing.T) {
	_, rdb := mini(t)
	rec := &recorder{Decider: slidelog.New(rdb)}
	s := serve(t, unary(grpclimit.Options{
		Limiter: rec,
		LimitFor: func(ctx context.Context, fullMethod string) (slidelog.Limit, bool) {
			md, _ := metadata.FromIncomingContext(ctx)
			if plan := md.Get("plan"); len(plan) == 1 && plan[0] == "gold" {
				return slidelog.PerMinute(3), true
			}
			return slidelog.Limit{}, fullMethod != list
		},
		Key: func(ctx context.Context, fullMethod string) (string, error) { return "k", nil },
	}))
	gold := metadata.AppendToOutgoingContext(context.Background(), "plan", "gold")
	if a := s.checkCall(gold); a.code != codes.OK {
		t.Fatalf("gold: %v", a)
	}
	if p, _ := s.checkCall(gold).fields(); p != `"default";q=3;w=60` {
		t.Errorf("gold policy %q", p)
	}
	// No plan: LimitFor answers the zero Limit with true for Check, a bug.
	if a := s.checkOnce(t); a.code != codes.Internal {
		t.Errorf("invalid limit from LimitFor: %v; want Internal", a)
	}
	if _, err := s.client.List(context.Background(), &healthpb.HealthListRequest{}); err != nil {
		t.Errorf("List, passed through: %v", err)
	}
	if keys, _ := rec.seen(); len(keys) != 2 {
		t.Errorf("%d decisions, want 2", len(keys))
	}
}

// loopback: the test server's peers, trusted as proxies in some tests.
var loopback = netip.MustParsePrefix("127.0.0.0/8")

func TestKeys(t *testing.T) {
	_, rdb := mini(t)
	ctx := context.Background()
	withMD := func(kv ...string) context.Context { return metadata.AppendToOutgoingContext(ctx, kv...) }
	for _, tc := range []struct {
		name string
		key  grpclimit.KeyFunc
		ctx  context.Context
		code codes.Code
		want string // the key decided, "" for none
	}{
		{"default: the peer", nil, ctx, codes.OK, "ip:127.0.0.1"},
		{"peer: forwarded-for from an untrusted peer is ignored", grpclimit.PeerIP(grpclimit.IPKey{}), withMD("x-forwarded-for", "203.0.113.7"), codes.OK, "ip:127.0.0.1"},
		{"peer: trusted proxy", grpclimit.PeerIP(grpclimit.IPKey{TrustedProxies: []netip.Prefix{loopback}}), withMD("x-forwarded-for", "198.51.100.1, 203.0.113.7"), codes.OK, "ip:203.0.113.7"},
		{"peer: trusted proxy, every hop trusted", grpclimit.PeerIP(grpclimit.IPKey{TrustedProxies: []netip.Prefix{loopback}}), withMD("x-forwarded-for", "127.0.0.9"), codes.OK, "ip:127.0.0.9"},
		{"peer: trusted proxy, Forwarded", grpclimit.PeerIP(grpclimit.IPKey{TrustedProxies: []netip.Prefix{loopback}, Header: "Forwarded"}), withMD("forwarded", `for="[2001:db8::1]:4711"`), codes.OK, "ip:2001:db8::/64"},
		{"peer: trusted proxy, a hop that is not an address", grpclimit.PeerIP(grpclimit.IPKey{TrustedProxies: []netip.Prefix{loopback}}), withMD("x-forwarded-for", "unknown"), codes.InvalidArgument, ""},
		{"metadata", grpclimit.Metadata("X-API-Key"), withMD("x-api-key", "k1"), codes.OK, "header:k1"},
		{"metadata: binary", grpclimit.Metadata("key-bin"), withMD("key-bin", "\x00\xff"), codes.OK, "header:\x00\xff"},
		{"metadata: missing", grpclimit.Metadata("x-api-key"), withMD("x-other", "k1"), codes.InvalidArgument, ""},
		{"metadata: empty", grpclimit.Metadata("x-api-key"), withMD("x-api-key", ""), codes.InvalidArgument, ""},
		{"metadata: two values", grpclimit.Metadata("x-api-key"), withMD("x-api-key", "k1", "x-api-key", "k2"), codes.InvalidArgument, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{Decider: slidelog.New(rdb, slidelog.WithPrefix(uniqueName(t)))}
			var reported []codes.Code
			s := serve(t, unary(grpclimit.Options{Limiter: rec, Limit: slidelog.PerMinute(5), Key: tc.key,
				OnError: func(_ context.Context, _ string, code codes.Code, _ error) { reported = append(reported, code) }}))
			a := s.checkCall(tc.ctx)
			keys, _ := rec.seen()
			if a.code != tc.code {
				t.Errorf("%v; want %v", a, tc.code)
			}
			if tc.want == "" && (len(keys) != 0 || len(reported) != 1 || !strings.Contains(a.msg, "does not say whom it counts against")) {
				t.Errorf("keys %q, OnError %v, message %q; want no decision, one report, a message that says why", keys, reported, a.msg)
			}
			if tc.want != "" && (len(keys) != 1 || keys[0] != tc.want) {
				t.Errorf("keys %q; want %q", keys, tc.want)
			}
		})
	}
}

// Each key has its own budget.
func TestKeyBudgets(t *testing.T) {
	_, rdb := mini(t)
	s := serve(t, unary(grpclimit.Options{Limiter: slidelog.New(rdb), Limit: slidelog.PerMinute(1), Key: grpclimit.Metadata("x-api-key")}))
	call := func(k string) codes.Code {
		return s.checkCall(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", k)).code
	}
	got := []codes.Code{call("k1"), call("k2"), call("k1"), call("k2"), call("k3")}
	want := []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted, codes.ResourceExhausted, codes.OK}
	if !slices.Equal(got, want) {
		t.Errorf("codes %v, want %v", got, want)
	}
}

// Every failure mapping, over a real server, with OnError's code and
// error, and an outer interceptor that finds the cause with errors.Is.
func TestServerFailures(t *testing.T) {
	rdb := realRedis(t)
	down := newClient(t, redistest.Gone(t))
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		opts   func(prefix string) grpclimit.Options
		setup  func(prefix string) // before the call
		code   codes.Code
		cause  error  // what OnError's error and the outer interceptor's wrap; nil: not reported
		policy string // the ratelimit-policy field, "" for none
		state  bool   // the ratelimit field was sent
	}{
		{
			name: "heavier than the limit",
			opts: func(p string) grpclimit.Options {
				return grpclimit.Options{Limiter: slidelog.New(rdb, slidelog.WithPrefix(p)), Limit: slidelog.PerMinute(2),
					Cost: func(context.Context, string) int { return 3 }}
			},
			code: codes.InvalidArgument, cause: slidelog.ErrExceedsLimit, policy: `"default";q=2;w=60`,
		},
		{
			name: "cost below 1",
			opts: func(p string) grpclimit.Options {
				return grpclimit.Options{Limiter: slidelog.New(rdb, slidelog.WithPrefix(p)), Limit: slidelog.PerMinute(2),
					Cost: func(context.Context, string) int { return 0 }}
			},
			code: codes.Internal, cause: slidelog.ErrInvalidN,
		},
		{
			name: "empty key without an error",
			opts: func(p string) grpclimit.Options {
				return grpclimit.Options{Limiter: slidelog.New(rdb, slidelog.WithPrefix(p)), Limit: slidelog.PerMinute(2),
					Key: func(context.Context, string) (string, error) { return "", nil }}
			},
			code: codes.Internal, cause: slidelog.ErrEmptyKey,
		},
		{
			name: "limit over WithMaxEvents",
			opts: func(p string) grpclimit.Options {
				return grpclimit.Options{Limiter: slidelog.New(rdb, slidelog.WithPrefix(p), slidelog.WithMaxEvents(1)), Limit: slidelog.PerMinute(2)}
			},
			code: codes.Internal, cause: slidelog.ErrLimitTooLarge,
		},
		{
			name: "key holds another type",
			opts: func(p string) grpclimit.Options {
				return grpclimit.Options{Limiter: slidelog.New(rdb, slidelog.WithPrefix(p)), Limit: slidelog.PerMinute(2)}
			},
			setup: func(p string) {
				if err := rdb.Set(ctx, p+"ip:127.0.0.1", "a string", 0).Err(); err != nil {
					t.Fatal(err)
				}
			},
			code: codes.Internal, cause: slidelog.ErrWrongType,
		},
		{
			name: "Redis down, FailClosed",
			opts: func(p string) grpclimit.Options {
				return grpclimit.Options{Limiter: slidelog.New(down, slidelog.WithPrefix(p)), Limit: slidelog.PerMinute(2)}
			},
			code: codes.Unavailable, cause: errRedis,
		},
		{
			name: "Redis down, FailOpen",
			opts: func(p string) grpclimit.Options {
				return grpclimit.Options{Limiter: slidelog.New(down, slidelog.WithPrefix(p), slidelog.WithPolicy(slidelog.FailOpen)), Limit: slidelog.PerMinute(2)}
			},
			code: codes.OK, policy: `"default";q=2;w=60`, state: true,
		},
		{
			name: "Redis down, FailLocal: the local share",
			opts: func(p string) grpclimit.Options {
				return grpclimit.Options{Limiter: slidelog.New(down, slidelog.WithPrefix(p), slidelog.WithPolicy(slidelog.FailLocal(local.New(), 2))), Limit: slidelog.PerMinute(4)}
			},
			code: codes.OK, policy: `"default";q=2;w=60`, state: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := uniqueName(t)
			if tc.setup != nil {
				tc.setup(prefix)
			}
			type report struct {
				code codes.Code
				err  error
			}
			var reports []report
			var outer error
			o := tc.opts(prefix)
			o.OnError = func(_ context.Context, fullMethod string, code codes.Code, err error) {
				if fullMethod != check {
					t.Errorf("OnError told of %q", fullMethod)
				}
				reports = append(reports, report{code, err})
			}
			s := serve(t, append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				resp, err := h(ctx, req)
				outer = err
				return resp, err
			})}, unary(o)...))
			a := s.checkOnce(t)
			p, st := a.fields()
			if a.code != tc.code || p != tc.policy || (st != "") != tc.state {
				t.Errorf("%v; want %v, policy %q, state sent %t", a, tc.code, tc.policy, tc.state)
			}
			if tc.cause == nil {
				if len(reports) != 0 || outer != nil {
					t.Errorf("OnError told %v, outer interceptor saw %v; want nothing", reports, outer)
				}
				return
			}
			if len(reports) != 1 || reports[0].code != tc.code || !matches(reports[0].err, tc.cause) {
				t.Errorf("OnError told %v; want one report of %v for %v", reports, tc.code, tc.cause)
			}
			if !matches(outer, tc.cause) {
				t.Errorf("outer interceptor saw %v; want an error wrapping %v", outer, tc.cause)
			}
			if s.calls.Load() != 0 {
				t.Errorf("the call reached the service")
			}
			// What the client reads names neither Redis nor the configuration.
			for _, leak := range []string{"WRONGTYPE", "127.0.0.1", "refused", "Cost returned"} {
				if strings.Contains(a.msg, leak) {
					t.Errorf("message %q tells the client %q", a.msg, leak)
				}
			}
		})
	}
}

// errRedis stands for any unavailability: matches accepts any error for it.
var errRedis = errors.New("any Redis failure")

func matches(err, target error) bool {
	if errors.Is(target, errRedis) {
		return err != nil
	}
	return errors.Is(err, target)
}

// A call whose context ends while the limiter decides is answered with its
// context's code, not Unavailable.
func TestServerContextEnds(t *testing.T) {
	var reported codes.Code
	interceptor := grpclimit.UnaryServerInterceptor(grpclimit.Options{
		Limiter: failing{err: errDown}, Limit: slidelog.PerMinute(1),
		Key:     func(context.Context, string) (string, error) { return "k", nil },
		OnError: func(_ context.Context, _ string, code codes.Code, _ error) { reported = code },
	})
	handler := func(context.Context, any) (any, error) { t.Error("handler called"); return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: check}
	for _, tc := range []struct {
		ctx    func() (context.Context, context.CancelFunc)
		code   codes.Code
		target error
	}{
		{func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, codes.Canceled, context.Canceled},
		{func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Unix(0, 0))
		}, codes.DeadlineExceeded, context.DeadlineExceeded},
	} {
		ctx, cancel := tc.ctx()
		cancel()
		_, err := interceptor(ctx, nil, info, handler)
		if a := answerOf(err, nil); a.code != tc.code || reported != tc.code || !errors.Is(err, tc.target) {
			t.Errorf("%v (OnError %v); want %v wrapping %v", a, reported, tc.code, tc.target)
		}
	}
	// The context alive: the limiter's failure is an unavailability.
	_, err := interceptor(context.Background(), nil, info, handler)
	if a := answerOf(err, nil); a.code != codes.Unavailable || !errors.Is(err, errDown) {
		t.Errorf("%v; want Unavailable wrapping %v", a, errDown)
	}
}
