package check

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/redistest"
)

// The tests of Run run real redis-servers, each started with the
// configuration it tests (internal/redistest).

// runCheck runs Run on rdb, with opts (none: the defaults); an error fails
// the test.
func runCheck(t *testing.T, rdb redis.Scripter, opts ...Options) Report {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	r, err := Run(context.Background(), rdb, o)
	if err != nil {
		t.Fatalf("Run: %v", err)
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

// A safe server passes, with a finding for every check and no warning;
// the check writes no key.
func TestCheckSafeServer(t *testing.T) {
	addr := redistest.Start(t, redistest.Safe()...)
	rdb := redistest.Client(t, addr)
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
	version := redistest.Info(rdb, "redis_version")
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

func toAny(s []string) []any {
	a := make([]any, len(s))
	for i := range s {
		a[i] = s[i]
	}
	return a
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
// reached, a client that Run does not know, a negative Options.Replicas.
func TestCheckErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	ctx := context.Background()
	if _, err := Run(ctx, redistest.Client(t, dead), Options{}); err == nil || !strings.Contains(err.Error(), "slidelog: check "+dead+": ") {
		t.Errorf("dead server: %v", err)
	}
	wrapped := struct{ redis.Scripter }{redistest.Client(t, dead)}
	if _, err := Run(ctx, wrapped, Options{}); err == nil || !strings.Contains(err.Error(), "cannot inspect a struct") {
		t.Errorf("unknown client: %v", err)
	}
	if _, err := Run(ctx, redistest.Client(t, dead), Options{Replicas: -1}); err == nil || !strings.Contains(err.Error(), "Options.Replicas -1") {
		t.Errorf("Replicas -1: %v", err)
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
