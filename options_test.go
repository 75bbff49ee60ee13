package slidelog_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/config"
	"github.com/slidelog/slidelog/internal/redistest"
	"github.com/slidelog/slidelog/internal/transport"
)

// A configuration mistake panics in New, naming what is wrong; every
// mistake at once.
func TestOptionMistakesAllAtOnce(t *testing.T) {
	defer func() {
		msg, _ := recover().(string)
		for _, says := range []string{"WithTimeout(-1s)", "WithMaxEvents(0)", "WithBatching(0)", "WithReplicas(1, 0s)"} {
			if !strings.Contains(msg, says) {
				t.Errorf("panic %q does not name %s", msg, says)
			}
		}
	}()
	slidelog.New(newMini(t).Rdb, slidelog.WithTimeout(-time.Second), slidelog.WithMaxEvents(0), slidelog.WithBatching(0), slidelog.WithReplicas(1, 0))
}

// A configuration mistake panics in New, naming what is wrong.
func TestOptionMistakesPanicInNew(t *testing.T) {
	rdb := newMini(t).Rdb
	for _, c := range []struct {
		name string
		opts []slidelog.Option
		says string
	}{
		{"negative timeout", []slidelog.Option{slidelog.WithTimeout(-time.Second)}, "WithTimeout"},
		{"max events 0", []slidelog.Option{slidelog.WithMaxEvents(0)}, "WithMaxEvents"},
		{"prefix with an empty tag", []slidelog.Option{slidelog.WithPrefix("svc{}:")}, "WithPrefix"},
		{"batching without Pipeline", []slidelog.Option{slidelog.WithBatching(8)}, "Pipeline"},
		// one rule for every value that cannot work: WithBatching(0)
		// panics as WithMaxEvents(0) does
		{"batching of 0", []slidelog.Option{slidelog.WithBatching(0)}, "WithBatching(0)"},
		{"batching of -1", []slidelog.Option{slidelog.WithBatching(-1)}, "WithBatching(-1)"},
		{"replicas 0", []slidelog.Option{slidelog.WithReplicas(0, time.Second)}, "WithReplicas(0, 1s): n below 1"},
		{"a nil option", []slidelog.Option{slidelog.WithTimeout(time.Second), nil}, "slidelog: New: option 2 is nil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.Contains(msg, c.says) {
					t.Errorf("panic %v, want one naming %s", r, c.says)
				}
			}()
			if c.says == "Pipeline" {
				slidelog.New(redistest.ScripterOnly{Scripter: rdb}, c.opts...)
				return
			}
			slidelog.New(rdb, c.opts...)
		})
	}
}

// Options that are right build a limiter. Batching is on by default where
// the client can pipeline, off where it cannot (no panic: nobody asked for
// it), and off on request.
func TestOptionsBuild(t *testing.T) {
	rdb := newMini(t).Rdb
	if l := slidelog.New(rdb); !l.Plain() || l.Batcher() == nil || l.Batcher().Max() != config.DefaultBatch || l.Batcher().Merge() != transport.MergeAll || l.DenyCache() != nil {
		t.Errorf("New(rdb): plain %v batch %+v deny %v", l.Plain(), l.Batcher(), l.DenyCache())
	}
	if l := slidelog.New(rdb, slidelog.WithoutBatching()); l.Batcher() != nil {
		t.Errorf("WithoutBatching: batch %+v", l.Batcher())
	}
	if l := slidelog.New(redistest.ScripterOnly{Scripter: rdb}); l.Batcher() != nil {
		t.Errorf("a client without Pipeline: batch %+v", l.Batcher())
	}
	timed := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = timed.Close() })
	l := slidelog.New(timed, slidelog.WithTimeout(time.Second), slidelog.WithMaxEvents(10), slidelog.WithPrefix("{rl}:"), slidelog.WithBatching(8), slidelog.WithDenyCache(), slidelog.WithName("n"))
	if l.Plain() || l.Batcher() == nil || l.Batcher().Max() != 8 || l.Batcher().Merge() != transport.MergeAll || l.DenyCache() == nil {
		t.Errorf("options not applied: %+v", l)
	}
}

// WithTimeout needs context deadlines on: New refuses it on a Client, a
// Cluster client or a Ring whose options leave ContextTimeoutEnabled off
// (go-redis would bound a command by its read and write timeouts only), and
// takes a client it cannot read the options of at its word.
func TestTimeoutNeedsContextDeadlines(t *testing.T) {
	addr := newMini(t).Addr()
	off := []redis.Scripter{
		redis.NewClient(&redis.Options{Addr: addr}),
		redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}}),
		redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}}),
	}
	for _, rdb := range off {
		t.Run(fmt.Sprintf("%T", rdb), func(t *testing.T) {
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, "WithTimeout(1s) on a client without ContextTimeoutEnabled") {
					t.Errorf("panic %q", msg)
				}
			}()
			slidelog.New(rdb, slidelog.WithTimeout(time.Second))
		})
		if c, ok := rdb.(interface{ Close() error }); ok {
			_ = c.Close()
		}
	}
	on := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer func() { _ = on.Close() }()
	slidelog.New(on, slidelog.WithTimeout(time.Second))
	slidelog.New(redis.NewClient(&redis.Options{Addr: addr})) // no WithTimeout: nothing needed
	slidelog.New(redistest.ScripterOnly{Scripter: on}, slidelog.WithTimeout(time.Second))
}

// WithReplicas on a plain client and on a Cluster client: the timeout in
// whole ms, the acknowledgements batched along with the decisions.
func TestWithReplicasAcks(t *testing.T) {
	m := newMini(t)
	if l := slidelog.New(m.Rdb, slidelog.WithReplicas(2, 1500*time.Microsecond)); l.Acks().Timeout() != 2*time.Millisecond || l.Acks().Cluster() || l.Batcher().Acks() != l.Acks() {
		t.Errorf("acks %+v", l.Acks())
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}})
	t.Cleanup(func() { _ = cluster.Close() })
	if l := slidelog.New(cluster, slidelog.WithReplicas(1, time.Second)); !l.Acks().Cluster() {
		t.Errorf("acks %+v", l.Acks())
	}
}
