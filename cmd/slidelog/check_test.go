package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	redischeck "github.com/slidelog/slidelog/check"
	"github.com/slidelog/slidelog/internal/redistest"
)

// check runs slidelog check with args.
func check(args ...string) (code int, stdout, stderr string) {
	var out, errs syncBuffer
	code = run(context.Background(), append([]string{"check"}, args...), &out, &errs)
	return code, out.String(), errs.String()
}

// logLines returns the lines of a log that hold s.
func logLines(log, s string) []string {
	var ls []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			ls = append(ls, l)
		}
	}
	return ls
}

// lines returns the lines of out that start with prefix.
func lines(out, prefix string) []string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			ls = append(ls, l)
		}
	}
	return ls
}

// A safe Redis: exit 0, a line per finding, none a problem or a warning.
func TestCheckSafe(t *testing.T) {
	addr := redistest.Start(t, redistest.Safe()...)
	code, out, errs := check("--redis", addr)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q\n%s", code, errs, out)
	}
	if n := len(lines(out, "info: "+addr+": ")); n != 6 || len(lines(out, "")) != 8 || !strings.HasSuffix(out, "\nok: no problem found\n") {
		t.Errorf("%d info lines, want 6 and the verdict:\n%s", n, out)
	}
}

// An evicting Redis: exit 1, one line per problem on standard output,
// warnings marked, the verdict in one line on standard error.
func TestCheckEvicting(t *testing.T) {
	addr := redistest.Start(t, "--maxmemory-policy", "volatile-ttl", "--maxmemory", "100mb")
	t.Setenv("REDIS_URL", "redis://"+addr)
	code, out, errs := check()
	if code != 1 || errs != "slidelog check: 1 problem: this Redis may lose slidelog's events, or cannot run slidelog\n" {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
	p := lines(out, "problem: ")
	if len(p) != 1 || !strings.HasPrefix(p[0], "problem: "+addr+": maxmemory-policy volatile-ttl can evict slidelog's logs") {
		t.Errorf("problems %q, want the policy's:\n%s", p, out)
	}
	if w := lines(out, "warning: "); len(w) != 1 || !strings.Contains(w[0], "no persistence") {
		t.Errorf("warnings %q, want persistence's:\n%s", w, out)
	}
}

// --json against a Redis that cannot be reached: still a JSON report, ok
// false and the error, exit 1 (was no JSON at all: one line on stderr).
func TestCheckJSONUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	code, out, _ := check("--json", "--redis", "redis://"+addr)
	var report struct {
		OK       *bool             `json:"ok"`
		Findings []json.RawMessage `json:"findings"`
		Error    string            `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil || code != 1 || report.OK == nil || *report.OK ||
		report.Findings == nil || !strings.Contains(report.Error, addr) {
		t.Fatalf("exit %d, %v, stdout:\n%s", code, err, out)
	}
}

// --json: {"ok", "findings": [{"severity", "check", "server", "text"}]},
// and the same exit codes.
func TestCheckJSON(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{{redistest.Safe(), 0}, {[]string{"--maxmemory-policy", "allkeys-lru"}, 1}} {
		addr := redistest.Start(t, c.args...)
		code, out, _ := check("--json", "--redis", "redis://"+addr)
		var raw struct {
			OK       *bool
			Findings []map[string]any
		}
		if err := json.Unmarshal([]byte(out), &raw); err != nil || raw.OK == nil || code != c.code || *raw.OK != (code == 0) {
			t.Fatalf("%v: exit %d, %v, stdout:\n%s", c.args, code, err, out)
		}
		var problems []string
		for _, f := range raw.Findings {
			if len(f) != 4 || f["server"] != addr || f["check"] == "" || f["text"] == "" {
				t.Errorf("finding %v", f)
			}
			switch f["severity"] {
			case "problem":
				problems = append(problems, f["check"].(string))
			case "info", "warning":
			default:
				t.Errorf("severity %v", f["severity"])
			}
		}
		if want := map[int]string{0: "[]", 1: "[maxmemory-policy]"}[c.code]; strings.Join(strings.Fields("["+strings.Join(problems, " ")+"]"), " ") != want {
			t.Errorf("%v: problems %v, want %s", c.args, problems, want)
		}
	}
}

// check needs a Redis: no embedded one, and one that cannot be reached is
// one error line.
func TestCheckUsage(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	if code, out, errs := check(); code != 2 || out != "" || !strings.Contains(errs, "--redis (or REDIS_URL) is required") || strings.Count(errs, "\n") != 1 {
		t.Errorf("no Redis: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, errs := check("--redis", deadAddr(t)); code != 1 || out != "" || !strings.Contains(errs, "connection refused") || strings.Count(errs, "\n") != 1 {
		t.Errorf("dead Redis: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := check("--redis", deadAddr(t), "--prefix", "svc{}:"); code != 2 || !strings.Contains(errs, "--prefix") {
		t.Errorf("bad prefix: exit %d, stderr %q", code, errs)
	}
	if code, out, _ := check("--help"); code != 0 || !strings.HasPrefix(out, "usage: slidelog check") {
		t.Errorf("--help: exit %d, stdout %q", code, out)
	}
}

// A Cluster node: every master is checked through a Cluster client.
func TestCheckClusterNode(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Start(t, append(redistest.Safe(), "--cluster-enabled", "yes", "--cluster-announce-ip", "127.0.0.1")...)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()
	slots := []any{"CLUSTER", "ADDSLOTS"}
	for i := range 16384 {
		slots = append(slots, i)
	}
	if err := rdb.Do(ctx, slots...).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(rdb.ClusterInfo(ctx).Val(), "cluster_state:ok"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no cluster_state ok after a minute")
		}
	}
	code, out, errs := check("--redis", addr)
	if code != 0 || len(lines(out, "info: "+addr+": cluster_state ok")) != 1 {
		t.Errorf("exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
}

// serve checks a real Redis at start-up and logs the findings, problems
// at WARN, and starts anyway; it does not check its embedded Redis.
func TestServeChecksRedis(t *testing.T) {
	cfg := serveConfig{key: "ip", policy: "closed", name: "x", ipHeader: "X-Forwarded-For",
		limit: slidelog.PerMinute(5), instances: 1, deadline: time.Second}
	var log syncBuffer
	h, stop, err := serveHandler(cfg, "redis://"+redistest.Start(t, "--maxmemory-policy", "allkeys-lru"), &log)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if h == nil || len(logLines(log.String(), "level=WARN msg=\"redis check\" severity=problem check=maxmemory-policy")) != 1 ||
		len(logLines(log.String(), "level=WARN msg=\"redis check\" severity=warning check=persistence")) != 1 ||
		len(logLines(log.String(), "level=INFO msg=\"redis check\" severity=info check=script")) != 1 {
		t.Errorf("log:\n%s", log.String())
	}

	var dead syncBuffer
	if _, stop, err := serveHandler(cfg, "redis://"+deadAddr(t), &dead); err != nil {
		t.Fatal(err)
	} else {
		stop()
	}
	if len(logLines(dead.String(), "level=WARN msg=\"redis check failed\"")) != 1 || !strings.Contains(dead.String(), "connection refused") {
		t.Errorf("dead Redis, log:\n%s", dead.String())
	}

	var embedded syncBuffer
	t.Setenv("REDIS_URL", "")
	if _, stop, err := serveHandler(cfg, "", &embedded); err != nil {
		t.Fatal(err)
	} else {
		stop()
	}
	if strings.Contains(embedded.String(), "redis check") {
		t.Errorf("embedded Redis checked:\n%s", embedded.String())
	}
}

// miniredis (which tests may hand to serve) answers the check without an
// error: what it does not implement is a warning.
func TestCheckMiniredis(t *testing.T) {
	code, out, errs := check("--redis", miniredis.RunT(t).Addr())
	if code != 0 || errs != "" || len(lines(out, "info: ")) != 1 || len(lines(out, "warning: ")) != 5 ||
		!strings.HasSuffix(out, "\nok: no problem found, 5 warnings\n") {
		t.Errorf("exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
}

// --replicas N checks what WithReplicas(N, ...) needs: a master with one
// replica online passes with 1 and fails with 2, naming both counts; a
// bad value is one line, exit 2.
func TestCheckReplicas(t *testing.T) {
	ctx := context.Background()
	master := redistest.Start(t, append(redistest.Safe(), "--repl-diskless-sync-delay", "0")...)
	host, port, _ := strings.Cut(master, ":")
	redistest.Start(t, append(redistest.Safe(), "--replicaof", host, port)...)
	rdb := redis.NewClient(&redis.Options{Addr: master})
	defer func() { _ = rdb.Close() }()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(rdb.Info(ctx, "replication").Val(), "state=online"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no replica online after a minute")
		}
	}

	code, out, errs := check("--redis", master, "--replicas", "1")
	if want := "info: " + master + ": role master, 1 replica connected; WithReplicas: an admission waits until 1 of them have it"; code != 0 || errs != "" ||
		len(lines(out, want)) != 1 || !strings.HasSuffix(out, "\nok: no problem found\n") {
		t.Errorf("--replicas 1: exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
	code, out, errs = check("--redis", master, "--replicas", "2")
	p := lines(out, "problem: ")
	if want := "problem: " + master + ": role master, 1 of the 2 replicas WithReplicas waits for connected and online: every admission waits its timeout and fails with ErrNotReplicated"; code != 1 ||
		errs != "slidelog check: 1 problem: this Redis may lose slidelog's events, or cannot run slidelog\n" || len(p) != 1 || !strings.HasPrefix(p[0], want) {
		t.Errorf("--replicas 2: exit %d, stderr %q, problems %q, stdout:\n%s", code, errs, p, out)
	}
	// Without --replicas, the replica is counted and nothing is required.
	if code, out, _ := check("--redis", master); code != 0 || len(lines(out, "info: "+master+": role master, 1 replica connected (replication is asynchronous")) != 1 {
		t.Errorf("no --replicas: exit %d, stdout:\n%s", code, out)
	}
	// --json: the same problem.
	code, out, _ = check("--json", "--redis", master, "--replicas", "2")
	var report struct {
		OK       bool                 `json:"ok"`
		Findings []redischeck.Finding `json:"findings"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil || code != 1 || report.OK {
		t.Fatalf("--json --replicas 2: exit %d, %v, stdout:\n%s", code, err, out)
	}
	if p := (redischeck.Report{Findings: report.Findings}).Problems(); len(p) != 1 || p[0].Check != "replication" || !strings.Contains(p[0].Text, "1 of the 2 replicas") {
		t.Errorf("--json --replicas 2: problems %v", p)
	}

	for _, bad := range []string{"-1", "two", "1.5", "99999999999999999999"} {
		code, out, errs := check("--redis", master, "--replicas", bad)
		if code != 2 || out != "" || !strings.Contains(errs, "replicas") || strings.Count(errs, "\n") != 1 {
			t.Errorf("--replicas %s: exit %d, stdout %q, stderr %q", bad, code, out, errs)
		}
	}
	if _, _, errs := check("--redis", master, "--replicas", "-1"); !strings.Contains(errs, "--replicas -1: want the replicas each admission waits for (WithReplicas' n, 1 or more), or 0 for none") {
		t.Errorf("--replicas -1: stderr %q", errs)
	}
}
