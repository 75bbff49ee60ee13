package transport

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/fault"
	"github.com/slidelog/slidelog/internal/reply"
)

// CanAcknowledge says why rdb cannot take WithReplicas(n, timeout), or nil.
func CanAcknowledge(rdb redis.Scripter, n int, timeout time.Duration) error {
	return (&Acks{n: n, timeout: timeout}).bind(rdb)
}

// AcksConfig is what WithReplicas' Acks are built from.
type AcksConfig struct {
	Client        redis.Scripter // a client CanAcknowledge accepted
	Script        *redis.Script  // the decision script
	N             int            // the replicas an admission waits for
	Timeout       time.Duration  // WAIT's timeout, rounded up to whole milliseconds (its unit)
	NotReplicated error          // the sentinel of an admission not acknowledged (ErrNotReplicated)
	Panics        fault.Panics   // a client's panic: its error
}

// NewAcks returns WithReplicas' Acks.
func NewAcks(c AcksConfig) *Acks {
	a := &Acks{script: c.Script, n: c.N, timeout: (c.Timeout + time.Millisecond - 1).Truncate(time.Millisecond),
		notReplicated: c.NotReplicated, panics: c.Panics}
	_ = a.bind(c.Client)
	return a
}

// Cluster reports whether the Acks reach the masters of a Cluster.
func (a *Acks) Cluster() bool { return a.cluster != nil }

// Timeout is WAIT's timeout, in whole milliseconds.
func (a *Acks) Timeout() time.Duration { return a.timeout }

// Acks is WithReplicas: the replicas an admission waits for, and how to
// reach the master of a key on one connection.
type Acks struct {
	n       int
	timeout time.Duration // whole milliseconds
	rdb     redis.Scripter
	script  *redis.Script // the decision script

	notReplicated error        // ErrNotReplicated
	panics        fault.Panics // a client's panic: its error

	single  interface{ Conn() *redis.Conn } // a single server or a failover client,
	cluster clusterMasters                  // or a Cluster
}

// clusterMasters is what Acks needs of a Cluster client.
type clusterMasters interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
	ReloadState(ctx context.Context)
}

// bind finds how to reach rdb's masters, or says why it cannot.
func (a *Acks) bind(rdb redis.Scripter) error {
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
func (a *Acks) master(ctx context.Context, key string) (*redis.Client, error) {
	if a.cluster == nil {
		return nil, nil
	}
	return a.cluster.MasterForKey(ctx, key)
}

// conn is a connection of master's pool (the single server's when master is
// nil), held until closed.
func (a *Acks) conn(master *redis.Client) *redis.Conn {
	if master == nil {
		return a.single.Conn()
	}
	return master.Conn()
}

// decide runs a decision that records events on a connection to the master
// of its keys and, when it admitted, WAITs for the replicas there. It
// returns the script's reply, and with it a notAcked error when the
// replicas did not acknowledge the admission.
func (a *Acks) decide(ctx context.Context, keys []string, args []any) (any, error) {
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
func (a *Acks) decideOnce(ctx context.Context, keys []string, args []any) (v any, err error) {
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
func (a *Acks) waitSafely(ctx context.Context, conn *redis.Conn) (err error) {
	defer a.panics.To(func(e error) { err = fault.NotAcked{Err: e} })
	return a.wait(ctx, conn)
}

// failed is told of a Cluster node's failure. A redirection (MOVED, ASK:
// the slot has moved, the script did not run) reloads the client's slot map
// now and reports true, to try again once; an unavailability (a dead
// master, a failover under way) has it reloaded in the background, so that
// the next decisions find the new master.
func (a *Acks) failed(ctx context.Context, err error) bool {
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
func (a *Acks) reload(ctx context.Context) {
	_ = a.cluster.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
}

// wait sends WAIT on conn, after an admission on it, and reports whether n
// replicas acknowledged every write the connection made. Its error is a
// notAcked: the admission is to be taken back. It wraps ErrNotReplicated
// when fewer replicas acknowledged, or WAIT failed for unavailability; a
// WAIT the server refuses (NOPERM) is a mistake, which no policy hides.
func (a *Acks) wait(ctx context.Context, conn *redis.Conn) error {
	got, err := conn.Wait(ctx, a.n, a.timeout).Result()
	switch {
	case err != nil && (fault.Unavailable(err) || fault.Demoted(err)):
		return fault.NotAcked{Err: fmt.Errorf("%w: WAIT %d %d: %w", a.notReplicated, a.n, a.timeout.Milliseconds(), err)}
	case err != nil:
		return fault.NotAcked{Err: fmt.Errorf("slidelog: WAIT %d %d: %w", a.n, a.timeout.Milliseconds(), err)}
	case got < int64(a.n):
		return fault.NotAcked{Err: fmt.Errorf("%w: %d of %d replicas acknowledged the admission within %v", a.notReplicated, got, a.n, a.timeout)}
	}
	return nil
}

// sendPipeline is the Batcher's send with WithReplicas: each master's script
// calls go in one pipeline on one connection to it; the denials and Peeks
// are answered as soon as the replies are in, and if any decision admitted,
// one WAIT on that connection covers every admission of the pipeline. On a
// Cluster the masters are served side by side, and the decisions a node
// redirected (MOVED, ASK: they did not run) go once more after the slot map
// is reloaded.
func (a *Acks) sendPipeline(ctx context.Context, m Merge, live []*pending) {
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
			defer a.panics.To(func(err error) { // the client panicked: this master's decisions fail
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
func (a *Acks) sendTo(ctx context.Context, master *redis.Client, calls []shared, stand map[*pending]*pending, redirect bool) (moved []*pending, failed bool) {
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
	// The WAIT holds the connection, not the Batcher: the next pipelines
	// (and their denials) go on while it lasts.
	go func() {
		defer func() { _ = conn.Close() }()
		defer a.panics.To(func(err error) { // the client panicked on WAIT's reply
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
