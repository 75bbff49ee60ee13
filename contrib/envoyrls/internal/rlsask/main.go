// Command rlsask sends ShouldRateLimit calls to a rate limit service, one
// after the other, and prints a line per call: the overall code, then each
// descriptor's code, limit_remaining and duration_until_reset in whole
// seconds (rounded up). scripts/rls-image-check.sh runs it.
//
//	rlsask --addr 127.0.0.1:8081 --domain web --n 3 remote_address=10.0.0.1 [path=/x ...]
//
// The KEY=VALUE arguments are the entries of one descriptor.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the service's gRPC address")
	domain := flag.String("domain", "web", "the request's domain")
	n := flag.Int("n", 1, "calls to send")
	timeout := flag.Duration("timeout", 10*time.Second, "each call's deadline")
	flag.Parse()
	d := &rlv3.RateLimitDescriptor{}
	for _, kv := range flag.Args() {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "rlsask: %q: want KEY=VALUE\n", kv)
			os.Exit(2)
		}
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsask:", err)
		os.Exit(1)
	}
	defer func() { _ = cc.Close() }()
	c := rlsv3.NewRateLimitServiceClient(cc)
	for i := 0; i < *n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: []*rlv3.RateLimitDescriptor{d}})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlsask:", err)
			os.Exit(1)
		}
		line := resp.GetOverallCode().String()
		for _, st := range resp.GetStatuses() {
			reset := st.GetDurationUntilReset().AsDuration()
			secs := int64((reset + time.Second - 1) / time.Second)
			line += fmt.Sprintf(" %s remaining=%d reset=%d", st.GetCode(), st.GetLimitRemaining(), secs)
		}
		fmt.Println(line)
	}
}
