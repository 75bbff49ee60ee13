package redistest

import (
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Replicated is a real master and a real replica of it, whose process a
// test stops (SIGSTOP: it acknowledges nothing) and resumes.
type Replicated struct {
	Master, Replica *redis.Client
	Pid             int // the replica's process
}

// StartReplicated starts a master and a replica, and waits until the
// replica is online.
func StartReplicated(t *testing.T) *Replicated {
	t.Helper()
	master := Start(t, "--repl-diskless-sync-delay", "0")
	host, port, _ := net.SplitHostPort(master)
	addr, pid := StartProcess(t, "--replicaof", host, port)
	r := &Replicated{Master: Client(t, master), Replica: Client(t, addr), Pid: pid}
	WaitFor(t, "the replica online", func() bool {
		return strings.Contains(Info(r.Master, "slave0"), "state=online") && Info(r.Replica, "master_link_status") == "up"
	})
	return r
}

// Stop stops the replica's process until Resume (or the test's end).
func (r *Replicated) Stop(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(r.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// Resume lets the replica's process run again.
func (r *Replicated) Resume(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(r.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}
