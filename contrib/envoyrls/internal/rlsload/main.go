// Command rlsload sends ShouldRateLimit calls to a rate limit service
// (slidelog rls, envoyproxy/ratelimit) from concurrent gRPC callers for a
// while, and prints one line: calls/s, p50 and p99 latency, and how many
// were OK, OVER_LIMIT and failed. scripts/envoyrls-bench.sh runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the service's gRPC address")
	callers := flag.Int("callers", 16, "concurrent callers")
	conns := flag.Int("conns", 4, "gRPC connections the callers share")
	duration := flag.Duration("duration", 5*time.Second, "how long to send")
	values := flag.Int("values", 10000, "distinct descriptor values, chosen at random; 1: one hot value")
	domain := flag.String("domain", "bench", "the request's domain")
	key := flag.String("key", "user", "the descriptor's key")
	name := flag.String("name", "", "a label for the line")
	flag.Parse()

	clients := make([]rlsv3.RateLimitServiceClient, *conns)
	for i := range clients {
		cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlsload:", err)
			os.Exit(1)
		}
		defer func() { _ = cc.Close() }()
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	// Warm up: a call per connection.
	for _, c := range clients {
		if _, err := c.ShouldRateLimit(context.Background(), request(*domain, *key, "warmup")); err != nil {
			fmt.Fprintln(os.Stderr, "rlsload: warm-up call:", err)
			os.Exit(1)
		}
	}
	type tally struct {
		lat            []time.Duration
		ok, over, fail int
	}
	tallies := make([]tally, *callers)
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(*duration)
	for i := 0; i < *callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := &tallies[i]
			c := clients[i%len(clients)]
			r := rand.New(rand.NewPCG(uint64(i), 1))
			for time.Now().Before(end) {
				v := "hot"
				if *values > 1 {
					v = strconv.Itoa(r.IntN(*values))
				}
				t0 := time.Now()
				resp, err := c.ShouldRateLimit(context.Background(), request(*domain, *key, v))
				t.lat = append(t.lat, time.Since(t0))
				switch {
				case err != nil:
					t.fail++
				case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
					t.ok++
				default:
					t.over++
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	ok, over, fail := 0, 0, 0
	for _, t := range tallies {
		all = append(all, t.lat...)
		ok, over, fail = ok+t.ok, over+t.over, fail+t.fail
	}
	slices.Sort(all)
	q := func(p float64) time.Duration { return all[min(len(all)-1, int(p*float64(len(all))))] }
	fmt.Printf("%-10s callers %3d values %5d: %8.0f calls/s  p50 %7.1fus  p99 %7.1fus  ok %d over %d failed %d\n",
		*name, *callers, *values, float64(len(all))/elapsed.Seconds(),
		float64(q(0.50).Nanoseconds())/1e3, float64(q(0.99).Nanoseconds())/1e3, ok, over, fail)
}

func request(domain, key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}}
}
