package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
		"sentinel down-after-milliseconds mymaster 5000\n"+
		"sentinel failover-timeout mymaster 10000\n", port, masterPort)
	// A sentinel rewrites its configuration file, so it is written at start.
	script := fmt.Sprintf("printf '%s' > /tmp/sentinel.conf && exec %s /tmp/sentinel.conf --sentinel", conf, f.bin)
	return startContainer(t, f, port, "+monitor master mymaster", []string{"/bin/sh", "-c"}, []string{script})
}

// A master, a replica and three sentinels; limiters on failover clients
// keep deciding across forced failovers (SENTINEL FAILOVER), back and forth
// between the two servers. Sentinel promotes the replica while clients are
// still on the old master, which goes on admitting until it is demoted:
// with WithReplicas those admissions are never acknowledged (the replica
// has left it), so no window may hold more admitted answers than the limit;
// without, windows over the limit are measured. Beside each traffic, its
// compactTwin: a compact log (limit 160) under the same options.
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
			s := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0]})
			defer func() { _ = s.Close() }()
			nodes := []*node{master, replica}
			infos := []*redis.Client{master.client(t), replica.client(t)}
			// ready waits until the sentinels see a master, its replica
			// (online, its link up, the replica itself says so) and each
			// other, which a failover needs, and returns the master and the
			// replica. Either server may be the master: a failover the
			// sentinels start themselves (a master slow to answer on a
			// busy machine) is one more fault, not a failure.
			ready := func() (m, r *node) {
				for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
					sm, err := s.Master(ctx, "mymaster").Result()
					reps, rerr := s.Replicas(ctx, "mymaster").Result()
					if err == nil && rerr == nil && sm["flags"] == "master" && sm["num-slaves"] == "1" && sm["num-other-sentinels"] == "2" &&
						len(reps) == 1 && reps[0]["flags"] == "slave" && reps[0]["master-link-status"] == "ok" {
						for i, n := range nodes {
							other := nodes[1-i]
							if n.addr == sm["ip"]+":"+sm["port"] && other.addr == reps[0]["ip"]+":"+reps[0]["port"] &&
								strings.Contains(infos[1-i].Info(ctx, "replication").Val(), "master_link_status:up") {
								return n, other
							}
						}
					}
					if time.Now().After(deadline) {
						t.Fatalf("sentinels never saw a master with its replica in sync and each other: %v %v %v %v", sm, err, reps, rerr)
					}
				}
			}
			ready()

			limit := slidelog.Limit{Events: 30, Window: 2 * time.Second}
			var instances []redis.UniversalClient
			for range 4 {
				instances = append(instances, newClient())
			}
			acked, unbatched, plain := withAndWithout(t, instances, newClient(), limit, "a", "b", "c")
			// and beside each, a compact log (limit compactEvents)
			all := append([]*traffic{acked, unbatched, plain}, compactTwins(t, []*traffic{acked, unbatched, plain}, "big")...)
			n := failovers(t, 2)
			var rounds []int64
			var promoted, demoted []time.Duration
			var settled int64
			runTogether(all, 2*time.Second, limit.Window, func() {
				for i := range n {
					_, to := ready()
					start := time.Now()
					rounds = append(rounds, start.UnixMicro())
					for deadline := start.Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
						// Sentinel refuses while it still sees a failover or
						// no replica fit to promote.
						err := s.Failover(ctx, "mymaster").Err()
						if err == nil {
							break
						}
						if time.Now().After(deadline) || !strings.Contains(err.Error(), "INPROG") && !strings.Contains(err.Error(), "NOGOODSLAVE") {
							t.Errorf("SENTINEL FAILOVER %d: %v", i+1, err)
							return
						}
					}
					waitRole(t, to, "master")
					promoted = append(promoted, time.Since(start))
					ready()
					demoted = append(demoted, time.Since(start))
					// the new master has a replica in sync (until then
					// WithReplicas refuses admissions), and every event from
					// before has left the window
					settled = time.Now().Add(limit.Window).UnixMicro()
					// A window of traffic on the new master before the next.
					time.Sleep(limit.Window)
				}
			})
			report(t, "%s sentinel: %d SENTINEL FAILOVERs (replica promoted in %v, a master and its replica in sync again in %v), limit %d per %v",
				f.name, len(rounds), durations(promoted), durations(demoted), limit.Events, limit.Window)
			verifyEach(t, f.name+" sentinel", all, rounds, settled)
			// Decisions resumed on the new master.
			l := slidelog.New(newClient(), slidelog.WithPrefix(prefix(t)), slidelog.WithReplicas(1, time.Second))
			if r, err := l.Allow(ctx, "after", limit); err != nil || !r.Allowed {
				t.Errorf("after the failovers: %+v, %v", r, err)
			}
		})
	}
}
