package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// lie is a bulk length of 2^63-1: go-redis panics (makeslice) in the
// goroutine that reads it.
const lie = "$9223372036854775807\r\n"

// fakeRedis answers the handshake (RESP2, after refusing HELLO) and the
// commands named in honest as a Redis would (PING only the first time,
// INFO with nothing, CONFIG with OK, SCRIPT LOAD with a hash), and
// everything else with a lie.
func fakeRedis(t *testing.T, honest ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var pings atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				r := bufio.NewReader(c)
				for {
					cmd, err := readCommand(r)
					if err != nil {
						return
					}
					reply := lie
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
					if _, err := io.WriteString(c, reply); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
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
