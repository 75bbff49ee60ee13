package grpclimit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/grpclimit"
	"github.com/slidelog/slidelog/local"
)

// Configuration mistakes: Validate says what is wrong, and every
// constructor panics with the same message.
func TestOptionsValidate(t *testing.T) {
	lim := local.New()
	limitFor := func(context.Context, string) (slidelog.Limit, bool) { return slidelog.PerSecond(1), true }
	for _, tc := range []struct {
		opts grpclimit.Options
		want string // "" for valid
	}{
		{grpclimit.Options{Limiter: lim, Limit: slidelog.PerSecond(1)}, ""},
		{grpclimit.Options{Limiter: lim, Methods: map[string]slidelog.Limit{"/pkg.Svc/M": slidelog.PerSecond(1), "/pkg.Svc/N": {}}}, ""},
		{grpclimit.Options{Limiter: lim, LimitFor: limitFor, Name: `any "printable" \ name`}, ""},
		{grpclimit.Options{Limit: slidelog.PerSecond(1)}, "Options.Limiter is nil"},
		{grpclimit.Options{Limiter: lim}, "Options.Limit, Options.Methods or Options.LimitFor is required"},
		{grpclimit.Options{Limiter: lim, Methods: map[string]slidelog.Limit{}}, "Options.Limit, Options.Methods or Options.LimitFor is required"},
		{grpclimit.Options{Limiter: lim, Limit: slidelog.PerSecond(1), LimitFor: limitFor}, "LimitFor replaces"},
		{grpclimit.Options{Limiter: lim, Methods: map[string]slidelog.Limit{"/pkg.Svc/M": slidelog.PerSecond(1)}, LimitFor: limitFor}, "LimitFor replaces"},
		{grpclimit.Options{Limiter: lim, Limit: slidelog.Limit{Events: 0, Window: 1}}, "Options.Limit: slidelog: invalid limit"},
		{grpclimit.Options{Limiter: lim, Limit: slidelog.PerMinute(slidelog.MaxEvents)}, ""},
		{grpclimit.Options{Limiter: lim, Limit: slidelog.PerMinute(slidelog.MaxEvents + 1)}, "Options.Limit: slidelog: invalid limit: events 1073741825 > MaxEvents"},
		{grpclimit.Options{Limiter: lim, Methods: map[string]slidelog.Limit{"/pkg.Svc/M": {Events: 1 << 31, Window: time.Second}}}, "MaxEvents"},
		{grpclimit.Options{Limiter: lim, Methods: map[string]slidelog.Limit{"/pkg.Svc/M": {Events: 1}}}, `Options.Methods["/pkg.Svc/M"]: slidelog: invalid limit`},
		{grpclimit.Options{Limiter: lim, Methods: map[string]slidelog.Limit{"pkg.Svc/M": slidelog.PerSecond(1)}}, `"pkg.Svc/M" is not a full method name`},
		{grpclimit.Options{Limiter: lim, Methods: map[string]slidelog.Limit{"/pkg.Svc": slidelog.PerSecond(1)}}, "not a full method name"},
		{grpclimit.Options{Limiter: lim, Methods: map[string]slidelog.Limit{"/pkg.Svc/": slidelog.PerSecond(1)}}, "not a full method name"},
		{grpclimit.Options{Limiter: lim, Methods: map[string]slidelog.Limit{"//M": slidelog.PerSecond(1)}}, "not a full method name"},
		{grpclimit.Options{Limiter: lim, Methods: map[string]slidelog.Limit{"/a/b/c": slidelog.PerSecond(1)}}, "not a full method name"},
		{grpclimit.Options{Limiter: lim, Limit: slidelog.PerSecond(1), Name: "caf\xc3\xa9"}, "not printable ASCII"},
		{grpclimit.Options{Limiter: lim, Limit: slidelog.PerSecond(1), Name: "a\nb"}, "not printable ASCII"},
	} {
		mistake(t, fmt.Sprintf("%+v", tc.opts), tc.opts.Validate(), tc.want, map[string]func(){
			"UnaryServerInterceptor":  func() { grpclimit.UnaryServerInterceptor(tc.opts) },
			"StreamServerInterceptor": func() { grpclimit.StreamServerInterceptor(tc.opts) },
		})
	}
}

// mistake checks a configuration's Validate error err against want (""
// for a valid one), and that each of builds panics with err's message, or,
// for a valid configuration, does not panic.
func mistake(t *testing.T, config string, err error, want string, builds map[string]func()) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v", config, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "grpclimit: ")):
		t.Errorf("%s: %v; want an error saying %q", config, err, want)
		return
	}
	for name, build := range builds {
		got := panicked(build)
		if want == "" && got != "" || want != "" && got != err.Error() {
			t.Errorf("%s: %s panicked %q; want %q", config, name, got, want)
		}
	}
}

func TestClientOptionsValidate(t *testing.T) {
	w := local.New()
	keyFor := func(context.Context, string) (string, error) { return "k", nil }
	for _, tc := range []struct {
		opts grpclimit.ClientOptions
		want string
	}{
		{grpclimit.ClientOptions{Waiter: w, Limit: slidelog.PerSecond(1), Key: "partner"}, ""},
		{grpclimit.ClientOptions{Waiter: w, Limit: slidelog.PerSecond(1), KeyFor: keyFor}, ""},
		{grpclimit.ClientOptions{Limit: slidelog.PerSecond(1), Key: "partner"}, "ClientOptions.Waiter is nil"},
		{grpclimit.ClientOptions{Waiter: w, Limit: slidelog.PerSecond(1)}, "ClientOptions.Key or ClientOptions.KeyFor is required"},
		{grpclimit.ClientOptions{Waiter: w, Limit: slidelog.PerSecond(1), Key: "k", KeyFor: keyFor}, "KeyFor replaces"},
		{grpclimit.ClientOptions{Waiter: w, Key: "k"}, "ClientOptions.Limit, ClientOptions.Methods or ClientOptions.LimitFor is required"},
		{grpclimit.ClientOptions{Waiter: w, Key: "k", Methods: map[string]slidelog.Limit{"Check": slidelog.PerSecond(1)}}, `"Check" is not a full method name`},
	} {
		mistake(t, fmt.Sprintf("%+v", tc.opts), tc.opts.Validate(), tc.want, map[string]func(){
			"UnaryClientInterceptor":  func() { grpclimit.UnaryClientInterceptor(tc.opts) },
			"StreamClientInterceptor": func() { grpclimit.StreamClientInterceptor(tc.opts) },
		})
	}
}

func TestKeyFuncsPanic(t *testing.T) {
	for _, tc := range []struct {
		build func()
		want  string
	}{
		{func() { grpclimit.Metadata("") }, "empty metadata key"},
		{func() { grpclimit.Metadata("x api key") }, "is not a metadata key"},
		{func() { grpclimit.Metadata("x-api-kéy") }, "is not a metadata key"},
		{func() { grpclimit.Metadata("grpc-timeout") }, "reserved for gRPC"},
		{func() { grpclimit.Metadata(":authority") }, "is not a metadata key"},
		{func() { grpclimit.PeerIP(grpclimit.IPKey{IPv6Prefix: 129}) }, "IPv6Prefix"},
	} {
		if got := panicked(tc.build); !strings.Contains(got, tc.want) {
			t.Errorf("panicked %q; want %q", got, tc.want)
		}
	}
	if got := panicked(func() { grpclimit.Metadata("X-Tenant.ID_2") }); got != "" {
		t.Errorf("a valid key panicked: %s", got)
	}
}

// A change to the caller's Methods map after construction changes nothing.
func TestMethodsCopied(t *testing.T) {
	methods := map[string]slidelog.Limit{check: slidelog.PerMinute(1)}
	rec := &recorder{Decider: local.New()}
	s := serve(t, unary(grpclimit.Options{Limiter: rec, Methods: methods}))
	methods[check] = slidelog.Limit{}
	s.checkOnce(t)
	if keys, _ := rec.seen(); len(keys) != 1 {
		t.Errorf("%d decisions after the map changed, want 1", len(keys))
	}
}

// panicked is the message f panicked with, or "".
func panicked(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg, _ = r.(string)
			if msg == "" {
				msg = "a panic that is not a string"
			}
		}
	}()
	f()
	return ""
}
