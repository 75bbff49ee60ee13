package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Lie is a reply no Redis sends: a bulk string 2^63-1 bytes long, which
// makes go-redis panic (makeslice) in the goroutine that reads it. A test
// that wants the client to panic answers with it, as a broken proxy might.
const Lie = "$9223372036854775807\r\n"

// Fake starts a fake Redis server for t alone, on a free loopback port, and
// returns its address. It answers each command a client sends (a RESP array
// of bulk strings, the command's name first, as the client spelled it) with
// reply's result, written to the connection as it is: raw RESP, which may
// be a lie no Redis would tell (Lie). reply is called on the goroutine of
// each connection, so from several goroutines at once. A connection ends
// when its client closes it or sends something that is not a command.
// When t ends, the server stops listening, closes the connections still
// open and waits for their goroutines.
//
// Fake needs no redis-server, so SLIDELOG_SKIP_REAL_REDIS does not skip it.
func Fake(t testing.TB, reply func(cmd []string) string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		conns  = map[net.Conn]struct{}{}
		closed bool
		wg     sync.WaitGroup
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		closed = true
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				_ = c.Close()
				return
			}
			conns[c] = struct{}{}
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer wg.Done()
				defer func() {
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					_ = c.Close()
				}()
				serve(c, reply)
			}()
		}
	}()
	return ln.Addr().String()
}

// serve answers the commands read from c with reply's results until c ends.
func serve(c net.Conn, reply func(cmd []string) string) {
	r := bufio.NewReader(c)
	for {
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		if _, err := io.WriteString(c, reply(cmd)); err != nil {
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
		if size < 0 {
			return nil, fmt.Errorf("bad argument %q", line)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		cmd[i] = string(b[:size])
	}
	return cmd, nil
}
