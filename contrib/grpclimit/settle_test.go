package grpclimit_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/grpclimit"
	"github.com/slidelog/slidelog/local"
)

// settling is what the handlers of the settle tests do after the rate
// limit: settle the call to its "x-used" metadata (absent: no Settle), and
// record Settle's errors.
type settling struct{ errs []error }

func (s *settling) settle(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-used"); len(v) > 0 {
		used, _ := strconv.Atoi(v[0])
		s.errs = append(s.errs, grpclimit.Settle(ctx, used), grpclimit.Settle(ctx, used+1)) // the second does nothing
	}
}

func (s *settling) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			s.settle(ctx)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			s.settle(ss.Context())
			return h(srv, ss)
		}),
	}
}

// costOf is a call's "x-cost" metadata: its estimate.
func costOf(ctx context.Context, _ string) int {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-cost"); len(v) > 0 {
		n, _ := strconv.Atoi(v[0])
		return n
	}
	return 1
}

// A call settles its cost in its handler: the unused part given back, an
// excess recorded; the ratelimit trailer reports the state after it. On a
// unary call and a stream, with the Redis limiter and local.
func TestSettle(t *testing.T) {
	_, rdb := mini(t)
	for name, lim := range map[string]grpclimit.Limiter{"redis": slidelog.New(rdb), "local": local.New()} {
		t.Run(name, func(t *testing.T) {
			st := &settling{}
			o := grpclimit.Options{Limiter: lim, Limit: slidelog.PerHour(100), Name: "tokens", Cost: costOf}
			s := serve(t, append(both(o), st.options()...))
			call := func(cost, used int) (header, trailer metadata.MD) {
				ctx := metadata.AppendToOutgoingContext(context.Background(), "x-cost", strconv.Itoa(cost), "x-used", strconv.Itoa(used))
				if _, err := s.client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
					t.Fatal(err)
				}
				return header, trailer
			}
			h, tr := call(10, 4)
			if got, want := strings.Join(h.Get("ratelimit"), "|")+" then "+strings.Join(tr.Get("ratelimit"), "|"), `"tokens";r=90;t=0 then "tokens";r=96;t=0`; got != want {
				t.Fatalf("a call of 10 settled to 4: ratelimit %s; want %s", got, want)
			}
			_, tr = call(10, 60)
			if got, want := strings.Join(tr.Get("ratelimit"), "|"), `"tokens";r=36;t=0`; got != want {
				t.Fatalf("a call of 10 settled to 60: trailer %s; want %s", got, want)
			}
			// a stream settles in its handler's Context too
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-cost", "5", "x-used", "1")
			ctx, cancel := context.WithCancel(ctx)
			stream, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := stream.Recv(); err != nil {
				t.Fatal(err)
			}
			cancel()
			_, tr = call(1, 1)
			if got, want := strings.Join(tr.Get("ratelimit"), "|"), `"tokens";r=34;t=0`; got != want {
				t.Fatalf("after a stream of 5 settled to 1, a call of 1: trailer %s; want %s", got, want)
			}
			for i, err := range st.errs {
				if err != nil {
					t.Errorf("Settle %d: %v", i, err)
				}
			}
		})
	}
}

// Settle of a context the interceptor never admitted.
func TestSettleWithoutAdmission(t *testing.T) {
	if err := grpclimit.Settle(context.Background(), 1); !errors.Is(err, grpclimit.ErrNoAdmission) {
		t.Fatalf("%v; want ErrNoAdmission", err)
	}
}
