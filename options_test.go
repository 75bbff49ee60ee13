package slidelog

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	New(newMini(t).Rdb, WithTimeout(-time.Second), WithMaxEvents(0), WithBatching(0), WithReplicas(1, 0))
}

// A configuration mistake panics in New, naming what is wrong.
func TestOptionMistakesPanicInNew(t *testing.T) {
	rdb := newMini(t).Rdb
	for _, c := range []struct {
		name string
		opts []Option
		says string
	}{
		{"negative timeout", []Option{WithTimeout(-time.Second)}, "WithTimeout"},
		{"max events 0", []Option{WithMaxEvents(0)}, "WithMaxEvents"},
		{"prefix with an empty tag", []Option{WithPrefix("svc{}:")}, "WithPrefix"},
		{"batching without Pipeline", []Option{WithBatching(8)}, "Pipeline"},
		// one rule for every value that cannot work: WithBatching(0)
		// panics as WithMaxEvents(0) does
		{"batching of 0", []Option{WithBatching(0)}, "WithBatching(0)"},
		{"batching of -1", []Option{WithBatching(-1)}, "WithBatching(-1)"},
		{"replicas 0", []Option{WithReplicas(0, time.Second)}, "WithReplicas(0, 1s): n below 1"},
		{"a nil option", []Option{WithTimeout(time.Second), nil}, "slidelog: New: option 2 is nil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.Contains(msg, c.says) {
					t.Errorf("panic %v, want one naming %s", r, c.says)
				}
			}()
			if c.says == "Pipeline" {
				New(redistest.ScripterOnly{Scripter: rdb}, c.opts...)
				return
			}
			New(rdb, c.opts...)
		})
	}
}

// Options that are right build a limiter. Batching is on by default where
// the client can pipeline, off where it cannot (no panic: nobody asked for
// it), and off on request.
func TestOptionsBuild(t *testing.T) {
	rdb := newMini(t).Rdb
	if l := New(rdb); !l.plain || l.batch == nil || l.batch.Max() != config.DefaultBatch || l.batch.Merge() != transport.MergeAll || l.deny != nil {
		t.Errorf("New(rdb): plain %v batch %+v deny %v", l.plain, l.batch, l.deny)
	}
	if l := New(rdb, WithoutBatching()); l.batch != nil {
		t.Errorf("WithoutBatching: batch %+v", l.batch)
	}
	if l := New(redistest.ScripterOnly{Scripter: rdb}); l.batch != nil {
		t.Errorf("a client without Pipeline: batch %+v", l.batch)
	}
	timed := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = timed.Close() })
	l := New(timed, WithTimeout(time.Second), WithMaxEvents(10), WithPrefix("{rl}:"), WithBatching(8), WithDenyCache(), WithName("n"))
	if l.plain || l.batch == nil || l.batch.Max() != 8 || l.batch.Merge() != transport.MergeAll || l.deny == nil {
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
			New(rdb, WithTimeout(time.Second))
		})
		if c, ok := rdb.(interface{ Close() error }); ok {
			_ = c.Close()
		}
	}
	on := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer func() { _ = on.Close() }()
	New(on, WithTimeout(time.Second))
	New(redis.NewClient(&redis.Options{Addr: addr})) // no WithTimeout: nothing needed
	New(redistest.ScripterOnly{Scripter: on}, WithTimeout(time.Second))
}

// WithReplicas on a plain client and on a Cluster client: the timeout in
// whole ms, the acknowledgements batched along with the decisions.
func TestWithReplicasAcks(t *testing.T) {
	m := newMini(t)
	if l := New(m.Rdb, WithReplicas(2, 1500*time.Microsecond)); l.acks.Timeout() != 2*time.Millisecond || l.acks.Cluster() || l.batch.Acks() != l.acks {
		t.Errorf("acks %+v", l.acks)
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}})
	t.Cleanup(func() { _ = cluster.Close() })
	if l := New(cluster, WithReplicas(1, time.Second)); !l.acks.Cluster() {
		t.Errorf("acks %+v", l.acks)
	}
}
