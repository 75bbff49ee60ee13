package main

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/slidelog/slidelog/internal/redistest"
)

// fakeRedis starts a fake Redis (redistest.Fake) that answers the handshake
// (RESP2, after refusing HELLO) and the commands named in honest as a Redis
// would (PING only the first time, INFO with nothing, CONFIG with OK,
// SCRIPT LOAD with a hash), and everything else with a lie (redistest.Lie:
// a bulk length of 2^63-1, on which go-redis panics in the goroutine that
// reads it).
func fakeRedis(t *testing.T, honest ...string) string {
	t.Helper()
	var pings atomic.Int64
	return redistest.Fake(t, func(cmd []string) string {
		reply := redistest.Lie
		name := strings.ToUpper(cmd[0])
		if !slices.Contains(honest, name) && name != "HELLO" && name != "CLIENT" {
			name = ""
		}
		switch name {
		case "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case "CLIENT", "CONFIG":
			reply = "+OK\r\n"
		case "INFO":
			reply = "$0\r\n\r\n"
		case "SCRIPT":
			reply = "$40\r\n" + strings.Repeat("0", 40) + "\r\n"
		case "PING":
			if pings.Add(1) == 1 {
				reply = "+PONG\r\n"
			}
		}
		return reply
	})
}

// A reply that makes go-redis panic, in a goroutine of the CLI's own
// (bench's callers) or in the command's (inspect's read), is one line on
// standard error and exit 1: never a crash with a stack trace and exit 2
// (the code for "called wrongly"). (demo's watcher reads a lie as an
// error, not a panic: go-redis wants an array there; its callers decide
// through the library, whose goroutines are the library's to guard.)
func TestRedisPanicIsAnError(t *testing.T) {
	for _, c := range []struct {
		args, honest []string
	}{
		{[]string{"bench", "--variants", "ping", "--rounds", "1", "--duration", "50ms", "--concurrency", "4", "--keys", "1"},
			[]string{"PING", "INFO", "CONFIG", "SCRIPT"}},
		{[]string{"inspect", "k"}, nil},
		{[]string{"check"}, nil},
		{[]string{"demo", "--duration", "1s"}, nil},
		{[]string{"demo", "--duration", "1s", "--instances", "1", "--workers", "1"}, []string{"PING"}},
	} {
		t.Run(c.args[0], func(t *testing.T) {
			args := append(c.args, "--redis", fakeRedis(t, c.honest...))
			code, out, errs := runMain(t, args...)
			if code != 1 || strings.Count(errs, "\n") != 1 || strings.Contains(errs, "goroutine") {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 1 and one line", args, code, out, errs)
			}
		})
	}
}
