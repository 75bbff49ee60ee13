// Package redisserver starts a real redis-server from PATH on a free
// loopback port, for the tests and the bench command.
package redisserver

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Start starts redis-server with no persistence and returns its address
// once it answers PING, and a function that stops it.
func Start() (addr string, stop func(), err error) {
	addr, _, stop, err = StartUnder()
	return addr, stop, err
}

// StartUnder is Start with redis-server run by a wrapper command (for
// example valgrind --tool=callgrind); it also returns the process id of the
// wrapper, which is the server's under valgrind.
func StartUnder(wrapper ...string) (addr string, pid int, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", 0, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", 0, nil, err
	}
	addr = ln.Addr().String()
	_ = ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	argv := append(append([]string(nil), wrapper...), bin, "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	cmd := exec.Command(argv[0], argv[1:]...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	wait := 10 * time.Second
	if len(wrapper) > 0 {
		wait = time.Minute // valgrind starts slowly
	}
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if rdb.Ping(context.Background()).Err() == nil {
			return addr, cmd.Process.Pid, stop, nil
		}
	}
	stop()
	return "", 0, nil, fmt.Errorf("redis-server on %s did not answer PING: %s", addr, out.String())
}
