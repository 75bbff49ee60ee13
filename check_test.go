package slidelog

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/redistest"
)

// The tests of Check run real redis-servers, each started with the
// configuration it tests (internal/redistest).

// runCheck runs a new Limiter's Check on rdb; an error fails the test.
func runCheck(t *testing.T, rdb redis.Scripter) Report {
	t.Helper()
	r, err := New(rdb).Check(context.Background())
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	for _, f := range r.Findings {
		t.Log(f)
	}
	return r
}

// only returns the findings of one check.
func only(r Report, check string) []Finding {
	var fs []Finding
	for _, f := range r.Findings {
		if f.Check == check {
			fs = append(fs, f)
		}
	}
	return fs
}

// one returns the single finding of check, failing the test unless there
// is exactly one, of severity sev, whose text holds every one of want.
func one(t *testing.T, r Report, check string, sev Severity, want ...string) Finding {
	t.Helper()
	fs := only(r, check)
	if len(fs) != 1 {
		t.Fatalf("%d findings of %s, want 1: %v", len(fs), check, fs)
	}
	f := fs[0]
	if f.Severity != sev {
		t.Errorf("%s: severity %v, want %v: %s", check, f.Severity, sev, f.Text)
	}
	for _, w := range want {
		if !strings.Contains(f.Text, w) {
			t.Errorf("%s: %q does not say %q", check, f.Text, w)
		}
	}
	return f
}

func client(t *testing.T, addr string, user ...string) *redis.Client {
	opts := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1}
	if len(user) == 2 {
		opts.Username, opts.Password = user[0], user[1]
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// A safe server passes, with a finding for every check and no warning;
// the check writes no key.
func TestCheckSafeServer(t *testing.T) {
	addr := redistest.Start(t, redistest.Safe()...)
	rdb := client(t, addr)
	r := runCheck(t, rdb)
	if !r.OK() {
		t.Errorf("not OK: %v", r.Problems())
	}
	var checks []string
	for _, f := range r.Findings {
		checks = append(checks, f.Check)
		if f.Severity != SeverityInfo || f.Server != addr {
			t.Errorf("%v on %s, want info on %s", f, f.Server, addr)
		}
	}
	if want := []string{"server", "maxmemory-policy", "persistence", "replication", "script", "acl"}; !slices.Equal(checks, want) {
		t.Errorf("checks %v, want %v", checks, want)
	}
	version := infoField(rdb, "redis_version")
	if version == "" {
		t.Fatal("INFO gave no redis_version")
	}
	one(t, r, "server", SeverityInfo, "Redis "+version+" (standalone)")
	one(t, r, "maxmemory-policy", SeverityInfo, "maxmemory-policy noeviction")
	one(t, r, "persistence", SeverityInfo, "appendonly yes, appendfsync always")
	one(t, r, "replication", SeverityInfo, "0 replicas connected")
	// On a fresh server the script is not loaded: the fallback is exercised.
	one(t, r, "script", SeverityInfo, "EVALSHA, NOSCRIPT then EVAL")
	one(t, r, "acl", SeverityInfo, "user default may run every command", "slidelog:*")
	if n := rdb.DBSize(context.Background()).Val(); n != 0 {
		t.Errorf("the check left %d keys", n)
	}
	// Again: the script is now loaded.
	one(t, runCheck(t, rdb), "script", SeverityInfo, "EVALSHA works and a script may call TIME")
}

// Every maxmemory-policy but noeviction fails the check, naming the
// setting: the volatile-* policies evict slidelog's logs too (they all
// have a TTL).
func TestCheckEvictingPolicies(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--maxmemory-policy", "allkeys-lru"}, "(maxmemory is 0 now"},
		{[]string{"--maxmemory-policy", "volatile-ttl", "--maxmemory", "100mb"}, "set maxmemory-policy noeviction"},
	} {
		t.Run(c.args[1], func(t *testing.T) {
			r := runCheck(t, client(t, redistest.Start(t, append(redistest.Safe(), c.args...)...)))
			if r.OK() || len(r.Problems()) != 1 {
				t.Errorf("OK %v with problems %v, want 1 problem", r.OK(), r.Problems())
			}
			one(t, r, "maxmemory-policy", SeverityProblem, "maxmemory-policy "+c.args[1]+" can evict", "silently restarts", c.want)
		})
	}
	// The other policies, set on a running server.
	rdb := client(t, redistest.Start(t, redistest.Safe()...))
	for _, p := range []string{"allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu", "volatile-random"} {
		if err := rdb.ConfigSet(ctx, "maxmemory-policy", p).Err(); err != nil {
			t.Fatal(err)
		}
		r := runCheck(t, rdb)
		if r.OK() {
			t.Errorf("%s: OK", p)
		}
		one(t, r, "maxmemory-policy", SeverityProblem, "maxmemory-policy "+p+" can evict")
	}
}

// Persistence: a warning that says what a restart or a crash forgets;
// never a problem.
func TestCheckPersistence(t *testing.T) {
	ctx := context.Background()
	rdb := client(t, redistest.Start(t, "--save", ""))
	for _, c := range []struct {
		set  []string // CONFIG SET pairs
		sev  Severity
		want string
	}{
		{nil, SeverityWarning, `no persistence (appendonly no, save ""): a restart forgets every window`},
		{[]string{"save", "3600 1 300 100"}, SeverityWarning, `snapshots only (save "3600 1 300 100"): a crash forgets every admission since the last snapshot`},
		{[]string{"appendonly", "yes", "appendfsync", "everysec"}, SeverityInfo, "a crash up to about a second"},
		{[]string{"appendfsync", "no"}, SeverityWarning, "appendfsync no: the system writes the AOF"},
		{[]string{"appendfsync", "always"}, SeverityInfo, "forgets nothing"},
	} {
		for i := 0; i < len(c.set); i += 2 {
			if err := rdb.ConfigSet(ctx, c.set[i], c.set[i+1]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		r := runCheck(t, rdb)
		if !r.OK() {
			t.Errorf("%v: problems %v", c.set, r.Problems())
		}
		one(t, r, "persistence", c.sev, c.want)
	}
}

// Users whose ACL refuses commands: what the check itself may not run is
// a warning saying what could not be checked (the policy is then read
// from INFO); what slidelog needs and may not run is a problem.
func TestCheckACL(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Start(t, redistest.Safe()...)
	admin := client(t, addr)
	for user, rules := range map[string][]string{
		"managed": {"~slidelog:*", "+@all", "-config", "-acl"},
		"nothing": {"+@connection"},
		"nozadd":  {"~slidelog:*", "+@all", "-zadd"},
		"other":   {"~other:*", "+@all"},
	} {
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user, "on", ">pw"}, toAny(rules)...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("managed", func(t *testing.T) {
		r := runCheck(t, client(t, addr, "managed", "pw"))
		if !r.OK() {
			t.Errorf("problems %v", r.Problems())
		}
		one(t, r, "maxmemory-policy", SeverityInfo, "maxmemory-policy noeviction (read from INFO)")
		one(t, r, "persistence", SeverityWarning, "appendonly yes; could not check appendfsync: CONFIG GET refused: NOPERM")
		one(t, r, "acl", SeverityWarning, "could not check ACL permissions: ACL WHOAMI refused: NOPERM")
		one(t, r, "script", SeverityInfo)
	})
	t.Run("nothing", func(t *testing.T) {
		r := runCheck(t, client(t, addr, "nothing", "pw"))
		for _, c := range []string{"server", "maxmemory-policy", "persistence", "replication", "acl"} {
			one(t, r, c, SeverityWarning, "could not check", "NOPERM")
		}
		one(t, r, "script", SeverityProblem, "(EVALSHA)", "NOPERM", "'evalsha'")
		if len(r.Problems()) != 1 {
			t.Errorf("problems %v, want the script's alone", r.Problems())
		}
	})
	t.Run("nozadd", func(t *testing.T) {
		r := runCheck(t, client(t, addr, "nozadd", "pw"))
		f := one(t, r, "acl", SeverityProblem, "user nozadd may not run what slidelog sends on slidelog:check: ZADD (", "'zadd'")
		if strings.Count(f.Text, "(") != 1 || len(r.Problems()) != 1 {
			t.Errorf("problems %v, want ZADD alone", r.Problems())
		}
	})
	t.Run("other keys", func(t *testing.T) {
		r := runCheck(t, client(t, addr, "other", "pw"))
		f := one(t, r, "acl", SeverityProblem, "user other may not run", "'slidelog:check' key")
		for _, c := range []string{"EVALSHA", "EVAL", "ZADD", "ZCARD", "ZRANGE", "ZCOUNT", "ZREMRANGEBYSCORE", "PEXPIREAT", "ZSCORE", "ZREM", "DEL"} {
			if !strings.Contains(f.Text, c+" (") {
				t.Errorf("%s is not named", c)
			}
		}
		if strings.Contains(f.Text, "TIME") {
			t.Errorf("TIME (no key) is named")
		}
	})
}

// infoField is a field of INFO.
func infoField(rdb *redis.Client, field string) string {
	for _, line := range strings.Split(rdb.Info(context.Background()).Val(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

func toAny(s []string) []any {
	a := make([]any, len(s))
	for i := range s {
		a[i] = s[i]
	}
	return a
}

// waitFor polls cond until it holds (a server's state that changes by
// itself, such as a replica's link); it fails the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after a minute", what)
		}
	}
}

// The replicas connected to a master are counted; a replica fails the
// check.
func TestCheckReplication(t *testing.T) {
	master := redistest.Start(t, redistest.Safe()...)
	host, port, _ := net.SplitHostPort(master)
	replica := redistest.Start(t, append(redistest.Safe(), "--replicaof", host, port)...)
	m := client(t, master)
	waitFor(t, "the replica's link", func() bool {
		return infoField(m, "connected_slaves") == "1"
	})
	one(t, runCheck(t, m), "replication", SeverityInfo, "role master, 1 replica connected")
	r := runCheck(t, client(t, replica))
	if r.OK() {
		t.Error("a replica is OK")
	}
	one(t, r, "replication", SeverityProblem, "role slave (of "+master+")", "connect to the master")
}

// On a Cluster, Check reads cluster_state; a Cluster node behind a plain
// client is a problem.
func TestCheckCluster(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Start(t, append(redistest.Safe(), "--cluster-enabled", "yes", "--cluster-announce-ip", "127.0.0.1")...)
	plain := client(t, addr)
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
	waitFor(t, "cluster_state ok", func() bool { return strings.Contains(plain.ClusterInfo(ctx).Val(), "cluster_state:ok") })
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, MaxRetries: -1})
	defer func() { _ = cc.Close() }()
	r = runCheck(t, cc)
	if !r.OK() {
		t.Errorf("problems %v", r.Problems())
	}
	one(t, r, "cluster", SeverityInfo, "cluster_state ok, 16384 slots assigned, 1 known nodes")
	one(t, r, "server", SeverityInfo, "(cluster)")
}

// A Ring is checked shard by shard, in the order of the addresses.
func TestCheckRing(t *testing.T) {
	safe := redistest.Start(t, redistest.Safe()...)
	evicting := redistest.Start(t, append(redistest.Safe(), "--maxmemory-policy", "allkeys-lru")...)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": safe, "b": evicting}, MaxRetries: -1})
	defer func() { _ = ring.Close() }()
	r := runCheck(t, ring)
	var servers []string
	for _, f := range r.Findings {
		if len(servers) == 0 || servers[len(servers)-1] != f.Server {
			servers = append(servers, f.Server)
		}
	}
	if want := []string{safe, evicting}; !slices.Equal(servers, want) && !slices.Equal(servers, []string{evicting, safe}) || !slices.IsSorted(servers) {
		t.Errorf("findings of %v, want %v in order", servers, want)
	}
	p := r.Problems()
	if len(p) != 1 || p[0].Server != evicting || p[0].Check != "maxmemory-policy" {
		t.Errorf("problems %v, want the evicting shard's policy", p)
	}
}

// A check that cannot be made is an error: a server that cannot be
// reached, a client that Check does not know.
func TestCheckErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	if _, err := New(client(t, dead)).Check(context.Background()); err == nil || !strings.Contains(err.Error(), "check "+dead) {
		t.Errorf("dead server: %v", err)
	}
	wrapped := struct{ redis.Scripter }{client(t, dead)}
	if _, err := New(wrapped).Check(context.Background()); err == nil || !strings.Contains(err.Error(), "cannot inspect a struct") {
		t.Errorf("unknown client: %v", err)
	}
}

// Findings read as one line, and in JSON with the severity's name.
func TestCheckFindingText(t *testing.T) {
	f := Finding{Severity: SeverityProblem, Check: "maxmemory-policy", Server: "h:1", Text: "maxmemory-policy allkeys-lru"}
	if got := f.String(); got != "problem: h:1: maxmemory-policy allkeys-lru" {
		t.Errorf("String %q", got)
	}
	b, err := json.Marshal(Report{Findings: []Finding{f}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"findings":[{"severity":"problem","check":"maxmemory-policy","server":"h:1","text":"maxmemory-policy allkeys-lru"}]}`
	if string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || !slices.Equal(back.Findings, []Finding{f}) {
		t.Errorf("round trip: %v, %v", back, err)
	}
	for s, name := range map[Severity]string{SeverityInfo: "info", SeverityWarning: "warning", SeverityProblem: "problem", 7: "Severity(7)"} {
		if s.String() != name {
			t.Errorf("%d: %q, want %q", int(s), s.String(), name)
		}
	}
	if _, err := Severity(7).MarshalText(); err == nil {
		t.Error("an invalid severity marshals")
	}
	if err := json.Unmarshal([]byte(`{"findings":[{"severity":"fatal"}]}`), &back); err == nil {
		t.Error(`"fatal" unmarshals`)
	}
	if fmt.Sprint(Report{}.OK()) != "true" {
		t.Error("an empty report is not OK")
	}
}

// A Sentinel failover client is checked on its master, named by its
// address; a client of the Sentinel itself is a problem.
func TestCheckSentinel(t *testing.T) {
	master := redistest.Start(t, redistest.Safe()...)
	sentinel := redistest.Sentinel(t, "main", master)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "main", SentinelAddrs: []string{sentinel}, MaxRetries: -1})
	defer func() { _ = fc.Close() }()
	r := runCheck(t, fc)
	if !r.OK() || len(r.Findings) == 0 {
		t.Errorf("problems %v", r.Problems())
	}
	for _, f := range r.Findings {
		if f.Server != master {
			t.Errorf("%v: server %q, want the master %s", f, f.Server, master)
		}
	}
	r = runCheck(t, client(t, sentinel))
	if len(r.Findings) != 1 {
		t.Errorf("findings %v, want the one problem", r.Findings)
	}
	one(t, r, "server", SeverityProblem, "is a Sentinel, not a data server", "redis.NewFailoverClient")
}

// serverAnswers is a go-redis hook that turns a real redis-server 7.0's
// answers into another server's, for the findings that depend on what the
// server says: it sees each command after the server answered. The
// integration suite runs the same checks on the real servers.
type serverAnswers func(cmd redis.Cmder)

func (serverAnswers) DialHook(next redis.DialHook) redis.DialHook { return next }

func (a serverAnswers) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// The client sets a command's error once the hooks have returned.
		if err := next(ctx, cmd); err != nil {
			cmd.SetErr(err)
		}
		a(cmd)
		return cmd.Err()
	}
}

func (serverAnswers) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// serverError is an error reply.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// isCmd reports whether cmd's arguments start with args (any case).
func isCmd(cmd redis.Cmder, args ...string) bool {
	if len(cmd.Args()) < len(args) {
		return false
	}
	for i, a := range args {
		if !strings.EqualFold(fmt.Sprint(cmd.Args()[i]), a) {
			return false
		}
	}
	return true
}

// asValkey8 gives INFO's answer the fields of Valkey 8.1: server_mode in
// place of redis_mode, valkey_version, redis_version 7.2.4.
var asValkey8 = serverAnswers(func(cmd redis.Cmder) {
	if c, ok := cmd.(*redis.StringCmd); ok && isCmd(cmd, "info") && cmd.Err() == nil {
		v := c.Val()
		v = regexp.MustCompile(`redis_version:[^\r\n]*`).ReplaceAllString(v, "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.1")
		c.SetVal(strings.ReplaceAll(v, "redis_mode:", "server_mode:"))
	}
})

// Valkey 8 names its mode server_mode (not redis_mode): the server finding
// says it, and a Valkey Sentinel is told for what it is.
func TestCheckValkeyMode(t *testing.T) {
	rdb := client(t, redistest.Start(t, redistest.Safe()...))
	rdb.AddHook(asValkey8)
	if !strings.Contains(rdb.Info(context.Background()).Val(), "server_mode:standalone") {
		t.Fatal("INFO not rewritten")
	}
	r := runCheck(t, rdb)
	if !r.OK() {
		t.Errorf("problems %v", r.Problems())
	}
	one(t, r, "server", SeverityInfo, "Valkey 8.1.1 (standalone)")

	sentinel := redistest.Sentinel(t, "main", redistest.Start(t, redistest.Safe()...))
	s := client(t, sentinel)
	s.AddHook(asValkey8)
	r = runCheck(t, s)
	if len(r.Findings) != 1 {
		t.Errorf("findings %v, want the one problem", r.Findings)
	}
	one(t, r, "server", SeverityProblem, "Valkey 8.1.1 is a Sentinel, not a data server")
}

// Redis 6.0 has no CLIENT INFO: a failover client's findings still name
// its master, by the address its dialer connects to.
func TestCheckSentinelBeforeClientInfo(t *testing.T) {
	master := redistest.Start(t, redistest.Safe()...)
	sentinel := redistest.Sentinel(t, "main", master)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "main", SentinelAddrs: []string{sentinel}, MaxRetries: -1})
	defer func() { _ = fc.Close() }()
	asked := false
	fc.AddHook(serverAnswers(func(cmd redis.Cmder) {
		if isCmd(cmd, "client", "info") {
			asked = true
			cmd.SetErr(serverError("ERR Unknown subcommand or wrong number of arguments for 'info'. Try CLIENT HELP"))
		}
	}))
	r := runCheck(t, fc)
	if !asked || !r.OK() || len(r.Findings) == 0 {
		t.Errorf("CLIENT INFO asked %v; problems %v", asked, r.Problems())
	}
	for _, f := range r.Findings {
		if f.Server != master {
			t.Errorf("%v: server %q, want the master %s", f, f.Server, master)
		}
	}
}

// On Redis 6, lua-replicate-commands no makes a script's writes after TIME
// fail ("Write commands not allowed after non deterministic commands"):
// a problem. Redis 7 has no such setting (CONFIG GET answers nothing).
func TestCheckLuaReplicateCommands(t *testing.T) {
	for _, c := range []struct {
		setting string // CONFIG GET lua-replicate-commands' answer; "": none
		sev     Severity
		want    string
	}{
		{"no", SeverityProblem, "EVALSHA, NOSCRIPT then EVAL, and TIME in a script work, but lua-replicate-commands is no: Redis 6 then refuses a script's writes after TIME (Write commands not allowed after non deterministic commands), and slidelog's scripts write after TIME: every admission fails; set lua-replicate-commands yes (the default)"},
		{"yes", SeverityInfo, "EVALSHA, NOSCRIPT then EVAL, and TIME in a script work"},
		{"", SeverityInfo, "EVALSHA, NOSCRIPT then EVAL, and TIME in a script work"},
	} {
		t.Run(c.setting, func(t *testing.T) {
			rdb := client(t, redistest.Start(t, redistest.Safe()...))
			rdb.AddHook(serverAnswers(func(cmd redis.Cmder) {
				switch {
				case isCmd(cmd, "info") && cmd.Err() == nil:
					s := cmd.(*redis.StringCmd)
					s.SetVal(regexp.MustCompile(`redis_version:[^\r\n]*`).ReplaceAllString(s.Val(), "redis_version:6.0.16"))
				case isCmd(cmd, "config", "get", "lua-replicate-commands") && c.setting != "":
					cmd.(*redis.MapStringStringCmd).SetVal(map[string]string{"lua-replicate-commands": c.setting})
				}
			}))
			r := runCheck(t, rdb)
			f := one(t, r, "script", c.sev)
			if f.Text != c.want {
				t.Errorf("script: %q, want %q", f.Text, c.want)
			}
			if r.OK() != (c.sev != SeverityProblem) || len(r.Problems()) > 1 {
				t.Errorf("problems %v", r.Problems())
			}
			one(t, r, "acl", SeverityWarning, "ACL DRYRUN needs Redis 7 or later")
		})
	}
}

// A replica in its first sync is connected but acknowledges no WAIT:
// WithReplicas counts only the replicas online. The master delays the
// replica's sync (repl-diskless-sync-delay) for the length of the test.
func TestCheckReplicaSyncing(t *testing.T) {
	master := redistest.Start(t, append(redistest.Safe(), "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "60")...)
	host, port, _ := net.SplitHostPort(master)
	redistest.Start(t, append(redistest.Safe(), "--replicaof", host, port)...)
	m := client(t, master)
	waitFor(t, "the replica's link", func() bool {
		return infoField(m, "connected_slaves") == "1"
	})
	if s := infoField(m, "slave0"); !strings.Contains(s, "state=wait_bgsave") {
		t.Fatalf("slave0:%s, want state=wait_bgsave", s)
	}
	const syncing = "; 1 of the 1 connected still in their first sync, acknowledging no write yet"
	f := one(t, runCheck(t, m), "replication", SeverityInfo)
	if want := "role master, 1 replica connected (replication is asynchronous: a failover may lose the last admissions)" + syncing; f.Text != want {
		t.Errorf("replication: %q, want %q", f.Text, want)
	}
	r, err := New(m, WithReplicas(1, time.Second)).Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f = one(t, r, "replication", SeverityProblem)
	if want := "role master, 0 of the 1 replicas WithReplicas waits for connected and online: every admission waits its timeout and fails with ErrNotReplicated; connect more replicas or lower WithReplicas' n" + syncing; f.Text != want {
		t.Errorf("replication: %q, want %q", f.Text, want)
	}
}
