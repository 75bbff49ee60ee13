package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/check"
)

// check.Run (slidelog check's and serve's start-up inspection) on every server
// kind of every flavor: a single server, a master with a replica behind
// Sentinel, a Cluster. A safe server passes with the findings it should
// have, word for word; an evicting maxmemory-policy fails the check naming
// the setting and the server; WithReplicas(n) is compared with each
// master's replicas. Seven containers a flavor: the single server is the
// Sentinel's master afterwards.
func TestCheck(t *testing.T) {
	for _, f := range selected(t) {
		t.Run(f.name, func(t *testing.T) {
			n := startNode(t, f)
			t.Run("single", func(t *testing.T) { checkOnSingle(t, f, n) })
			t.Run("sentinel", func(t *testing.T) { checkOnSentinel(t, f, n) })
			t.Run("cluster", func(t *testing.T) { checkOnCluster(t, f) })
		})
	}
}

// The texts of the findings the tests expect.
const (
	noeviction   = "maxmemory-policy noeviction: at maxmemory, admissions fail with OOM and no log is evicted"
	aofAlways    = "appendonly yes, appendfsync always: every admission is on disk before its answer; a restart or a crash forgets nothing"
	noReplicas   = "role master, 0 replicas connected"
	oneReplica   = "role master, 1 replica connected (replication is asynchronous: a failover may lose the last admissions)"
	scriptLoaded = "EVALSHA, NOSCRIPT then EVAL, and TIME in a script work" // the server's first check
	scriptCached = "EVALSHA works and a script may call TIME"
	aclAll       = "user default may run every command slidelog sends on slidelog:*"
	aclBefore7   = "could not check ACL permissions: ACL DRYRUN needs Redis 7 or later"
	evicts       = "maxmemory-policy %s can evict slidelog's logs (every log has a TTL, so volatile-* policies evict them as allkeys-* ones do): an evicted log is a limit that silently restarts; set maxmemory-policy noeviction"
	maxmemory0   = " (maxmemory is 0 now: no limit yet, but the policy applies once one is set)"
	tooFew       = "role master, %d of the %d replicas WithReplicas waits for connected and online: every admission waits its timeout and fails with ErrNotReplicated; connect more replicas or lower WithReplicas' n"
	waitsFor     = "role master, %s connected; WithReplicas: an admission waits until %d of them have it"
)

// checkReport runs check.Run on rdb with opts (none: the defaults).
func checkReport(t *testing.T, rdb redis.UniversalClient, opts ...check.Options) check.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var o check.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	r, err := check.Run(ctx, rdb, o)
	if err != nil {
		t.Fatalf("check.Run: %v", err)
	}
	return r
}

// sameFindings fails the test unless r holds exactly want, in order.
func sameFindings(t *testing.T, what string, r check.Report, want []check.Finding) {
	t.Helper()
	if slices.Equal(r.Findings, want) {
		return
	}
	var b strings.Builder
	for i := range max(len(r.Findings), len(want)) {
		var got, w string
		if i < len(r.Findings) {
			got = r.Findings[i].Check + ": " + r.Findings[i].String()
		}
		if i < len(want) {
			w = want[i].Check + ": " + want[i].String()
		}
		mark := "  "
		if got != w {
			mark = "! "
		}
		fmt.Fprintf(&b, "%s got  %s\n%s want %s\n", mark, got, mark, w)
	}
	t.Errorf("%s: findings differ:\n%s", what, b.String())
}

// problemsAre fails the test unless r's problems are exactly want.
func problemsAre(t *testing.T, what string, r check.Report, want ...check.Finding) {
	t.Helper()
	if r.OK() != (len(want) == 0) || !slices.Equal(r.Problems(), want) {
		t.Errorf("%s: OK %v, problems\n%v\nwant\n%v", what, r.OK(), r.Problems(), want)
	}
}

// serverName is what the check should call the server at rdb ("Redis
// 7.0.15", "Valkey 8.1.1"), read here from INFO server.
func serverName(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	if v := fields["valkey_version"]; v != "" {
		return "Valkey " + v
	}
	if fields["redis_version"] == "" {
		t.Fatalf("INFO server gave no version:\n%s", info)
	}
	return "Redis " + fields["redis_version"]
}

// safeFindings are the findings of a safe server (noeviction, appendonly
// yes, appendfsync always) at addr: mode is standalone or cluster; cluster
// is the Cluster's finding, if any.
func safeFindings(f flavor, addr, name, mode, replication, cluster, script string) []check.Finding {
	info := func(name, text string) check.Finding {
		return check.Finding{Severity: check.SeverityInfo, Check: name, Server: addr, Text: text}
	}
	fs := []check.Finding{info("server", name+" ("+mode+")"), info("maxmemory-policy", noeviction),
		info("persistence", aofAlways), info("replication", replication)}
	if cluster != "" {
		fs = append(fs, info("cluster", cluster))
	}
	fs = append(fs, info("script", script))
	if f.name == "redis-6.0" {
		return append(fs, check.Finding{Severity: check.SeverityWarning, Check: "acl", Server: addr, Text: aclBefore7})
	}
	return append(fs, info("acl", aclAll))
}

// replace returns fs with the finding of check replaced by with.
func replace(fs []check.Finding, with check.Finding) []check.Finding {
	out := slices.Clone(fs)
	for i := range out {
		if out[i].Check == with.Check && out[i].Server == with.Server {
			out[i] = with
		}
	}
	return out
}

// configSet runs CONFIG SET pairs on rdb.
func configSet(t *testing.T, rdb *redis.Client, pairs ...string) {
	t.Helper()
	for i := 0; i < len(pairs); i += 2 {
		if err := rdb.ConfigSet(context.Background(), pairs[i], pairs[i+1]).Err(); err != nil {
			t.Fatalf("CONFIG SET %s %q: %v", pairs[i], pairs[i+1], err)
		}
	}
}

// evictingPolicies are the policies each server kind is checked with: an
// allkeys-* one with no maxmemory yet, a volatile-* one with a maxmemory.
var evictingPolicies = []struct{ policy, maxmemory, tail string }{
	{"allkeys-lru", "0", maxmemory0},
	{"volatile-ttl", "100mb", ""},
}

// checkOnSingle: a single server, fresh: every finding word for word, the
// persistence settings, the evicting policies, lua-replicate-commands (Redis
// 6), WithReplicas with no replica; the check writes no key.
func checkOnSingle(t *testing.T, f flavor, n *node) {
	ctx := context.Background()
	rdb := n.client(t)
	name := serverName(t, rdb)
	safe := safeFindings(f, n.addr, name, "standalone", noReplicas, "", scriptLoaded)
	sameFindings(t, "first check", checkReport(t, rdb), safe)
	safe = replace(safe, check.Finding{Severity: check.SeverityInfo, Check: "script", Server: n.addr, Text: scriptCached})
	sameFindings(t, "second check", checkReport(t, rdb), safe)
	if keys := rdb.DBSize(ctx).Val(); keys != 0 {
		t.Errorf("the check left %d keys", keys)
	}
	// slidelog works where the check passed.
	l := slidelog.New(rdb, slidelog.WithPrefix(prefix(t)))
	if r, err := l.Allow(ctx, "k", slidelog.PerMinute(1)); err != nil || !r.Allowed {
		t.Errorf("Allow after a passed check: %+v, %v", r, err)
	}

	// Persistence: a warning saying what a restart or a crash forgets.
	for _, c := range []struct {
		set  []string
		sev  check.Severity
		text string
	}{
		{[]string{"appendfsync", "everysec"}, check.SeverityInfo, "appendonly yes, appendfsync everysec: a clean restart forgets nothing, a crash up to about a second of admissions (appendfsync always: none)"},
		{[]string{"appendfsync", "no"}, check.SeverityWarning, "appendonly yes, appendfsync no: the system writes the AOF to disk when it likes, so a crash may forget the last 30 s or so of admissions, and limits admit them again; set appendfsync always or everysec"},
		{[]string{"appendonly", "no"}, check.SeverityWarning, `no persistence (appendonly no, save ""): a restart forgets every window, and every limit admits a whole window again; set appendonly yes`},
		{[]string{"save", "900 1"}, check.SeverityWarning, `appendonly no, snapshots only (save "900 1"): a crash forgets every admission since the last snapshot, and limits admit them again; set appendonly yes`},
	} {
		configSet(t, rdb, c.set...)
		want := replace(safe, check.Finding{Severity: c.sev, Check: "persistence", Server: n.addr, Text: c.text})
		sameFindings(t, strings.Join(c.set, " "), checkReport(t, rdb), want)
	}
	configSet(t, rdb, "save", "", "appendonly", "yes", "appendfsync", "always")
	sameFindings(t, "persistence restored", checkReport(t, rdb), safe)

	// Every evicting policy fails the check, naming the setting.
	for _, p := range evictingPolicies {
		configSet(t, rdb, "maxmemory", p.maxmemory, "maxmemory-policy", p.policy)
		problem := check.Finding{Severity: check.SeverityProblem, Check: "maxmemory-policy", Server: n.addr,
			Text: fmt.Sprintf(evicts, p.policy) + p.tail}
		r := checkReport(t, rdb)
		sameFindings(t, p.policy, r, replace(safe, problem))
		problemsAre(t, p.policy, r, problem)
	}
	configSet(t, rdb, "maxmemory-policy", "noeviction", "maxmemory", "0")

	// Redis 6 has lua-replicate-commands: with no, a script's write after
	// TIME fails, and so does every admission. Redis 7 and Valkey have no
	// such setting.
	err := rdb.ConfigSet(ctx, "lua-replicate-commands", "no").Err()
	if f.name == "redis-6.0" {
		if err != nil {
			t.Fatalf("CONFIG SET lua-replicate-commands no: %v", err)
		}
		problem := check.Finding{Severity: check.SeverityProblem, Check: "script", Server: n.addr,
			Text: scriptCached + ", but lua-replicate-commands is no: Redis 6 then refuses a script's writes after TIME (Write commands not allowed after non deterministic commands), and slidelog's scripts write after TIME: every admission fails; set lua-replicate-commands yes (the default)"}
		r := checkReport(t, rdb)
		sameFindings(t, "lua-replicate-commands no", r, replace(safe, problem))
		problemsAre(t, "lua-replicate-commands no", r, problem)
		if _, err := l.Allow(ctx, "k2", slidelog.PerMinute(1)); err == nil || !strings.Contains(err.Error(), "Write commands not allowed after non deterministic commands") {
			t.Errorf("Allow with lua-replicate-commands no: %v, want the server's refusal", err)
		}
		configSet(t, rdb, "lua-replicate-commands", "yes")
		if r, err := l.Allow(ctx, "k2", slidelog.PerMinute(1)); err != nil || !r.Allowed {
			t.Errorf("Allow with lua-replicate-commands yes: %+v, %v", r, err)
		}
	} else if err == nil || !strings.Contains(err.Error(), "lua-replicate-commands") {
		t.Errorf("CONFIG SET lua-replicate-commands no: %v, want it refused (no such setting)", err)
	}

	// WithReplicas(1) on a server with no replica.
	problem := check.Finding{Severity: check.SeverityProblem, Check: "replication", Server: n.addr, Text: fmt.Sprintf(tooFew, 0, 1)}
	r := checkReport(t, rdb, check.Options{Replicas: 1})
	sameFindings(t, "WithReplicas(1)", r, replace(safe, problem))
	problemsAre(t, "WithReplicas(1)", r, problem)
	report(t, "%s check, single server (%s): %d findings, passes; fails on %s and %s, and WithReplicas(1) with no replica",
		f.name, name, len(safe), evictingPolicies[0].policy, evictingPolicies[1].policy)
}

// checkOnSentinel: master (the single server, safe again) gets a replica
// and a sentinel; the check runs through a failover client, on the master,
// named by its address; WithReplicas(1) passes, WithReplicas(2) fails;
// the Sentinel itself and the replica fail.
func checkOnSentinel(t *testing.T, f flavor, master *node) {
	ctx := context.Background()
	admin := master.client(t)
	configSet(t, admin, "repl-diskless-sync-delay", "0") // no 5 s wait for more replicas
	replica := startNode(t, f, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	waitSynced(t, replica)
	waitInfo(t, master, "replication", "state=online")
	sentinel := startSentinel(t, f, master.port)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{sentinel.addr},
		ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = fc.Close() })
	name := serverName(t, admin)
	safe := safeFindings(f, master.addr, name, "standalone", oneReplica, "", scriptCached)
	sameFindings(t, "failover client", checkReport(t, fc), safe)

	r := checkReport(t, fc, check.Options{Replicas: 1})
	sameFindings(t, "WithReplicas(1)", r, replace(safe, check.Finding{Severity: check.SeverityInfo, Check: "replication", Server: master.addr, Text: fmt.Sprintf(waitsFor, "1 replica", 1)}))
	// and an admission is acknowledged, as the check said
	l := slidelog.New(fc, slidelog.WithPrefix(prefix(t)), slidelog.WithReplicas(1, time.Second))
	if res, err := l.Allow(ctx, "k", slidelog.PerMinute(1)); err != nil || !res.Allowed {
		t.Errorf("Allow with WithReplicas(1): %+v, %v", res, err)
	}
	problem := check.Finding{Severity: check.SeverityProblem, Check: "replication", Server: master.addr, Text: fmt.Sprintf(tooFew, 1, 2)}
	r = checkReport(t, fc, check.Options{Replicas: 2})
	sameFindings(t, "WithReplicas(2)", r, replace(safe, problem))
	problemsAre(t, "WithReplicas(2)", r, problem)

	for _, p := range evictingPolicies {
		configSet(t, admin, "maxmemory", p.maxmemory, "maxmemory-policy", p.policy)
		problem := check.Finding{Severity: check.SeverityProblem, Check: "maxmemory-policy", Server: master.addr,
			Text: fmt.Sprintf(evicts, p.policy) + p.tail}
		problemsAre(t, "failover client, "+p.policy, checkReport(t, fc), problem)
	}
	configSet(t, admin, "maxmemory-policy", "noeviction", "maxmemory", "0")
	problemsAre(t, "failover client, noeviction again", checkReport(t, fc))

	// A client of the Sentinel itself, and one of the replica.
	sameFindings(t, "the sentinel", checkReport(t, sentinel.client(t)), []check.Finding{{Severity: check.SeverityProblem, Check: "server", Server: sentinel.addr,
		Text: name + " is a Sentinel, not a data server: connect through a failover client (redis.NewFailoverClient) that asks it for the master"}})
	problemsAre(t, "the replica", checkReport(t, replica.client(t)), check.Finding{Severity: check.SeverityProblem, Check: "replication", Server: replica.addr,
		Text: "role slave (of " + master.addr + "): slidelog writes every admission, and a replica refuses writes (READONLY) or loses them at its next sync; connect to the master"})
	report(t, "%s check, Sentinel: through a failover client on the master %s, passes; WithReplicas(1) passes, (2) fails; the sentinel and the replica fail", f.name, name)
}

// startSmallCluster starts a Cluster of three masters, the first with a
// replica (four nodes): a master with a replica and masters without.
func startSmallCluster(t *testing.T, f flavor) (c *cluster, masters []*node, replica *node) {
	t.Helper()
	ctx := context.Background()
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
		"--repl-diskless-sync-delay", "0"}
	for range 3 {
		masters = append(masters, startNode(t, f, args...))
	}
	replica = startNode(t, f, args...)
	create := []string{f.cli, "--cluster", "create"}
	for _, m := range masters {
		create = append(create, m.addr)
	}
	masters[0].exec(t, append(create, "--cluster-replicas", "0", "--cluster-yes")...)
	id, err := masters[0].client(t).Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	r := replica.client(t)
	if err := r.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(masters[0].port)).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(r.ClusterNodes(ctx).Val(), id); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the replica never learned of its master")
		}
	}
	if err := r.Do(ctx, "CLUSTER", "REPLICATE", id).Err(); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, replica)
	waitInfo(t, masters[0], "replication", "state=online")
	c = &cluster{nodes: append(slices.Clone(masters), replica)}
	c.waitOK(t)
	// Gossip tells the other masters of the replica.
	for _, n := range c.nodes {
		waitInfoAll(t, n, func(ctx context.Context, rdb *redis.Client) (string, error) { return rdb.ClusterInfo(ctx).Result() }, "cluster_known_nodes:4")
	}
	return c, masters, replica
}

// checkOnCluster: every master is checked (the replica is not), each word
// for word; WithReplicas(1) fails on the masters without a replica,
// WithReplicas(2) on all three; one master with an evicting policy fails
// the check, named.
func checkOnCluster(t *testing.T, f flavor) {
	c, masters, replica := startSmallCluster(t, f)
	cc := c.client(t)
	name := serverName(t, masters[0].client(t))
	byAddr := slices.Clone(masters)
	slices.SortFunc(byAddr, func(a, b *node) int { return strings.Compare(a.addr, b.addr) })
	// findings: each master's in the order of their addresses, with
	// edit(master, its safe findings) applied.
	findings := func(script string, edit func(m *node, fs []check.Finding) []check.Finding) []check.Finding {
		var all []check.Finding
		for _, m := range byAddr {
			replication := noReplicas
			if m == masters[0] {
				replication = oneReplica
			}
			fs := safeFindings(f, m.addr, name, "cluster", replication, "cluster_state ok, 16384 slots assigned, 4 known nodes", script)
			if edit != nil {
				fs = edit(m, fs)
			}
			all = append(all, fs...)
		}
		return all
	}
	r := checkReport(t, cc)
	sameFindings(t, "first check", r, findings(scriptLoaded, nil))
	problemsAre(t, "first check", r)
	for _, fd := range r.Findings {
		if fd.Server == replica.addr {
			t.Errorf("the replica was checked: %v", fd)
		}
	}
	sameFindings(t, "second check", checkReport(t, cc), findings(scriptCached, nil))

	for _, n := range []int{1, 2} {
		var problems []check.Finding
		want := findings(scriptCached, func(m *node, fs []check.Finding) []check.Finding {
			have := 0
			if m == masters[0] {
				have = 1
			}
			if have >= n {
				return replace(fs, check.Finding{Severity: check.SeverityInfo, Check: "replication", Server: m.addr, Text: fmt.Sprintf(waitsFor, "1 replica", n)}) // have >= n >= 1: one replica
			}
			p := check.Finding{Severity: check.SeverityProblem, Check: "replication", Server: m.addr, Text: fmt.Sprintf(tooFew, have, n)}
			problems = append(problems, p)
			return replace(fs, p)
		})
		r := checkReport(t, cc, check.Options{Replicas: n})
		sameFindings(t, fmt.Sprintf("WithReplicas(%d)", n), r, want)
		problemsAre(t, fmt.Sprintf("WithReplicas(%d)", n), r, problems...)
	}

	// One master evicting, then another: the check fails naming it.
	for i, p := range evictingPolicies {
		m := masters[1+i]
		admin := m.client(t)
		configSet(t, admin, "maxmemory", p.maxmemory, "maxmemory-policy", p.policy)
		problem := check.Finding{Severity: check.SeverityProblem, Check: "maxmemory-policy", Server: m.addr,
			Text: fmt.Sprintf(evicts, p.policy) + p.tail}
		r := checkReport(t, cc)
		sameFindings(t, p.policy+" on "+m.addr, r, findings(scriptCached, func(n *node, fs []check.Finding) []check.Finding {
			if n == m {
				return replace(fs, problem)
			}
			return fs
		}))
		problemsAre(t, p.policy+" on "+m.addr, r, problem)
		configSet(t, admin, "maxmemory-policy", "noeviction", "maxmemory", "0")
	}
	report(t, "%s check, Cluster of 3 masters (one with a replica): every master checked, passes; WithReplicas(1) fails on the 2 masters without a replica, (2) on all; one master evicting fails naming it", f.name)
}

// waitInfoAll waits until read's answer on n contains every one of want.
func waitInfoAll(t *testing.T, n *node, read func(context.Context, *redis.Client) (string, error), want ...string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		info, err := read(context.Background(), rdb)
		if err == nil && !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(info, w) }) {
			return
		}
	}
	t.Fatalf("%s never showed all of %q", n.addr, want)
}

// waitSynced waits until replica has its master's data and has written
// its AOF anew from it: a replica stopped before (SIGTERM) refuses to
// exit ("Writing initial AOF, can't exit", Redis 6.0), and the container
// takes docker's 10 s to die.
func waitSynced(t *testing.T, replica *node) {
	t.Helper()
	read := func(ctx context.Context, rdb *redis.Client) (string, error) {
		// one section a call: several need Redis 7
		replication, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			return "", err
		}
		persistence, err := rdb.Info(ctx, "persistence").Result()
		return replication + persistence, err
	}
	waitInfoAll(t, replica, read, "role:slave", "master_link_status:up", "aof_rewrite_in_progress:0", "aof_rewrite_scheduled:0")
}
