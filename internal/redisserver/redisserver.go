// Package redisserver starts a real redis-server from PATH on a free
// loopback port, for the tests and the bench command.
package redisserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Start starts redis-server with no persistence and returns its address
// once it answers PING, and a function that stops it.
func Start() (addr string, stop func(), err error) {
	addr, _, stop, err = start(nil, "", nil)
	return addr, stop, err
}

// StartWith is Start with more redis-server arguments after the defaults,
// where a later one wins: StartWith("--appendonly", "yes") has persistence.
// The server runs in a new temporary directory (its "dir"), which stop
// removes, so that what it writes (an AOF, a snapshot, nodes.conf) never
// lands in the caller's directory.
func StartWith(args ...string) (addr string, stop func(), err error) {
	addr, _, stop, err = start(nil, "", args)
	return addr, stop, err
}

// StartProcess is StartWith that also returns the server's process id,
// for a test that stops and resumes it (SIGSTOP, SIGCONT): a replica that
// stops acknowledging.
func StartProcess(args ...string) (addr string, pid int, stop func(), err error) {
	return start(nil, "", args)
}

// StartSentinel starts a Redis Sentinel that monitors the master at
// masterAddr under the name master, with a quorum of 1, in a temporary
// directory of its own like StartWith's.
func StartSentinel(master, masterAddr string) (addr string, stop func(), err error) {
	host, port, err := net.SplitHostPort(masterAddr)
	if err != nil {
		return "", nil, err
	}
	conf := fmt.Sprintf("sentinel monitor %s %s %s 1\n", master, host, port)
	addr, _, stop, err = start(nil, conf, []string{"--sentinel"})
	return addr, stop, err
}

// start runs wrapper, redis-server, its default arguments and then args
// (in a temporary directory of its own when there are any); with a conf,
// the server reads it from a file in that directory (a Sentinel's, which
// the Sentinel rewrites).
func start(wrapper []string, conf string, args []string) (addr string, pid int, stop func(), err error) {
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
	argv := append(append([]string(nil), wrapper...), bin)
	removeDir := func() {}
	var dir string
	if len(args) > 0 {
		if dir, err = os.MkdirTemp("", "redisserver-"); err != nil {
			return "", 0, nil, err
		}
		removeDir = func() { _ = os.RemoveAll(dir) }
	}
	if conf != "" {
		file := filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
			removeDir()
			return "", 0, nil, err
		}
		argv = append(argv, file)
	}
	argv = append(argv, "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	if dir != "" {
		argv = append(append(argv, "--dir", dir), args...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		removeDir()
		return "", 0, nil, err
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); removeDir() }
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
