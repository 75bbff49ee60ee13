package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
)

// TestMain runs the command itself when asked to, so that a test can see
// everything it writes to its real standard error.
func TestMain(m *testing.M) {
	if os.Getenv("SLIDELOG_TEST_RUN_MAIN") == "1" {
		main()
	}
	redistest.Quiet()
	os.Exit(m.Run())
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// runDone runs the CLI with a context that is already done: a command that
// would serve returns at once.
func runDone(args ...string) (code int, stdout, stderr string) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errs bytes.Buffer
	code = run(ctx, args, &out, &errs)
	return code, out.String(), errs.String()
}

// --help, -h and help print the usage to standard output and exit 0, for
// slidelog and for every command (version too); no arguments at all is a
// usage error. The usage lists every command, its summary in one column.
func TestHelpOnStdout(t *testing.T) {
	all := [][]string{{"--help"}, {"-h"}, {"help"}, {"version", "--help"}, {"version", "-h"}}
	for _, c := range commands {
		all = append(all, []string{c.name, "--help"}, []string{c.name, "-h"})
	}
	for _, args := range all {
		code, out, errs := runDone(args...)
		if code != 0 || !strings.Contains(out, "usage: slidelog") || errs != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 0 and the usage on stdout alone", args, code, out, errs)
		}
	}
	if code, out, errs := runDone(); code != 2 || out != "" || !strings.Contains(errs, "usage: slidelog COMMAND") {
		t.Errorf("no arguments: exit %d, stdout %q, stderr %q; want exit 2 and the usage on stderr", code, out, errs)
	}
	_, out, _ := runDone("--help")
	column := -1
	for _, line := range strings.Split(out, "\n") {
		name, summary, found := strings.Cut(strings.TrimPrefix(line, "  "), " ")
		if !strings.HasPrefix(line, "  ") || !found {
			continue
		}
		at := len(line) - len(strings.TrimLeft(summary, " "))
		if column >= 0 && at != column {
			t.Errorf("usage: %s's summary starts at column %d, the others' at %d:\n%s", name, at, column, out)
		}
		column = at
	}
	if code, _, errs := runDone("version", "x"); code != 2 || !strings.Contains(errs, "unexpected arguments") {
		t.Errorf("version x: exit %d, stderr %q; want a usage error", code, errs)
	}
}

// Every synopsis names every flag of its command, each one optional.
func TestSynopsisMatchesFlags(t *testing.T) {
	for _, c := range commands {
		_, out, _ := runDone(c.name, "--help")
		synopsis, _, _ := strings.Cut(out, "\n\n")
		var inSynopsis []string
		depth := 0
		for _, f := range regexp.MustCompile(`\[|\]|--[a-z-]+`).FindAllString(synopsis, -1) {
			switch f {
			case "[":
				depth++
			case "]":
				depth--
			default:
				if depth == 0 {
					t.Errorf("%s: %s is shown as required; every flag has a default", c.name, f)
				}
				inSynopsis = append(inSynopsis, f)
			}
		}
		var defined []string
		for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(out, -1) {
			defined = append(defined, "--"+m[1])
		}
		if len(defined) == 0 || fmt.Sprint(sorted(inSynopsis)) != fmt.Sprint(sorted(defined)) {
			t.Errorf("%s: synopsis has %v, flags are %v:\n%s", c.name, sorted(inSynopsis), sorted(defined), out)
		}
	}
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// A variable that does not parse is an error naming it, in one line, not
// a silent default; a flag given on the command line overrides it.
func TestServeBadEnvironment(t *testing.T) {
	for _, c := range []struct{ name, value string }{
		{"SLIDELOG_EVENTS", "abc"},
		{"SLIDELOG_WINDOW", "5 minutes"},
		{"SLIDELOG_INSTANCES", "two"},
		{"SLIDELOG_DEADLINE", "soon"},
		{"SLIDELOG_LEGACY_HEADERS", "please"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			code, _, errs := runDone("serve", "--listen", "127.0.0.1:0")
			if code != 2 || !strings.Contains(errs, c.name) || strings.Count(errs, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want exit 2 and one line naming %s", code, errs, c.name)
			}
		})
	}
	t.Setenv("SLIDELOG_EVENTS", "abc")
	if code, _, errs := runDone("serve", "--listen", "127.0.0.1:0", "--events", "3"); code != 0 {
		t.Errorf("--events given: exit %d, %s", code, errs)
	}
}

// Bad flag values are refused in one line that names the flag.
func TestBadFlagValues(t *testing.T) {
	mr := miniredis.RunT(t)
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"serve", "--listen", "127.0.0.1:0", "--events", "abc"}, "-events"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--window", "5 minutes"}, "-window"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--name", "tab\there"}, "--name"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--name", "grüße"}, "--name"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--deadline", "-1s"}, "--deadline"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--policy", "local", "--instances", "0"}, "--instances"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--events", "0"}, "--events"},
		{[]string{"inspect", "--redis", "redis://" + mr.Addr(), "--events", "0", "k"}, "--events"},
		{[]string{"inspect", "--redis", "redis://" + mr.Addr(), "--events", "-2", "k"}, "--events"},
		{[]string{"inspect", "--redis", "redis://" + mr.Addr(), "--window", "0s", "--events", "2", "k"}, "--window"},
		{[]string{"demo", "--load", "0"}, "--load"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--key", "foo"}, "--key"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--policy", "bogus"}, "--policy"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--trusted-proxies", "nonsense"}, "--trusted-proxies"},
	} {
		code, _, errs := runDone(c.args...)
		if code != 2 || !strings.Contains(errs, c.flag) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and an error in one line naming %s", c.args, code, errs, c.flag)
		}
	}
}

// --redis without a scheme is host:port.
func TestRedisWithoutScheme(t *testing.T) {
	mr := miniredis.RunT(t)
	var out, errs bytes.Buffer
	code := run(context.Background(), []string{"inspect", "--redis", mr.Addr(), "k"}, &out, &errs)
	if code != 0 || !strings.Contains(out.String(), "key slidelog:k") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out.String(), errs.String())
	}
}

// A Redis that cannot be reached is one line on standard error, with its
// cause, and nothing of go-redis' own logging.
func TestOneErrorLine(t *testing.T) {
	cmd := exec.Command(os.Args[0], "inspect", "--redis", "redis://"+deadAddr(t), "k")
	cmd.Env = append(os.Environ(), "SLIDELOG_TEST_RUN_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err == nil || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "connection refused") {
		t.Errorf("%v, stderr:\n%s\nwant one line with the cause", err, stderr.String())
	}
}

// serve on its embedded Redis says so, and that the limit is then this
// process's alone.
func TestServeSaysEmbedded(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	code, out, errs := runDone("serve", "--listen", "127.0.0.1:0")
	if code != 0 || !strings.Contains(out+errs, "embedded Redis") || !strings.Contains(out+errs, "this process") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// bench refuses an unknown variant before it connects to anything.
func TestBenchRefusesUnknownVariant(t *testing.T) {
	code, _, errs := runDone("bench", "--variants", "slidelog,foo", "--redis", "redis://"+deadAddr(t))
	if code == 0 || !strings.Contains(errs, `unknown variant "foo"`) || strings.Contains(errs, "refused") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

// Behind a trusted proxy that appends X-Forwarded-For, a client's own
// Forwarded header does not choose its key: 5 requests under 1 per minute,
// 1 admitted.
func TestServeClientCannotChooseItsKey(t *testing.T) {
	h, stop, err := serveHandler(serveConfig{key: "ip", trusted: "10.0.0.0/8", policy: "closed", name: "x", instances: 1,
		limit: slidelog.PerMinute(1), deadline: time.Minute}, "redis://"+miniredis.RunT(t).Addr(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var codes []int
	for i := range 5 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:4711"
		r.Header.Set("Forwarded", fmt.Sprintf("for=198.51.100.%d", i+1))
		r.Header.Set("X-Forwarded-For", "203.0.113.7")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	if fmt.Sprint(codes) != "[200 429 429 429 429]" {
		t.Errorf("codes %v, want 1 admitted", codes)
	}
}

// syncBuffer is a bytes.Buffer safe to write from the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Redis failures are logged with their cause, at most one line a second
// (by the log's clock) with the count of those left out.
func TestServeLogsRedisFailures(t *testing.T) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var log syncBuffer
	h, stop, err := serveHandler(serveConfig{key: "ip", policy: "closed", name: "x", ipHeader: "X-Forwarded-For",
		limit: slidelog.PerMinute(5), instances: 1, deadline: 100 * time.Millisecond, now: func() time.Time { return clock }},
		"redis://"+deadAddr(t), &log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	send := func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 503 {
			t.Errorf("%d, want 503", w.Code)
		}
	}
	failures := func() []string {
		var lines []string
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.Contains(l, "rate limiter failed") {
				lines = append(lines, l)
			}
		}
		return lines
	}
	for range 5 {
		send()
	}
	lines := failures()
	if len(lines) != 1 || !strings.Contains(lines[0], "connection refused") || !strings.Contains(lines[0], "answer=503") {
		t.Fatalf("after 5 failures in one second, want 1 line with the cause:\n%s", log.String())
	}
	clock = clock.Add(time.Second)
	send()
	if lines = failures(); len(lines) != 2 || !strings.Contains(lines[1], "failures_not_logged=4") {
		t.Errorf("a second later, want a line counting the 4 left out:\n%s", log.String())
	}
}
