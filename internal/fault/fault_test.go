package fault

import (
	"errors"
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// replyError is an error reply of Redis (a redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// The root's tests hold the whole table of unavailabilities (its
// unavailable adds the sentinels); these are the kinds MayHaveRun and
// Unavailable tell apart.
func TestMayHaveRun(t *testing.T) {
	for err, want := range map[error]bool{
		&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}: true,
		&net.OpError{Op: "dial", Err: errors.New("refused")}:  false,
		replyError("WRONGTYPE Operation against a key"):       false,
		redis.ErrClosed: false,
		errors.New("redis: connection pool timeout"):            false,
		fmt.Errorf("cut: %w", errors.New("use of closed conn")): true,
	} {
		if got := MayHaveRun(fmt.Errorf("run: %w", err)); got != want {
			t.Errorf("MayHaveRun(%v) = %v, want %v", err, got, want)
		}
	}
	if !Unavailable(replyError("ERR Error running script: -OOM command not allowed ")) || Unavailable(redis.ErrClosed) {
		t.Error("Unavailable: OOM inside a script, or a closed client")
	}
	if !Redirection(replyError("MOVED 3999 127.0.0.1:6381")) || Redirection(replyError("MOVEDX")) || !Demoted(replyError("UNBLOCKED force unblock")) {
		t.Error("Redirection, Demoted")
	}
}

// A panic becomes an error that wraps the sentinel it was given.
func TestPanicsTo(t *testing.T) {
	sentinel := errors.New("the client panicked")
	var got error
	func() {
		defer Panics{Sentinel: sentinel}.To(func(err error) { got = err })
		panic("makeslice: len out of range")
	}()
	if !errors.Is(got, sentinel) || !IsPanic(fmt.Errorf("wrapped: %w", got)) || got.Error() != "the client panicked: makeslice: len out of range" {
		t.Errorf("got %v", got)
	}
	func() {
		defer Panics{Sentinel: sentinel}.To(func(error) { t.Error("no panic, yet fail was called") })
	}()
}

// NotAcked and Left unwrap to what they carry.
func TestWrappers(t *testing.T) {
	inner := errors.New("inner")
	if !errors.Is(NotAcked{Err: inner}, inner) || !errors.Is(Left{Err: inner}, inner) || (NotAcked{Err: inner}).Error() != "inner" {
		t.Error("NotAcked, Left")
	}
}
