package check

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
)

// liar is a fake Redis server that lies as a broken proxy might: it answers
// the handshake, then every command with a bulk length of 2^63-1, which
// makes go-redis panic (makeslice) in the goroutine that reads it. (The
// root's panics_test.go has the same server, which can also turn honest.)
type liar struct {
	ln   net.Listener
	lies atomic.Int64
}

func newLiar(t *testing.T) *liar {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &liar{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *liar) serve(c net.Conn) {
	defer func() { _ = c.Close() }()
	r := bufio.NewReader(c)
	for {
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		var reply string
		switch name := strings.ToUpper(cmd[0]); name {
		case "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case "CLIENT", "SELECT":
			reply = "+OK\r\n"
		default:
			s.lies.Add(1)
			reply = "$9223372036854775807\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// readCommand reads one RESP command (an array of bulk strings).
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad command %q", line)
	}
	cmd := make([]string, n)
	for i := range cmd {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		cmd[i] = string(b[:size])
	}
	return cmd, nil
}

// Run's per-server goroutines turn the client's panic into Run's error,
// which wraps slidelog.ErrPanic (never a crash of the process), on a
// single server and on each shard of a Ring.
func TestCheckClientPanicIsAnError(t *testing.T) {
	s := newLiar(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.ln.Addr().String(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": s.ln.Addr().String(), "b": newLiar(t).ln.Addr().String()}, MaxRetries: -1})
	t.Cleanup(func() { _ = ring.Close() })
	for _, c := range []redis.Scripter{rdb, ring} {
		_, err := Run(context.Background(), c, Options{})
		if !errors.Is(err, slidelog.ErrPanic) || !strings.Contains(err.Error(), "slidelog: check 127.0.0.1:") || !strings.Contains(err.Error(), "slidelog: the Redis client panicked: ") {
			t.Errorf("%T: Run: %v, want ErrPanic", c, err)
		}
	}
	if s.lies.Load() == 0 {
		t.Fatal("no lie told: the test did not exercise the panic")
	}
}
