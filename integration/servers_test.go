package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/slidelog/slidelog/internal/redistest"
)

// TestMain keeps go-redis' log of failed dials out of the suite's output:
// its tests pause, kill and restart servers on purpose, and every client
// of them logs each dial that failed meanwhile.
func TestMain(m *testing.M) {
	redistest.Quiet()
	os.Exit(m.Run())
}

// flavor is one server the whole suite runs against.
type flavor struct {
	name  string
	image string // from $env, defaulting to the official tag
	bin   string // the server binary in the image
	cli   string // its command-line client
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// flavors: scripts/build-images.sh builds local equivalents from Debian's
// packages and scripts/integration.sh points these variables at them; with a
// registry, the official images run as they are.
var flavors = []flavor{
	{"redis-6.0", env("SLIDELOG_REDIS6_IMAGE", "redis:6.0-alpine"), "redis-server", "redis-cli"},
	{"redis-7.0", env("SLIDELOG_REDIS7_IMAGE", "redis:7.4-alpine"), "redis-server", "redis-cli"},
	{"redis-8.0", env("SLIDELOG_REDIS8_IMAGE", "redis:8.0-alpine"), "redis-server", "redis-cli"},
	{"valkey-8.1", env("SLIDELOG_VALKEY_IMAGE", "valkey/valkey:8"), "valkey-server", "valkey-cli"},
}

// selected returns the flavors named in $SLIDELOG_FLAVORS (comma separated),
// or all of them.
func selected(t *testing.T) []flavor {
	only := os.Getenv("SLIDELOG_FLAVORS")
	if only == "" {
		return flavors
	}
	var out []flavor
	for _, f := range flavors {
		if strings.Contains(","+only+",", ","+f.name+",") {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		t.Fatalf("SLIDELOG_FLAVORS=%q names no flavor", only)
	}
	return out
}

// node is one server process in a container on the host's network,
// listening on a loopback port of its own: a restarted container comes back
// on the same address, and every byte of test traffic stays on 127.0.0.1.
type node struct {
	flavor flavor
	port   int
	addr   string
	c      *testcontainers.DockerContainer
}

var portMu sync.Mutex
var portNext = 20000 + os.Getpid()%5000

// freePort returns a loopback port that is free, and so is port+10000 (a
// cluster node's bus).
func freePort(t testing.TB) int {
	portMu.Lock()
	defer portMu.Unlock()
	for ; portNext < 30000; portNext++ {
		p := portNext
		if free(p) && free(p+10000) {
			portNext++
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

func free(port int) bool {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// startNode starts f's server with args on a free port. Every node persists
// each write before it answers (appendonly, appendfsync always): a restart
// must not forget an admitted event.
func startNode(t *testing.T, f flavor, args ...string) *node {
	t.Helper()
	port := freePort(t)
	cmd := append([]string{f.bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--protected-mode", "no", "--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--dir", "/tmp"}, args...)
	return startContainer(t, f, port, "Ready to accept connections", nil, cmd)
}

// startContainer runs cmd (through entrypoint, if any) in f's image on the
// host's network, and waits for the log line ready and for PING on port.
func startContainer(t *testing.T, f flavor, port int, ready string, entrypoint, cmd []string) *node {
	t.Helper()
	ctx := context.Background()
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithCmd(cmd...),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.NetworkMode = "host" }),
		testcontainers.WithWaitStrategy(wait.ForLog(ready).WithStartupTimeout(30 * time.Second)),
	}
	if entrypoint != nil {
		opts = append(opts, testcontainers.WithEntrypoint(entrypoint...))
	}
	c, err := testcontainers.Run(ctx, f.image, opts...)
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("start %s (%s): %v", f.name, f.image, err)
	}
	n := &node{flavor: f, port: port, addr: fmt.Sprintf("127.0.0.1:%d", port), c: c}
	n.waitReady(t)
	return n
}

func (n *node) client(t testing.TB) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: n.addr, ContextTimeoutEnabled: true, PoolSize: 32})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// waitReady waits until the node answers PING.
func (n *node) waitReady(t testing.TB) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if rdb.Ping(context.Background()).Err() == nil {
			return
		}
	}
	t.Fatalf("%s on %s does not answer PING", n.flavor.name, n.addr)
}

// docker runs the docker CLI on the node's container (pause, unpause, kill).
func (n *node) docker(t testing.TB, verb string, args ...string) {
	t.Helper()
	out, err := exec.Command("docker", append(append([]string{verb}, args...), n.c.GetContainerID())...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v: %s", verb, err, out)
	}
}

// exec runs a command inside the node's container and returns its output.
func (n *node) exec(t testing.TB, cmd ...string) string {
	t.Helper()
	code, r, err := n.c.Exec(context.Background(), cmd)
	if err != nil {
		t.Fatalf("exec %v: %v", cmd, err)
	}
	out, _ := io.ReadAll(r)
	if code != 0 {
		t.Fatalf("exec %v: exit %d: %s", cmd, code, out)
	}
	return string(out)
}
