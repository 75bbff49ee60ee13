package slidelog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/config"
	"github.com/slidelog/slidelog/internal/fault"
	"github.com/slidelog/slidelog/internal/reply"
)

// WithReplicas answers an admission allowed only once n replicas have
// acknowledged its write: after the decision script admits, Redis' WAIT n
// timeout runs on the same connection (WAIT is refused inside scripts), on
// the master that holds the key. Redis replication is asynchronous, so
// without it a master that fails over before its replicas received the last
// admissions loses them, and the promoted replica admits them again: a
// window can hold more than the limit. With it, every event a caller was
// told is admitted is on n replicas when the call returns, and a failover to
// one of them keeps it.
//
// If fewer than n replicas acknowledge within timeout (or the WAIT fails),
// the call returns an error wrapping ErrNotReplicated, and the events it
// recorded are taken back (Refund) while the master can still be reached,
// so that a slow or lost replica does not spend the quota. ErrNotReplicated
// is an unavailability: WithPolicy answers for it (FailOpen admits, Degraded).
//
// What waits: Allow, AllowN, AllowAll and AcquireN when they admit. A denial or a
// Peek writes no event and answers at once; Refund and Reset do not wait
// either (losing one of them in a failover brings events back, which makes
// the limit stricter, never looser). With batching (the default), the
// decisions of a pipeline run on one connection to their master and one
// WAIT after the pipeline covers all of its admissions (on a Cluster, one
// per master); its denials and Peeks are answered before the WAIT. A call
// cut short by its context is not answered allowed. Its events are taken
// back once its outcome is known: a batched call's when its pipeline
// answers, any call's when its context ends during the WAIT. A call cut
// while its script runs on its own is like any call whose outcome is
// unknown: its events may stay recorded (stricter, never looser).
//
// Cost: an admission takes a second round trip (the WAIT, which lasts until
// the replicas have acknowledged: about one round trip from the master to
// them) and a connection of the pool for both; denials cost nothing more.
//
// The client must be one whose master slidelog can hold a connection to:
// a *redis.Client (a single server with replicas), a Sentinel failover
// client, or a *redis.ClusterClient (a UniversalClient holding one of
// them). New panics on a *redis.Ring, whose shards have no replicas to wait
// for, if n < 1, or if timeout <= 0: WAIT with no timeout would block until
// acknowledged, forever if a replica never comes back, so pass a long
// timeout instead. timeout is rounded up to whole milliseconds (WAIT's
// unit); choose it below the callers' deadlines, so that a failed
// acknowledgment is told as ErrNotReplicated rather than as a deadline.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(c *config.Config) { c.Replicas = &config.Replicas{N: n, Timeout: timeout} }
}

// canAcknowledge says why rdb cannot take WithReplicas(n, timeout), or nil.
func canAcknowledge(rdb redis.Scripter, n int, timeout time.Duration) error {
	return (&acks{n: n, timeout: timeout}).bind(rdb)
}

// newAcks is WithReplicas' acks on rdb (which canAcknowledge accepted):
// timeout rounded up to whole milliseconds, WAIT's unit.
func newAcks(rdb redis.Scripter, r config.Replicas, script *redis.Script) *acks {
	a := &acks{script: script, n: r.N, timeout: (r.Timeout + time.Millisecond - 1).Truncate(time.Millisecond)}
	_ = a.bind(rdb)
	return a
}

// acks is WithReplicas: the replicas an admission waits for, and how to
// reach the master of a key on one connection.
type acks struct {
	n       int
	timeout time.Duration // whole milliseconds
	rdb     redis.Scripter
	script  *redis.Script // the decision script

	single  interface{ Conn() *redis.Conn } // a single server or a failover client,
	cluster clusterMasters                  // or a Cluster
}

// clusterMasters is what acks needs of a Cluster client.
type clusterMasters interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
	ReloadState(ctx context.Context)
}

// bind finds how to reach rdb's masters, or says why it cannot.
func (a *acks) bind(rdb redis.Scripter) error {
	a.rdb = rdb
	switch c := rdb.(type) {
	case clusterMasters:
		a.cluster = c
	case interface{ Conn() *redis.Conn }:
		a.single = c
	case *redis.Ring:
		return fmt.Errorf("WithReplicas(%d, %v) on a *redis.Ring: its shards are independent servers with no replicas to wait for; use a *redis.Client, a Sentinel failover client or a *redis.ClusterClient", a.n, a.timeout)
	default:
		return fmt.Errorf("WithReplicas(%d, %v) needs a client that can hold a connection to a key's master: a *redis.Client, a Sentinel failover client or a *redis.ClusterClient (a %T is none of them)", a.n, a.timeout, rdb)
	}
	return nil
}

// master is the Cluster client of key's master; nil on a single server.
func (a *acks) master(ctx context.Context, key string) (*redis.Client, error) {
	if a.cluster == nil {
		return nil, nil
	}
	return a.cluster.MasterForKey(ctx, key)
}

// conn is a connection of master's pool (the single server's when master is
// nil), held until closed.
func (a *acks) conn(master *redis.Client) *redis.Conn {
	if master == nil {
		return a.single.Conn()
	}
	return master.Conn()
}

// decide runs a decision that records events on a connection to the master
// of its keys and, when it admitted, WAITs for the replicas there. It
// returns the script's reply, and with it a notAcked error when the
// replicas did not acknowledge the admission.
func (a *acks) decide(ctx context.Context, keys []string, args []any) (any, error) {
	for attempt := 0; ; attempt++ {
		v, err := a.decideOnce(ctx, keys, args)
		if err != nil && a.failed(ctx, err) && attempt == 0 {
			continue // redirected: the script did not run; the slot map is fresh now
		}
		return v, err
	}
}

// decideOnce is one attempt of decide, on a connection of its own, which
// it closes however it ends (a client's panic too: the connection would
// stay out of the pool for good). A panic on WAIT's reply is a notAcked
// error, as in a pipeline: the admission is taken back.
func (a *acks) decideOnce(ctx context.Context, keys []string, args []any) (v any, err error) {
	master, err := a.master(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	conn := a.conn(master)
	defer func() { _ = conn.Close() }()
	v, err = a.script.Run(ctx, conn, keys, args...).Result()
	if err == nil && reply.Admits(v) {
		err = a.waitSafely(ctx, conn)
	}
	return v, err
}

// waitSafely is wait, whose panic (the client's, on WAIT's reply) is a
// notAcked error.
func (a *acks) waitSafely(ctx context.Context, conn *redis.Conn) (err error) {
	defer panics().To(func(e error) { err = fault.NotAcked{Err: e} })
	return a.wait(ctx, conn)
}

// failed is told of a Cluster node's failure. A redirection (MOVED, ASK:
// the slot has moved, the script did not run) reloads the client's slot map
// now and reports true, to try again once; an unavailability (a dead
// master, a failover under way) has it reloaded in the background, so that
// the next decisions find the new master.
func (a *acks) failed(ctx context.Context, err error) bool {
	if a.cluster == nil {
		return false
	}
	if fault.Redirection(err) {
		a.reload(ctx)
		return true
	}
	if fault.Unavailable(err) {
		a.cluster.ReloadState(ctx)
	}
	return false
}

// reload brings the Cluster client's slot map up to date now:
// ForEachMaster reloads it before it visits the masters (ReloadState only
// schedules a reload).
func (a *acks) reload(ctx context.Context) {
	_ = a.cluster.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
}

// wait sends WAIT on conn, after an admission on it, and reports whether n
// replicas acknowledged every write the connection made. Its error is a
// notAcked: the admission is to be taken back. It wraps ErrNotReplicated
// when fewer replicas acknowledged, or WAIT failed for unavailability; a
// WAIT the server refuses (NOPERM) is a mistake, which no policy hides.
func (a *acks) wait(ctx context.Context, conn *redis.Conn) error {
	got, err := conn.Wait(ctx, a.n, a.timeout).Result()
	switch {
	case err != nil && (fault.Unavailable(err) || fault.Demoted(err)):
		return fault.NotAcked{Err: fmt.Errorf("%w: WAIT %d %d: %w", ErrNotReplicated, a.n, a.timeout.Milliseconds(), err)}
	case err != nil:
		return fault.NotAcked{Err: fmt.Errorf("slidelog: WAIT %d %d: %w", a.n, a.timeout.Milliseconds(), err)}
	case got < int64(a.n):
		return fault.NotAcked{Err: fmt.Errorf("%w: %d of %d replicas acknowledged the admission within %v", ErrNotReplicated, got, a.n, a.timeout)}
	}
	return nil
}

// sendPipeline is the batcher's send with WithReplicas: each master's script
// calls go in one pipeline on one connection to it; the denials and Peeks
// are answered as soon as the replies are in, and if any decision admitted,
// one WAIT on that connection covers every admission of the pipeline. On a
// Cluster the masters are served side by side, and the decisions a node
// redirected (MOVED, ASK: they did not run) go once more after the slot map
// is reloaded.
func (a *acks) sendPipeline(ctx context.Context, m merge, live []*pending) {
	for attempt := 0; len(live) > 0; attempt++ {
		// Each decision travels as a stand-in, which the pipeline answers;
		// the caller is answered when its reply is final.
		stand := make(map[*pending]*pending, len(live))
		proxies := make([]*pending, len(live))
		for i, p := range live {
			proxies[i] = &pending{ctx: p.ctx, keys: p.keys, args: p.args, done: make(chan struct{}), take: p.take}
			stand[proxies[i]] = p
		}
		groups := map[*redis.Client][]shared{}
		var order []*redis.Client
		for _, c := range m.plan(proxies) {
			master, err := a.master(ctx, c.keys[0])
			if err != nil {
				for _, q := range c.of {
					stand[q].reply(nil, err)
				}
				continue
			}
			if _, ok := groups[master]; !ok {
				order = append(order, master)
			}
			groups[master] = append(groups[master], c)
		}
		var mu sync.Mutex
		var redirected []*pending
		var failed bool
		send := func(master *redis.Client) {
			defer panics().To(func(err error) { // the client panicked: this master's decisions fail
				for _, c := range groups[master] {
					for _, q := range c.of {
						stand[q].reply(nil, err)
					}
				}
			})
			moved, f := a.sendTo(ctx, master, groups[master], stand, attempt == 0 && a.cluster != nil)
			mu.Lock()
			redirected = append(redirected, moved...)
			failed = failed || f
			mu.Unlock()
		}
		if len(order) == 1 {
			send(order[0])
		} else {
			var wg sync.WaitGroup
			for _, master := range order {
				wg.Add(1)
				go func() {
					defer wg.Done()
					send(master)
				}()
			}
			wg.Wait()
		}
		switch {
		case len(redirected) > 0:
			a.reload(ctx)
		case failed && a.cluster != nil:
			a.cluster.ReloadState(ctx)
		}
		live = redirected
	}
}

// sendTo sends calls (of stand-ins) on one connection to master, answers
// their callers (see sendPipeline; the admissions once a WAIT in the
// background has answered) and reports whether a call failed for
// unavailability. With redirect, the callers whose decisions a Cluster node
// redirected are not answered but returned, to be sent again.
func (a *acks) sendTo(ctx context.Context, master *redis.Client, calls []shared, stand map[*pending]*pending, redirect bool) (moved []*pending, failed bool) {
	conn := a.conn(master)
	handed := false // to the WAIT's goroutine, which closes it
	defer func() {
		if !handed {
			_ = conn.Close() // however sendTo ends: a client's panic too
		}
	}()
	runCalls(ctx, conn, a.script, calls)
	var waiting []*pending
	for _, c := range calls {
		for _, q := range c.of {
			p := stand[q]
			switch {
			case redirect && fault.Redirection(q.err):
				moved = append(moved, p)
				continue
			case q.err == nil && p.take != nil && reply.Admits(q.val):
				waiting = append(waiting, q)
				continue
			case q.err != nil && fault.Unavailable(q.err):
				failed = true
			}
			p.reply(q.val, q.err)
		}
	}
	if len(waiting) == 0 {
		return moved, failed
	}
	handed = true
	// The WAIT holds the connection, not the batcher: the next pipelines
	// (and their denials) go on while it lasts.
	go func() {
		defer func() { _ = conn.Close() }()
		defer panics().To(func(err error) { // the client panicked on WAIT's reply
			for _, q := range waiting {
				stand[q].reply(q.val, fault.NotAcked{Err: err})
			}
		})
		err := a.wait(ctx, conn)
		if err != nil && a.cluster != nil {
			a.cluster.ReloadState(ctx)
		}
		for _, q := range waiting {
			stand[q].reply(q.val, err)
		}
	}()
	return moved, failed
}
