package redistest

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is a client of the server at addr (ContextTimeoutEnabled, no
// retries), with the user and password in user if given; t closes it.
func Client(t testing.TB, addr string, user ...string) *redis.Client {
	opts := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1}
	if len(user) == 2 {
		opts.Username, opts.Password = user[0], user[1]
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// DialOnce has opts' client dial once a call, where go-redis has a field
// for it (DialerRetries: newer versions try a refused dial 5 times, 100 ms
// apart; the oldest go-redis slidelog supports has no such field and dials
// once). A test of a server that is down waits for no backoff. It returns
// opts.
func DialOnce(opts *redis.Options) *redis.Options {
	if f := reflect.ValueOf(opts).Elem().FieldByName("DialerRetries"); f.IsValid() && f.CanSet() {
		f.SetInt(1)
	}
	return opts
}

// Info is a field of the server's INFO ("" if it has none).
func Info(rdb *redis.Client, field string) string {
	for _, line := range strings.Split(rdb.Info(context.Background()).Val(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// CommandStat is a field of a command's INFO commandstats line (calls,
// usec: the µs Redis has spent in it so far); false if it has none.
func CommandStat(rdb *redis.Client, cmd, field string) (int64, bool) {
	for _, line := range strings.Split(rdb.Info(context.Background(), "commandstats").Val(), "\n") {
		stats, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// WaitFor polls cond until it holds (a server's state that changes by
// itself, such as a replica's link); it fails t after a minute.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after a minute", what)
		}
	}
}

// Handshake answers the commands go-redis sends on a new connection as a
// Redis 6 without RESP3 would (HELLO refused, CLIENT and SELECT accepted,
// PING answered), for a Fake's reply func; ok is false for any other
// command.
func Handshake(cmd []string) (reply string, ok bool) {
	switch strings.ToUpper(cmd[0]) {
	case "HELLO":
		return "-ERR unknown command 'HELLO'\r\n", true
	case "CLIENT", "SELECT":
		return "+OK\r\n", true
	case "PING":
		return "+PONG\r\n", true
	}
	return "", false
}

// Liar is a Fake that lies as a broken proxy might: it answers the
// handshake, then every command with Lie, which makes go-redis panic
// (makeslice) in the goroutine that reads it; while Honest is set, the
// commands honest answers (when it returns ok) get its reply instead.
type Liar struct {
	Addr   string
	Honest atomic.Bool
	Lies   atomic.Int64
}

// NewLiar starts a Liar for t alone; honest may be nil.
func NewLiar(t testing.TB, honest func(cmd []string) (reply string, ok bool)) *Liar {
	s := &Liar{}
	s.Addr = Fake(t, func(cmd []string) string {
		if r, ok := Handshake(cmd); ok && strings.ToUpper(cmd[0]) != "PING" {
			return r
		}
		if s.Honest.Load() && honest != nil {
			if r, ok := honest(cmd); ok {
				return r
			}
		}
		s.Lies.Add(1)
		return Lie
	})
	return s
}

// LateTimer is a context whose deadline is d from now but whose timer does
// not run: Err stays nil and Done never closes, as for a real context on a
// busy machine in the moment after its deadline.
func LateTimer(d time.Duration) context.Context {
	return lateTimer{Context: context.Background(), deadline: time.Now().Add(d)}
}

type lateTimer struct {
	context.Context
	deadline time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.deadline, true }
