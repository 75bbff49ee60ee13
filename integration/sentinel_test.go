package integration

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
)

// startSentinel starts a sentinel watching the master at masterPort.
func startSentinel(t *testing.T, f flavor, masterPort int) *node {
	t.Helper()
	port := freePort(t)
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\n"+
		"sentinel monitor mymaster 127.0.0.1 %d 2\n"+
		"sentinel down-after-milliseconds mymaster 1000\n"+
		"sentinel failover-timeout mymaster 10000\n", port, masterPort)
	// A sentinel rewrites its configuration file, so it is written at start.
	script := fmt.Sprintf("printf '%s' > /tmp/sentinel.conf && exec %s /tmp/sentinel.conf --sentinel", conf, f.bin)
	return startContainer(t, f, port, "+monitor master mymaster", []string{"/bin/sh", "-c"}, []string{script})
}

// A master, a replica and three sentinels; the limiter on a failover client
// keeps deciding across a forced failover (SENTINEL FAILOVER).
func TestSentinel(t *testing.T) {
	for _, f := range selected(t) {
		t.Run(f.name, func(t *testing.T) {
			ctx := context.Background()
			master := startNode(t, f)
			replica := startNode(t, f, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
			waitRole(t, replica, "slave")
			var sentinels []string
			for range 3 {
				sentinels = append(sentinels, startSentinel(t, f, master.port).addr)
			}
			newClient := func() redis.UniversalClient {
				rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster",
					SentinelAddrs: sentinels, ContextTimeoutEnabled: true, PoolSize: 16})
				t.Cleanup(func() { _ = rdb.Close() })
				return rdb
			}
			// Every sentinel must know the replica and its peers before a
			// failover can be agreed.
			s := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0]})
			defer func() { _ = s.Close() }()
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				m, err := s.Master(ctx, "mymaster").Result()
				if err == nil && m["num-slaves"] == "1" && m["num-other-sentinels"] == "2" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("sentinels never saw the replica and each other: %v %v", m, err)
				}
			}

			limit := slidelog.Limit{Events: 30, Window: 2 * time.Second}
			var instances []redis.UniversalClient
			for range 4 {
				instances = append(instances, newClient())
			}
			tr := newTraffic(t, instances, newClient(), limit, "a", "b", "c")
			tr.pace = 2 * time.Millisecond
			tr.deadline = 200 * time.Millisecond
			tr.lossy = true
			var promoted, demoted time.Duration
			tr.run(t, 12*time.Second, 2*time.Second, func() {
				start := time.Now()
				if err := s.Failover(ctx, "mymaster").Err(); err != nil {
					t.Error(err)
					return
				}
				waitRole(t, replica, "master")
				promoted = time.Since(start)
				tr.settled = time.Now().Add(limit.Window).UnixMicro()
				waitRole(t, master, "slave")
				demoted = time.Since(start)
			})
			sum := tr.verify(t)
			kinds := tr.errorsWithin(t, 150*time.Millisecond)
			// Decisions resumed on the new master.
			l := slidelog.New(newClient(), slidelog.WithPrefix(prefix(t)))
			if r, err := l.Allow(ctx, "after", limit); err != nil || !r.Allowed {
				t.Errorf("after the failover: %+v, %v", r, err)
			}
			report(t, "%s sentinel SENTINEL FAILOVER, replica promoted in %v, old master a replica in %v: %v; most admitted answers in a window once settled %d; errors: %v",
				f.name, promoted.Round(time.Millisecond), demoted.Round(time.Millisecond), sum, sum.maxSettled, kinds)
		})
	}
}
