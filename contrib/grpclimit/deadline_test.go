package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/grpclimit"
)

// passedDeadline is a context whose deadline has passed while its timer
// has not run yet: Err is still nil. A busy machine shows it; go-redis,
// which sets a connection's deadline to the context's, then reports an
// i/o timeout first, and slidelog's error wraps context.DeadlineExceeded.
type passedDeadline struct{ context.Context }

func (passedDeadline) Deadline() (time.Time, bool) { return time.Unix(0, 0), true }

// deadlineCut is a Decider and a Waiter whose calls fail as slidelog's do
// when the caller's deadline cut the Redis call short.
type deadlineCut struct{ slidelog.Decider }

var errCut = fmt.Errorf("slidelog: run script: %w: i/o timeout", context.DeadlineExceeded)

func (deadlineCut) AllowN(context.Context, string, slidelog.Limit, int) (slidelog.Result, error) {
	return slidelog.Result{}, errCut
}

func (deadlineCut) WaitN(context.Context, string, slidelog.Limit, int) (slidelog.Result, error) {
	return slidelog.Result{}, errCut
}

// A call whose deadline passed during the decision is answered
// DeadlineExceeded, even when its context does not say so yet: not
// Unavailable, which would tell the client (and OnError's logs) that
// Redis is down, and which clients retry. (Before the fix: Unavailable.)
// A limiter's own timeout (WithTimeout) with the caller's deadline ahead
// stays Unavailable.
func TestDeadlinePassedBeforeContextSaysSo(t *testing.T) {
	var reported []codes.Code
	onError := func(_ context.Context, _ string, code codes.Code, _ error) { reported = append(reported, code) }
	key := func(context.Context, string) (string, error) { return "k", nil }
	srv := grpclimit.UnaryServerInterceptor(grpclimit.Options{Limiter: deadlineCut{}, Limit: slidelog.PerMinute(1), Key: key, OnError: onError})
	cli := grpclimit.UnaryClientInterceptor(grpclimit.ClientOptions{Waiter: deadlineCut{}, Limit: slidelog.PerMinute(1), Key: "k", OnError: onError})
	call := func(ctx context.Context) (server, client error) {
		_, server = srv(ctx, nil, &grpc.UnaryServerInfo{FullMethod: check},
			func(context.Context, any) (any, error) { t.Error("handler called"); return nil, nil })
		client = cli(ctx, check, nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			t.Error("call made")
			return nil
		})
		return server, client
	}

	srvErr, cliErr := call(passedDeadline{context.Background()})
	for who, err := range map[string]error{"server": srvErr, "client": cliErr} {
		if a := answerOf(err, nil); a.code != codes.DeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s, deadline passed: %v; want DeadlineExceeded wrapping context.DeadlineExceeded", who, a)
		}
	}
	if want := []codes.Code{codes.DeadlineExceeded, codes.DeadlineExceeded}; fmt.Sprint(reported) != fmt.Sprint(want) {
		t.Errorf("OnError told %v, want %v", reported, want)
	}

	reported = nil
	ahead, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	srvErr, cliErr = call(ahead)
	for who, err := range map[string]error{"server": srvErr, "client": cliErr} {
		if a := answerOf(err, nil); a.code != codes.Unavailable {
			t.Errorf("%s, deadline ahead: %v; want Unavailable (the limiter's own timeout)", who, a)
		}
	}
}

// negativeRetry is a Decider written outside slidelog that denies with a
// negative RetryAfter.
type negativeRetry struct{ slidelog.Decider }

func (negativeRetry) AllowN(context.Context, string, slidelog.Limit, int) (slidelog.Result, error) {
	return slidelog.Result{RetryAfter: -5 * time.Second, Limit: slidelog.PerMinute(1)}, nil
}

// A denial's RetryInfo never tells a client to retry in the past: a
// negative RetryAfter is 0. (Before the fix: retry_delay -5s.)
func TestNegativeRetryAfter(t *testing.T) {
	s := serve(t, unary(grpclimit.Options{Limiter: negativeRetry{}, Limit: slidelog.PerMinute(1)}))
	if a := s.checkOnce(t); a.code != codes.ResourceExhausted || a.retry != 0 {
		t.Errorf("%v; want ResourceExhausted with a RetryInfo of 0", a)
	}
}
