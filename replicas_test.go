package slidelog_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/minitest"
	"github.com/slidelog/slidelog/internal/redistest"
)

// The tests of WithReplicas run a real master and a real replica of it
// (redistest.Replicated), whose process a test stops and resumes.

// An admission returns once the replica has it: right after the call, the
// replica holds every event it was told was admitted (Allow, AllowN,
// AllowAll), and a denial is answered as usual.
func TestReplicasAcknowledged(t *testing.T) {
	r := redistest.StartReplicated(t)
	for _, mode := range batchingModes {
		t.Run(mode.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), generous)
			defer cancel()
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(r.Master, slidelog.WithPrefix(prefix), slidelog.WithReplicas(1, generous), mode.Opt)
			lim := slidelog.Limit{Events: 5, Window: time.Minute}
			for i, n := range []int{1, 3, 1} {
				res, err := l.AllowN(ctx, "k", lim, n)
				if err != nil || !res.Allowed {
					t.Fatalf("AllowN %d: %+v, %v", i, res, err)
				}
			}
			if got := logLen(t, r.Replica, prefix+"k"); got != 5 {
				t.Errorf("the replica holds %d events right after 5 were admitted", got)
			}
			if res, err := l.Allow(ctx, "k", lim); err != nil || res.Allowed {
				t.Errorf("a sixth event: %+v, %v; want denied", res, err)
			}
			limits := []slidelog.Limit{{Events: 2, Window: time.Minute}, {Events: 3, Window: time.Hour}}
			if res, err := l.AllowAll(ctx, "all", 2, limits...); err != nil || !res.Allowed {
				t.Fatalf("AllowAll: %+v, %v", res, err)
			}
			base, _ := l.AllKeys("all")
			for _, lim := range limits {
				if got := logLen(t, r.Replica, slidelog.WindowKey(base, lim.Window)); got != 2 {
					t.Errorf("the replica holds %d events in the %v log, want 2", got, lim.Window)
				}
			}
		})
	}
}

// With the replica stopped, an admission fails with ErrNotReplicated once
// the timeout has passed, and its events are taken back; FailOpen answers
// it, degraded. Denials and Peeks do not wait: under a WAIT timeout of an
// hour they answer at once.
func TestReplicasNotAcknowledged(t *testing.T) {
	r := redistest.StartReplicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*generous)
	defer cancel()
	prefix := uniqueKey(t) + ":"
	lim := slidelog.Limit{Events: 3, Window: time.Minute}
	// A full key, admitted while the replica is up.
	full := slidelog.New(r.Master, slidelog.WithPrefix(prefix), slidelog.WithReplicas(1, generous))
	if res, err := full.AllowN(ctx, "full", lim, 3); err != nil || !res.Allowed {
		t.Fatalf("filling a key: %+v, %v", res, err)
	}
	r.Stop(t)
	defer r.Resume(t)
	for _, mode := range batchingModes {
		t.Run(mode.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, generous)
			defer cancel()
			l := slidelog.New(r.Master, slidelog.WithPrefix(prefix), slidelog.WithReplicas(1, 200*time.Millisecond), mode.Opt)
			key := mode.Name
			res, err := l.AllowN(ctx, key, lim, 2)
			if !errors.Is(err, slidelog.ErrNotReplicated) || errors.Is(err, context.DeadlineExceeded) || res.Allowed {
				t.Fatalf("AllowN with the replica stopped: %+v, %v; want ErrNotReplicated", res, err)
			}
			t.Log(err)
			if got := logLen(t, r.Master, prefix+key); got != 0 {
				t.Errorf("the master holds %d events of a refused admission", got)
			}
			limits := []slidelog.Limit{{Events: 2, Window: time.Minute}, {Events: 3, Window: time.Hour}}
			if res, err := l.AllowAll(ctx, key, 1, limits...); !errors.Is(err, slidelog.ErrNotReplicated) || res.Allowed {
				t.Fatalf("AllowAll with the replica stopped: %+v, %v; want ErrNotReplicated", res, err)
			}
			base, _ := l.AllKeys(key)
			for _, lim := range limits {
				if got := logLen(t, r.Master, slidelog.WindowKey(base, lim.Window)); got != 0 {
					t.Errorf("the master holds %d events of a refused AllowAll in the %v log", got, lim.Window)
				}
			}

			open := slidelog.New(r.Master, slidelog.WithPrefix(prefix), slidelog.WithReplicas(1, 200*time.Millisecond), slidelog.WithPolicy(slidelog.FailOpen), mode.Opt)
			res, err = open.Allow(ctx, key, lim)
			if err != nil || !res.Allowed || !res.Degraded() {
				t.Errorf("FailOpen: %+v (degraded %v), %v; want a degraded admission", res, res.Degraded(), err)
			}
			if got := logLen(t, r.Master, prefix+key); got != 0 {
				t.Errorf("the master holds %d events after FailOpen answered", got)
			}

			patient := slidelog.New(r.Master, slidelog.WithPrefix(prefix), slidelog.WithReplicas(1, time.Hour), mode.Opt)
			if res, err := patient.Allow(ctx, "full", lim); err != nil || res.Allowed {
				t.Errorf("a denial with the replica stopped: %+v, %v; want denied at once", res, err)
			}
			if res, err := patient.Peek(ctx, key, lim); err != nil || !res.Allowed {
				t.Errorf("a Peek with the replica stopped: %+v, %v; want answered at once", res, err)
			}
		})
	}
}

// With batching, a pipeline's denials and Peeks are answered while its
// admissions wait for the replica, and those admissions complete once the
// replica is back.
func TestReplicasBatchAnswersDenialsFirst(t *testing.T) {
	r := redistest.StartReplicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*generous)
	defer cancel()
	prefix := uniqueKey(t) + ":"
	lim := slidelog.Limit{Events: 3, Window: time.Minute}
	l := slidelog.New(r.Master, slidelog.WithPrefix(prefix), slidelog.WithReplicas(1, time.Hour), slidelog.WithBatching(256))
	if res, err := l.AllowN(ctx, "full", lim, 3); err != nil || !res.Allowed {
		t.Fatalf("filling a key: %+v, %v", res, err)
	}
	r.Stop(t)
	stopped := true
	defer func() {
		if stopped {
			r.Resume(t)
		}
	}()
	const admissions = 16
	results := make(chan error, admissions)
	for range admissions {
		go func() {
			res, err := l.Allow(ctx, "k", slidelog.Limit{Events: admissions, Window: time.Minute})
			if err == nil && !res.Allowed {
				err = errors.New("denied")
			}
			results <- err
		}()
	}
	redistest.WaitFor(t, "the admissions recorded on the master", func() bool { return logLen(t, r.Master, prefix+"k") == admissions })
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dctx, cancel := context.WithTimeout(ctx, generous)
			defer cancel()
			if res, err := l.Allow(dctx, "full", lim); err != nil || res.Allowed {
				t.Errorf("a denial while admissions wait: %+v, %v", res, err)
			}
			if _, err := l.Peek(dctx, "k", lim); err != nil {
				t.Errorf("a Peek while admissions wait: %v", err)
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-results:
		t.Fatalf("an admission was answered (%v) while the replica was stopped", err)
	default:
	}
	r.Resume(t)
	stopped = false
	for range admissions {
		if err := <-results; err != nil {
			t.Errorf("an admission after the replica resumed: %v", err)
		}
	}
	if got := logLen(t, r.Replica, prefix+"k"); got != admissions {
		t.Errorf("the replica holds %d events, want %d", got, admissions)
	}
}

// Refund and Reset do not wait for replicas: with the replica stopped they
// take effect on the master at once.
func TestReplicasRefundAndResetDoNotWait(t *testing.T) {
	r := redistest.StartReplicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	prefix := uniqueKey(t) + ":"
	l := slidelog.New(r.Master, slidelog.WithPrefix(prefix), slidelog.WithReplicas(1, time.Hour))
	lim := slidelog.Limit{Events: 3, Window: time.Minute}
	a, err := l.AllowN(ctx, "a", lim, 2)
	if err != nil || !a.Allowed {
		t.Fatalf("AllowN: %+v, %v", a, err)
	}
	if res, err := l.Allow(ctx, "b", lim); err != nil || !res.Allowed {
		t.Fatalf("Allow: %+v, %v", res, err)
	}
	r.Stop(t)
	defer r.Resume(t)
	if err := l.Refund(ctx, a.Handle()); err != nil {
		t.Errorf("Refund: %v", err)
	}
	if err := l.Reset(ctx, "b"); err != nil {
		t.Errorf("Reset: %v", err)
	}
	if got := logLen(t, r.Master, prefix+"a") + logLen(t, r.Master, prefix+"b"); got != 0 {
		t.Errorf("%d events left after Refund and Reset", got)
	}
}

// New refuses WithReplicas where it cannot work: a Ring (no replicas), n
// below 1, a timeout that is not positive.
func TestReplicasMistakes(t *testing.T) {
	m := minitest.New(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	var universal redis.UniversalClient = ring
	for _, c := range []struct {
		name string
		rdb  redis.Scripter
		opt  slidelog.Option
		says []string
	}{
		{"ring", ring, slidelog.WithReplicas(1, time.Second), []string{"WithReplicas(1, 1s)", "*redis.Ring", "no replicas"}},
		{"universal ring", universal, slidelog.WithReplicas(1, time.Second), []string{"*redis.Ring"}},
		{"no replica", m.Rdb, slidelog.WithReplicas(0, time.Second), []string{"WithReplicas(0, 1s)", "n below 1"}},
		{"no timeout", m.Rdb, slidelog.WithReplicas(1, 0), []string{"WithReplicas(1, 0s)", "must be positive"}},
		{"negative timeout", m.Rdb, slidelog.WithReplicas(1, -time.Second), []string{"WithReplicas(1, -1s)", "must be positive"}},
		{"unknown client", redistest.ScripterOnly{Scripter: m.Rdb}, slidelog.WithReplicas(1, time.Second), []string{"WithReplicas(1, 1s) needs a client"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				for _, s := range c.says {
					if !strings.Contains(msg, s) {
						t.Errorf("panic %q, want one saying %q", msg, s)
					}
				}
			}()
			slidelog.New(c.rdb, c.opt)
		})
	}
}
