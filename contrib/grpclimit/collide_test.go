package grpclimit_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/grpclimit"
	"github.com/slidelog/slidelog/local"
)

// A method named in Methods counts against fullMethod + " " + key. A key
// function of the caller's own that returns what a client sent as it is
// could let a client name another client's budget of that method: the
// tenant "/grpc.health.v1.Health/Check victim" calling List (the shared
// budget) would count against the victim's Check budget. A key that
// begins with '/' is refused where it could name a method's budget: the
// call is answered InvalidArgument, uncounted. (Before the fix, the
// attacker's List spent the victim's only Check.)
func TestKeyCannotNameAMethodBudget(t *testing.T) {
	rec := &recorder{Decider: local.New()}
	tenant := func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		return md.Get("tenant")[0], nil // raw: no prefix of its own
	}
	var reported []codes.Code
	s := serve(t, unary(grpclimit.Options{Limiter: rec, Key: tenant,
		Limit:   slidelog.PerMinute(100),
		Methods: map[string]slidelog.Limit{check: slidelog.PerMinute(1)},
		OnError: func(_ context.Context, _ string, code codes.Code, _ error) { reported = append(reported, code) }}))
	as := func(tenant string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "tenant", tenant)
	}
	if a := s.listCall(as(check + " victim")); a.code != codes.InvalidArgument {
		t.Errorf("List as %q: %v; want InvalidArgument", check+" victim", a)
	}
	if a := s.checkCall(as("victim")); a.code != codes.OK {
		t.Errorf("the victim's Check: %v; want OK (its budget untouched)", a)
	}
	if keys, _ := rec.seen(); len(keys) != 1 || keys[0] != check+" victim" {
		t.Errorf("keys decided %q; want only the victim's Check", keys)
	}
	if len(reported) != 1 || reported[0] != codes.InvalidArgument {
		t.Errorf("OnError told %v; want one InvalidArgument", reported)
	}
	// A key beginning with '/' is fine for a named method (its key is
	// scoped) and where no method has a budget of its own.
	if a := s.checkCall(as("/x")); a.code != codes.OK {
		t.Errorf("Check as /x: %v; want OK", a)
	}
	plain := serve(t, unary(grpclimit.Options{Limiter: local.New(), Key: tenant, Limit: slidelog.PerMinute(100)}))
	if a := plain.listCall(as(check + " victim")); a.code != codes.OK {
		t.Errorf("without Methods, List as %q: %v; want OK", check+" victim", a)
	}
}

// The client interceptor: KeyFor's keys are refused as the server's are; a
// fixed Key names no other key's budget, and may begin with '/'.
func TestClientKeyCannotNameAMethodBudget(t *testing.T) {
	methods := map[string]slidelog.Limit{check: slidelog.PerMinute(5)}
	keyFor := func(context.Context, string) (string, error) { return check + " acme", nil }
	s := serve(t, nil, paced(grpclimit.ClientOptions{Waiter: local.New(), Limit: slidelog.PerMinute(5), Methods: methods, KeyFor: keyFor})...)
	if a := s.listCall(context.Background()); a.code != codes.InvalidArgument {
		t.Errorf("KeyFor %q, List: %v; want InvalidArgument", check+" acme", a)
	}
	fixed := serve(t, nil, paced(grpclimit.ClientOptions{Waiter: local.New(), Limit: slidelog.PerMinute(5), Methods: methods, Key: "/partners/acme"})...)
	if a := fixed.listCall(context.Background()); a.code != codes.OK {
		t.Errorf("Key %q, List: %v; want OK", "/partners/acme", a)
	}
	if a := fixed.checkOnce(t); a.code != codes.OK {
		t.Errorf("Key %q, Check: %v; want OK", "/partners/acme", a)
	}
}
