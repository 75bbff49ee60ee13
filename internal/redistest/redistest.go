// Package redistest gives the tests of every module of slidelog their real
// redis-servers (internal/redisserver's), under one rule: a missing
// redis-server fails the test, because the real-server tests are what
// catch the places where miniredis and Redis differ, so they never skip
// silently; SLIDELOG_SKIP_REAL_REDIS=1 skips them on purpose. It also
// gives them a fake server (Fake) that answers what each test chooses,
// lies included, for the replies no real Redis sends.
//
// Only tests import it (it imports testing); the bench command starts its
// servers with internal/redisserver directly.
package redistest

import (
	"context"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/redisserver"
)

// Quiet silences go-redis' package logger for the rest of the process. Its
// connection pool logs every dial that failed ("failed to dial after 5
// attempts: ... connection refused"), dozens of lines a second while a
// server a test stopped, paused or killed is down, and they bury the one
// line of a test's failure; what a test needs of a failed call is the
// error go-redis returns. Call it first in the package's TestMain.
func Quiet() { redis.SetLogger(discard{}) }

type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}

// Skip skips t if SLIDELOG_SKIP_REAL_REDIS=1: for a test that starts its
// servers itself (the bench command's).
func Skip(t testing.TB) {
	t.Helper()
	if os.Getenv("SLIDELOG_SKIP_REAL_REDIS") == "1" {
		t.Skip("SLIDELOG_SKIP_REAL_REDIS=1: real redis-server tests skipped on request")
	}
}

// Safe returns the arguments of a server that keeps events safely, as
// slidelog check wants it: noeviction, and an AOF written on every write.
func Safe() []string {
	return []string{"--maxmemory-policy", "noeviction", "--appendonly", "yes", "--appendfsync", "always"}
}

// Start starts a redis-server for t alone, with args after the defaults (no
// persistence, log level warning; a later argument wins), in a directory of
// its own, stopped when t ends. It returns the server's address.
func Start(t testing.TB, args ...string) string {
	t.Helper()
	addr, _ := StartProcess(t, args...)
	return addr
}

// StartProcess is Start that also returns the server's process id, for a
// test that stops and resumes it (SIGSTOP, SIGCONT). The process is
// resumed before it is stopped at t's end.
func StartProcess(t testing.TB, args ...string) (addr string, pid int) {
	t.Helper()
	Skip(t)
	addr, pid, stop, err := redisserver.StartProcess(append([]string{"--loglevel", "warning"}, args...)...)
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		stop()
	})
	return addr, pid
}

// Sentinel starts a Redis Sentinel that monitors the master at masterAddr
// under the name master (quorum 1), stopped when t ends, and returns its
// address.
func Sentinel(t testing.TB, master, masterAddr string) string {
	t.Helper()
	Skip(t)
	addr, stop, err := redisserver.StartSentinel(master, masterAddr)
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(stop)
	return addr
}

// Gone returns the address of a redis-server that was there and is gone:
// a connection to it is refused.
func Gone(t testing.TB) string {
	t.Helper()
	Skip(t)
	addr, stop, err := redisserver.Start()
	if err != nil {
		fail(t, err)
	}
	stop()
	return addr
}

// Shared is a redis-server that the tests of one package share, started on
// a free loopback port the first time a test asks for it. Stop it in the
// package's TestMain.
type Shared struct {
	once sync.Once
	addr string
	stop func()
	err  error
}

// Addr returns the shared server's address, starting it the first time.
func (s *Shared) Addr(t testing.TB) string {
	t.Helper()
	Skip(t)
	s.once.Do(func() { s.addr, s.stop, s.err = redisserver.Start() })
	if s.err != nil {
		fail(t, s.err)
	}
	return s.addr
}

// Stop stops the shared server, if a test started it.
func (s *Shared) Stop() {
	if s.stop != nil {
		s.stop()
	}
}

func fail(t testing.TB, err error) {
	t.Helper()
	t.Fatalf("real redis-server: %v (install Debian's redis-server, or set SLIDELOG_SKIP_REAL_REDIS=1)", err)
}
