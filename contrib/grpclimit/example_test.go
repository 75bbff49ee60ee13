package grpclimit_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/grpclimit"
	"github.com/slidelog/slidelog/local"
)

// A server that admits 2 calls per client address in any sliding minute,
// and what its clients read: the rate-limit fields in the header metadata,
// and a denial's RetryInfo.
func ExampleUnaryServerInterceptor() {
	mr := miniredis.NewMiniRedis() // in production: your Redis
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	mr.SetTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer func() { _ = rdb.Close() }()

	limit := grpclimit.Options{
		Limiter: slidelog.New(rdb),
		Limit:   slidelog.PerMinute(2),
		Name:    "api",
		// Health checks are not counted.
		Methods: map[string]slidelog.Limit{"/grpc.health.v1.Health/Watch": {}},
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limit)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limit)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer func() { _ = conn.Close() }()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		var header metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		st := status.Convert(err)
		fmt.Printf("%v ratelimit-policy: %s; ratelimit: %s\n", st.Code(), header.Get("ratelimit-policy")[0], header.Get("ratelimit")[0])
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("  retry after", ri.GetRetryDelay().AsDuration())
			}
		}
	}
	// Output:
	// OK ratelimit-policy: "api";q=2;w=60; ratelimit: "api";r=1;t=0
	// OK ratelimit-policy: "api";q=2;w=60; ratelimit: "api";r=0;t=60
	// ResourceExhausted ratelimit-policy: "api";q=2;w=60; ratelimit: "api";r=0;t=60
	//   retry after 1m0s
}

// A client that paces its calls to a partner's quota of 2 calls a minute:
// a call that cannot fit before its deadline fails at once, and is not
// made. (With a *slidelog.Limiter, every instance of the client shares the
// quota.)
func ExampleUnaryClientInterceptor() {
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(grpclimit.ClientOptions{
			Waiter: local.New(), // or a *slidelog.Limiter
			Limit:  slidelog.PerMinute(2),
			Key:    "partner:health",
		})))
	if err != nil {
		panic(err)
	}
	defer func() { _ = conn.Close() }()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		st := status.Convert(err)
		fmt.Println(st.Code())
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("  the quota has room in", math.Ceil(ri.GetRetryDelay().AsDuration().Seconds()), "s")
			}
		}
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted
	//   the quota has room in 60 s
}
