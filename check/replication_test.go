package check

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/redistest"
)

// The replicas connected to a master are counted; a replica fails the
// check.
func TestCheckReplication(t *testing.T) {
	master := redistest.Start(t, redistest.Safe()...)
	host, port, _ := net.SplitHostPort(master)
	replica := redistest.Start(t, append(redistest.Safe(), "--replicaof", host, port)...)
	m := redistest.Client(t, master)
	redistest.WaitFor(t, "the replica's link", func() bool {
		return redistest.Info(m, "connected_slaves") == "1"
	})
	one(t, runCheck(t, m), "replication", SeverityInfo, "role master, 1 replica connected")
	r := runCheck(t, redistest.Client(t, replica))
	if r.OK() {
		t.Error("a replica is OK")
	}
	one(t, r, "replication", SeverityProblem, "role slave (of "+master+")", "connect to the master")
}

// On a Cluster, Run reads cluster_state; a Cluster node behind a plain
// client is a problem.
func TestCheckCluster(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Start(t, append(redistest.Safe(), "--cluster-enabled", "yes", "--cluster-announce-ip", "127.0.0.1")...)
	plain := redistest.Client(t, addr)
	r := runCheck(t, plain)
	if len(r.Problems()) != 2 {
		t.Errorf("problems %v, want the client's and the state's", r.Problems())
	}
	for _, f := range only(r, "cluster") {
		if !strings.Contains(f.Text, "not a *redis.ClusterClient") && !strings.Contains(f.Text, "cluster_state fail (0 of 16384 slots") {
			t.Errorf("unexpected %v", f)
		}
	}

	slots := []any{"CLUSTER", "ADDSLOTS"}
	for i := range 16384 {
		slots = append(slots, i)
	}
	if err := plain.Do(ctx, slots...).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, "cluster_state ok", func() bool { return strings.Contains(plain.ClusterInfo(ctx).Val(), "cluster_state:ok") })
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, MaxRetries: -1})
	defer func() { _ = cc.Close() }()
	r = runCheck(t, cc)
	if !r.OK() {
		t.Errorf("problems %v", r.Problems())
	}
	one(t, r, "cluster", SeverityInfo, "cluster_state ok, 16384 slots assigned, 1 known nodes")
	one(t, r, "server", SeverityInfo, "(cluster)")
}

// A replica in its first sync is connected but acknowledges no WAIT:
// Options.Replicas (WithReplicas) counts only the replicas online. The master delays the
// replica's sync (repl-diskless-sync-delay) for the length of the test.
func TestCheckReplicaSyncing(t *testing.T) {
	master := redistest.Start(t, append(redistest.Safe(), "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "60")...)
	host, port, _ := net.SplitHostPort(master)
	redistest.Start(t, append(redistest.Safe(), "--replicaof", host, port)...)
	m := redistest.Client(t, master)
	redistest.WaitFor(t, "the replica's link", func() bool {
		return redistest.Info(m, "connected_slaves") == "1"
	})
	if s := redistest.Info(m, "slave0"); !strings.Contains(s, "state=wait_bgsave") {
		t.Fatalf("slave0:%s, want state=wait_bgsave", s)
	}
	const syncing = "; 1 of the 1 connected still in their first sync, acknowledging no write yet"
	f := one(t, runCheck(t, m), "replication", SeverityInfo)
	if want := "role master, 1 replica connected (replication is asynchronous: a failover may lose the last admissions)" + syncing; f.Text != want {
		t.Errorf("replication: %q, want %q", f.Text, want)
	}
	f = one(t, runCheck(t, m, Options{Replicas: 1}), "replication", SeverityProblem)
	if want := "role master, 0 of the 1 replicas WithReplicas waits for connected and online: every admission waits its timeout and fails with ErrNotReplicated; connect more replicas or lower WithReplicas' n" + syncing; f.Text != want {
		t.Errorf("replication: %q, want %q", f.Text, want)
	}
}

// Run compares the replicas connected with Options.Replicas (WithReplicas'
// n), and checks that the user may send WAIT.
func TestReplicasCheck(t *testing.T) {
	master := redistest.Start(t, append(redistest.Safe(), "--repl-diskless-sync-delay", "0")...)
	host, port, _ := net.SplitHostPort(master)
	replica := redistest.Client(t, redistest.Start(t, append(redistest.Safe(), "--replicaof", host, port)...))
	m := redistest.Client(t, master)
	redistest.WaitFor(t, "the replica online", func() bool {
		return strings.Contains(redistest.Info(m, "slave0"), "state=online") && redistest.Info(replica, "master_link_status") == "up"
	})
	one(t, runCheck(t, m, Options{Replicas: 1}), "replication", SeverityInfo, "1 replica connected; WithReplicas: an admission waits until 1 of them")
	one(t, runCheck(t, m, Options{Replicas: 2}), "replication", SeverityProblem, "1 of the 2 replicas WithReplicas waits for connected", "ErrNotReplicated")
	one(t, runCheck(t, m), "replication", SeverityInfo, "role master, 1 replica connected")

	if err := m.Do(context.Background(), "ACL", "SETUSER", "nowait", "on", ">pw", "~*", "+@all", "-wait").Err(); err != nil {
		t.Fatal(err)
	}
	limited := redistest.Client(t, master, "nowait", "pw")
	one(t, runCheck(t, limited, Options{Replicas: 1}), "acl", SeverityProblem, "WAIT")
	one(t, runCheck(t, limited), "acl", SeverityInfo, "may run every command")
}
