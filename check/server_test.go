package check

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/redistest"
)

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
			r := runCheck(t, redistest.Client(t, redistest.Start(t, append(redistest.Safe(), c.args...)...)))
			if r.OK() || len(r.Problems()) != 1 {
				t.Errorf("OK %v with problems %v, want 1 problem", r.OK(), r.Problems())
			}
			one(t, r, "maxmemory-policy", SeverityProblem, "maxmemory-policy "+c.args[1]+" can evict", "silently restarts", c.want)
		})
	}
	// The other policies, set on a running server.
	rdb := redistest.Client(t, redistest.Start(t, redistest.Safe()...))
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
	rdb := redistest.Client(t, redistest.Start(t, "--save", ""))
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
	r = runCheck(t, redistest.Client(t, sentinel))
	if len(r.Findings) != 1 {
		t.Errorf("findings %v, want the one problem", r.Findings)
	}
	one(t, r, "server", SeverityProblem, "is a Sentinel, not a data server", "redis.NewFailoverClient")
}

// Valkey 8 names its mode server_mode (not redis_mode): the server finding
// says it, and a Valkey Sentinel is told for what it is.
func TestCheckValkeyMode(t *testing.T) {
	rdb := redistest.Client(t, redistest.Start(t, redistest.Safe()...))
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
	s := redistest.Client(t, sentinel)
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
