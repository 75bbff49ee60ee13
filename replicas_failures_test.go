package slidelog_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
)

// A WAIT the server refuses (the user may not run it) is a mistake: an
// error under every policy, not ErrNotReplicated; the admission's events
// are taken back all the same.
func TestReplicasWaitRefused(t *testing.T) {
	r := redistest.StartReplicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	if err := r.Master.Do(ctx, "ACL", "SETUSER", "nowait", "on", ">pw", "~*", "+@all", "-wait").Err(); err != nil {
		t.Fatal(err)
	}
	limited := redistest.Client(t, r.Master.Options().Addr, "nowait", "pw")
	prefix := uniqueKey(t) + ":"
	for _, mode := range batchingModes {
		l := slidelog.New(limited, slidelog.WithPrefix(prefix), slidelog.WithReplicas(1, time.Second), slidelog.WithPolicy(slidelog.FailOpen), mode.Opt)
		res, err := l.Allow(ctx, mode.Name, slidelog.PerMinute(3))
		if err == nil || errors.Is(err, slidelog.ErrNotReplicated) || !strings.Contains(err.Error(), "NOPERM") || res.Allowed {
			t.Errorf("%s: Allow with WAIT refused: %+v, %v; want the NOPERM error", mode.Name, res, err)
		}
		if got := logLen(t, r.Master, prefix+mode.Name); got != 0 {
			t.Errorf("%s: the master holds %d events of a refused admission", mode.Name, got)
		}
	}
}

// When the caller's context ends while its admission waits for the
// replicas (a deadline: go-redis interrupts a read at a deadline, not at a
// cancel), the call fails with the context's error and the events are
// taken back: unbatched at once, in the background; batched, once the
// pipeline's WAIT has answered (here, when the replica resumes).
func TestReplicasContextEndsDuringWait(t *testing.T) {
	r := redistest.StartReplicated(t)
	prefix := uniqueKey(t) + ":"
	keys := map[string]*slidelog.Limiter{}
	for _, mode := range batchingModes {
		l := slidelog.New(r.Master, slidelog.WithPrefix(prefix), slidelog.WithReplicas(1, time.Hour), mode.Opt)
		for i := range 8 {
			keys[mode.Name+strconv.Itoa(i)] = l
		}
	}
	// Warm up: the script loaded and the connections dialed while the
	// replica acknowledges, so that the deadline below ends a WAIT, not a
	// script's first run.
	var wg sync.WaitGroup
	for key, l := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), generous)
			defer cancel()
			if res, err := l.Allow(ctx, "warm:"+key, slidelog.PerMinute(3)); err != nil || !res.Allowed {
				t.Errorf("warm-up %s: %+v, %v", key, res, err)
			}
		}()
	}
	wg.Wait()
	r.Stop(t)
	stopped := true
	defer func() {
		if stopped {
			r.Resume(t)
		}
	}()
	for key, l := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			res, err := l.Allow(ctx, key, slidelog.PerMinute(3))
			if !errors.Is(err, context.DeadlineExceeded) || res.Allowed {
				t.Errorf("%s: Allow past its deadline: %+v, %v; want context.DeadlineExceeded", key, res, err)
			}
		}()
	}
	wg.Wait()
	for key := range keys {
		if strings.HasPrefix(key, "unbatched") {
			redistest.WaitFor(t, "the unbatched events taken back", func() bool { return logLen(t, r.Master, prefix+key) == 0 })
		}
	}
	r.Resume(t)
	stopped = false
	for key := range keys {
		redistest.WaitFor(t, "every event taken back", func() bool { return logLen(t, r.Master, prefix+key) == 0 })
	}
}

// The WAIT's read ends at the caller's deadline before the context's timer
// has run (a busy machine): the error still matches the deadline, and the
// events are taken back in the background rather than with the spent
// context.
func TestReplicasDeadlineBeforeContextTimer(t *testing.T) {
	r := redistest.StartReplicated(t)
	prefix := uniqueKey(t) + ":"
	l := slidelog.New(r.Master, slidelog.WithPrefix(prefix), slidelog.WithReplicas(1, time.Hour), slidelog.WithoutBatching())
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	if res, err := l.Allow(ctx, "warm", slidelog.PerHour(3)); err != nil || !res.Allowed {
		t.Fatalf("warm-up: %+v, %v", res, err)
	}
	r.Stop(t)
	defer r.Resume(t)
	res, err := l.Allow(redistest.LateTimer(300*time.Millisecond), "k", slidelog.PerHour(3))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, slidelog.ErrNotReplicated) || res.Allowed {
		t.Errorf("Allow past its deadline: %+v, %v; want context.DeadlineExceeded and ErrNotReplicated", res, err)
	}
	redistest.WaitFor(t, "the events taken back", func() bool { return logLen(t, r.Master, prefix+"k") == 0 })
}

// A master demoted by a failover answers a batched pipeline READONLY; the
// decisions of its shared calls are sent again, alone, on the same
// connection, which go-redis has given up: that pipeline's commands come
// back with neither a reply nor an error. Each caller must still learn
// why (READONLY, an unavailability the policy answers for), not "script
// replied <nil>". Here the limiter's client is a replica.
func TestReplicasDemotedMasterTellsWhy(t *testing.T) {
	r := redistest.StartReplicated(t)
	l := slidelog.New(r.Replica, slidelog.WithPrefix(uniqueKey(t)+":"), slidelog.WithReplicas(1, time.Second), slidelog.WithBatching(256))
	for round := range 5 {
		var wg sync.WaitGroup
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), generous)
				defer cancel()
				res, err := l.Allow(ctx, "k"+strconv.Itoa(i%4), slidelog.PerMinute(100))
				if res.Allowed || err == nil || !strings.Contains(err.Error(), "READONLY") || !slidelog.Unavailable(err) {
					t.Errorf("round %d: Allow on a replica: %+v, %v; want an unavailability naming READONLY", round, res, err)
				}
			}()
		}
		wg.Wait()
	}
}

// A master demoted while its WAIT blocks (REPLICAOF, as a failover does)
// answers the WAIT "UNBLOCKED force unblock ... (master -> replica?)": that
// is ErrNotReplicated, so FailOpen admits, batched or not. Before, it was an
// error no policy answered for.
func TestReplicasMasterDemotedDuringWait(t *testing.T) {
	for _, mode := range batchingModes {
		t.Run(mode.Name, func(t *testing.T) {
			addr := redistest.Start(t) // no replica: a WAIT 1 blocks until its timeout
			// RESP2: go-redis' maintenance notifications (RESP3) race with
			// themselves under -race when Conn() opens a connection
			// (WithReplicas) beside the client's own (TestReplicasCluster)
			rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, Protocol: 2})
			t.Cleanup(func() { _ = rdb.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), generous)
			defer cancel()
			gone := redistest.Gone(t)
			host, port, _ := net.SplitHostPort(gone)
			strict := slidelog.New(rdb, slidelog.WithPrefix(uniqueKey(t)+":"), slidelog.WithReplicas(1, time.Minute), mode.Opt)
			open := slidelog.New(rdb, slidelog.WithPrefix(uniqueKey(t)+":"), slidelog.WithReplicas(1, time.Minute), slidelog.WithPolicy(slidelog.FailOpen), mode.Opt)
			type answer struct {
				r   slidelog.Result
				err error
			}
			answers := make(chan answer, 2)
			for _, l := range []*slidelog.Limiter{strict, open} {
				go func() {
					r, err := l.Allow(ctx, "k", slidelog.PerMinute(10))
					answers <- answer{r, err}
				}()
			}
			redistest.WaitFor(t, "two WAITs blocked", func() bool { return redistest.Info(rdb, "blocked_clients") == "2" })
			if err := rdb.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rdb.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err() })
			var notReplicated, admitted int
			for range 2 {
				a := <-answers
				switch {
				case errors.Is(a.err, slidelog.ErrNotReplicated) && !a.r.Allowed:
					notReplicated++
				case a.err == nil && a.r.Allowed && a.r.Degraded():
					admitted++
				default:
					t.Errorf("a demoted master's WAIT: %+v, %v; want ErrNotReplicated (FailClosed) or a degraded admission (FailOpen)", a.r, a.err)
				}
			}
			if notReplicated != 1 || admitted != 1 {
				t.Errorf("%d ErrNotReplicated, %d admitted by FailOpen; want one each", notReplicated, admitted)
			}
		})
	}
}
