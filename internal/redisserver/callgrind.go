package redisserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Callgrind is a redis-server run under valgrind's callgrind, which counts
// the instructions it executes: deterministic where timings on a shared
// machine are not.
type Callgrind struct {
	Addr string
	pid  int
	dir  string
	stop func()
}

// StartCallgrind starts redis-server under callgrind (valgrind and
// callgrind_control must be on PATH) and returns it once it answers PING.
func StartCallgrind() (*Callgrind, error) {
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s (apt-get install valgrind): %w", tool, err)
		}
	}
	dir, err := os.MkdirTemp("", "redisserver-callgrind-")
	if err != nil {
		return nil, err
	}
	addr, pid, stop, err := start([]string{"valgrind", "--tool=callgrind", "--callgrind-out-file=" + filepath.Join(dir, "cg.%p")}, "", nil)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("redis-server under callgrind: %w", err)
	}
	return &Callgrind{Addr: addr, pid: pid, dir: dir, stop: stop}, nil
}

// Zero sets the counters to zero.
func (c *Callgrind) Zero(ctx context.Context) error { return c.control(ctx, "--zero") }

// Count returns the instructions executed since the last Zero (or the
// start): it dumps the counters and reads the dump's total.
func (c *Callgrind) Count(ctx context.Context) (int64, error) {
	if err := c.control(ctx, "--dump"); err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return 0, err
	}
	var newest string
	var at time.Time
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.ModTime().After(at) {
			newest, at = e.Name(), fi.ModTime()
		}
	}
	if newest == "" {
		return 0, fmt.Errorf("no callgrind dump in %s", c.dir)
	}
	b, err := os.ReadFile(filepath.Join(c.dir, newest))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		for _, label := range []string{"totals: ", "summary: "} {
			if v, ok := strings.CutPrefix(line, label); ok {
				return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("%s: no totals line", newest)
}

// Stop stops the server and removes its dumps.
func (c *Callgrind) Stop() {
	c.stop()
	_ = os.RemoveAll(c.dir)
}

func (c *Callgrind) control(ctx context.Context, arg string) error {
	if b, err := exec.CommandContext(ctx, "callgrind_control", arg, strconv.Itoa(c.pid)).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control %s: %w: %s", arg, err, b)
	}
	return nil
}
