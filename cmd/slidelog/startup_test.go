package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// runMain runs the command in a process of its own (this test binary, as
// main), for what must not take the test down with it (a panic) or must be
// seen as the process' exit code.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	// The bound only keeps a command that would serve from hanging the test.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SLIDELOG_TEST_RUN_MAIN=1")
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	return code, out.String(), errs.String()
}

// runLive runs the CLI in this process with a context that lives on.
func runLive(args ...string) (code int, stdout, stderr string) {
	var out, errs syncBuffer
	code = run(context.Background(), args, &out, &errs)
	return code, out.String(), errs.String()
}

// Flags may follow the positional argument, and "--" ends the flags, so
// that a key may begin with "-".
func TestFlagsAfterArguments(t *testing.T) {
	mr := miniredis.RunT(t)
	url := "redis://" + mr.Addr()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "k", "--redis", url}, "key slidelog:k "},
		{[]string{"inspect", "--prefix", "p:", "k", "--redis", url, "--events", "2"}, "key p:k "},
		{[]string{"inspect", "--redis", url, "--", "-k"}, "key slidelog:-k "},
		{[]string{"inspect", "--redis", url, "k", "--", "--events"}, `want one KEY`},
	} {
		code, out, errs := runLive(c.args...)
		if !strings.Contains(out+errs, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %q", c.args, code, out, errs, c.want)
		}
	}
	// A stray argument is still refused, wherever it stands.
	for _, args := range [][]string{
		{"inspect", "a", "--redis", url, "b"},
		{"check", "--redis", url, "extra"},
		{"serve", "extra", "--listen", "127.0.0.1:0"},
	} {
		if code, _, errs := runDone(args...); code != 2 || strings.Count(errs, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and one line", args, code, errs)
		}
	}
}

// demo says Redis is unreachable before its banner, and fails.
func TestDemoUnreachableBeforeBanner(t *testing.T) {
	code, out, errs := runLive("demo", "--redis", deadAddr(t), "--duration", "1s")
	if code != 1 || out != "" || !strings.Contains(errs, "unreachable") || !strings.Contains(errs, "connection refused") ||
		strings.Count(errs, "\n") != 1 {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1, no banner, and one line saying Redis is unreachable", code, out, errs)
	}
}

// A flag value that cannot work is refused at start-up (exit 2, one line
// naming the flag), never per request, and never with a panic.
func TestBadValuesAtStartUp(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	mr := miniredis.RunT(t)
	url := "redis://" + mr.Addr()
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"serve", "--listen", "127.0.0.1:0", "--key", "header:X Bad"}, "--key"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--key", "header:X-Key:"}, "--key"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--key", "header:Ключ"}, "--key"},
		{[]string{"inspect", "--redis", url, "--prefix", "{x", "k"}, "--prefix"},
		{[]string{"inspect", "--redis", url, "--prefix", "{x", "--events", "2", "k"}, "--prefix"},
		{[]string{"inspect", "--redis", url, ""}, "KEY"},
		{[]string{"check", "--redis", url, "--prefix", "svc{}:"}, "--prefix"},
		{[]string{"bench", "--redis", url, "--window", "1500us"}, "--window"},
	} {
		// serve in this process, with a done context (it would serve on);
		// the others in a process of their own (a panic would end the test).
		var code int
		var out, errs string
		if c.args[0] == "serve" {
			code, out, errs = runDone(c.args...)
		} else {
			code, out, errs = runMain(t, c.args...)
		}
		if code != 2 || !strings.Contains(errs, c.flag) || strings.Count(errs, "\n") != 1 || strings.Contains(errs, "goroutine") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and one line naming %s", c.args, code, out, errs, c.flag)
		}
	}
}

// buildBinary builds the command into a directory of t's, with go build as
// a user would (VCS stamping on, whatever GOFLAGS says), and returns its
// path.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "slidelog")
	cmd := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
