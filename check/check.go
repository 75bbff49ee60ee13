// Package check inspects a Redis before slidelog's traffic does, and says
// whether it keeps slidelog's events safely: what `slidelog check` prints,
// and what `slidelog serve` logs at start-up.
//
// A limit is only as exact as the Redis that keeps its events. A Redis
// that evicts keys (any maxmemory-policy but noeviction: every log
// has a TTL, so the volatile-* policies evict logs as readily as the
// allkeys-* ones) silently restarts a limit each time it evicts its log;
// one without persistence restarts every limit when it restarts; a replica
// refuses slidelog's writes; a managed service may refuse TIME in a script,
// or its ACL a command slidelog sends, and then every decision fails. None
// of that shows until traffic finds it: Run finds it first, from a client
// and the limiter's settings alone (the key prefix, WithReplicas' n). It
// takes part in no decision: a program calls it once, at start-up or from
// a health check, next to the limiter it checks.
//
// Run reports one Finding per check and server, each graded info (for the
// record), warning (a cost only in some event, or something that could not
// be checked) or problem (fails the check):
//
//   - server: the server (Redis or Valkey), its version and mode
//     (standalone, cluster); a server older than Redis 6.0 and a Sentinel
//     are problems;
//   - maxmemory-policy: anything but noeviction is a problem;
//   - persistence (appendonly, appendfsync, save): a warning saying what a
//     restart or a crash would forget;
//   - replication: the server's role (a replica is a problem) and the
//     replicas connected to it; with Options.Replicas n (a limiter with
//     WithReplicas(n, ...)), fewer than n of them online (connected and
//     done with their first sync) is a problem (every admission would fail
//     with ErrNotReplicated);
//   - cluster: cluster_state on a Cluster node; a Cluster node behind a
//     plain *redis.Client (MOVED for other nodes' slots) is a problem;
//   - script: that EVALSHA runs a script that calls TIME, falling back to
//     EVAL on NOSCRIPT (some managed services refuse TIME in scripts); on
//     Redis 6, lua-replicate-commands no is a problem (a script may then
//     not write after TIME);
//   - acl: on Redis 7 and later (ACL DRYRUN), that the connection's user
//     may run every command slidelog sends (Commands) on keys under the
//     prefix, and WAIT with Options.Replicas.
//
// A command that the server or the ACL refuses to an inspection (CONFIG
// GET, INFO, ACL on managed services) is a warning saying what could not be
// checked and why; Run reads maxmemory-policy from INFO when CONFIG GET is
// refused. A *redis.Client (also a Sentinel failover client) is checked as
// one server (a failover client's findings name the master it is connected
// to), a *redis.ClusterClient on every master (each compared with
// Options.Replicas), a *redis.Ring on every shard. Run writes no key; it
// loads one small script.
//
// docs/operations.md ("Checking a Redis") has what each check reads, the
// reasons, and the servers the checks are tested on.
package check

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
)

// Options are the settings of the limiter whose Redis Run checks.
type Options struct {
	// Prefix is the limiter's key prefix (WithPrefix), under which the ACL
	// check asks for the user's permissions; "" is slidelog's default,
	// "slidelog:".
	Prefix string
	// Replicas is the n of the limiter's WithReplicas(n, ...): the replicas
	// each admission waits for, which every master must have online, and
	// WAIT, which the user must be allowed. 0: no WithReplicas.
	Replicas int
}

// defaultPrefix is slidelog's, as New sets it without WithPrefix.
const defaultPrefix = "slidelog:"

// Severity grades a Finding.
type Severity int

const (
	// SeverityInfo is what was found, for the record: the server, its
	// version, a setting that is as slidelog needs it.
	SeverityInfo Severity = iota
	// SeverityWarning is a setting that costs exactness only in some event
	// (a restart, a crash), or something Run could not check (a command
	// the server or the user's ACL refused). It does not fail the check.
	SeverityWarning
	// SeverityProblem fails the check: the Redis may lose events silently
	// (an evicting maxmemory-policy), or cannot run slidelog at all (no
	// scripts, no TIME in a script, a command the ACL refuses).
	SeverityProblem
)

var severityNames = [...]string{SeverityInfo: "info", SeverityWarning: "warning", SeverityProblem: "problem"}

// String is "info", "warning" or "problem".
func (s Severity) String() string {
	if s < 0 || int(s) >= len(severityNames) {
		return "Severity(" + strconv.Itoa(int(s)) + ")"
	}
	return severityNames[s]
}

// MarshalText is the severity's String, so that JSON says "problem".
func (s Severity) MarshalText() ([]byte, error) {
	if s < 0 || int(s) >= len(severityNames) {
		return nil, fmt.Errorf("slidelog: invalid severity %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads what MarshalText writes.
func (s *Severity) UnmarshalText(b []byte) error {
	i := slices.Index(severityNames[:], string(b))
	if i < 0 {
		return fmt.Errorf("slidelog: unknown severity %q", b)
	}
	*s = Severity(i)
	return nil
}

// Finding is one thing Run found.
type Finding struct {
	Severity Severity `json:"severity"`
	// Check names what was checked: "server", "maxmemory-policy",
	// "persistence", "replication", "cluster", "script" or "acl".
	Check string `json:"check"`
	// Server is the address of the server the finding is about.
	Server string `json:"server"`
	// Text says in one line what was found and, for a problem or a
	// warning, what it costs and which setting to change.
	Text string `json:"text"`
}

// String is the finding in one line: "problem: host:port: text".
func (f Finding) String() string {
	return f.Severity.String() + ": " + f.Server + ": " + f.Text
}

// Report is what Run found: for each server in the order of their
// addresses, the findings in the order they were checked.
type Report struct {
	Findings []Finding `json:"findings"`
}

// OK reports whether no finding is a problem: the Redis keeps slidelog's
// events safely (warnings aside).
func (r Report) OK() bool { return len(r.Problems()) == 0 }

// Problems returns the findings that fail the check.
func (r Report) Problems() []Finding {
	var p []Finding
	for _, f := range r.Findings {
		if f.Severity == SeverityProblem {
			p = append(p, f)
		}
	}
	return p
}

// Run inspects the Redis that rdb, the client of a limiter with opts'
// settings, connects to, and reports what may cost slidelog its
// exactness (the package doc lists the checks). rdb is a *redis.Client
// (also a Sentinel failover client), a *redis.ClusterClient or a
// *redis.Ring.
//
// The error is for a check that could not be made at all: a server that
// cannot be reached, the context's end, a client of another type, a
// negative opts.Replicas. A reply that makes the client panic (go-redis
// does on one it cannot read, from a proxy or a server that lies) is an
// error too, wrapping slidelog.ErrPanic, as in every call of slidelog's:
// errors.Is(err, slidelog.ErrPanic) tells it.
func Run(ctx context.Context, rdb redis.Scripter, opts Options) (Report, error) {
	if opts.Replicas < 0 {
		return Report{}, fmt.Errorf("slidelog: check: Options.Replicas %d: want WithReplicas' n (1 or more), or 0 for none", opts.Replicas)
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = defaultPrefix
	}
	var servers []*redis.Client
	var listErr error
	cluster := false
	switch c := rdb.(type) {
	case *redis.Client:
		servers = append(servers, c)
	case *redis.ClusterClient:
		cluster = true
		var mu sync.Mutex
		listErr = c.ForEachMaster(ctx, func(_ context.Context, node *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			servers = append(servers, node)
			return nil
		})
	case *redis.Ring:
		var mu sync.Mutex
		listErr = c.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			servers = append(servers, node)
			return nil
		})
	default:
		return Report{}, fmt.Errorf("slidelog: check: cannot inspect a %T: check.Run knows *redis.Client, *redis.ClusterClient and *redis.Ring", rdb)
	}
	if listErr != nil {
		return Report{}, fmt.Errorf("slidelog: check: list the servers: %w", listErr)
	}
	if len(servers) == 0 {
		return Report{}, errors.New("slidelog: check: the client knows no server to check (a Cluster with no master serving slots?)")
	}
	slices.SortFunc(servers, func(a, b *redis.Client) int { return strings.Compare(a.Options().Addr, b.Options().Addr) })
	found := make([][]Finding, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, node := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer recoverTo(&errs[i]) // a reply the client could not read
			s := &serverCheck{node: node, addr: node.Options().Addr, prefix: prefix, cluster: cluster, acks: opts.Replicas}
			if s.addr == failoverAddr {
				s.addr = s.masterAddr(ctx)
			}
			s.run(ctx)
			found[i], errs[i] = s.found, s.fatal
		}()
	}
	wg.Wait()
	var r Report
	for i := range servers {
		if errs[i] != nil {
			return Report{}, fmt.Errorf("slidelog: check %s: %w", servers[i].Options().Addr, errs[i])
		}
		r.Findings = append(r.Findings, found[i]...)
	}
	return r, nil
}

// recoverTo, deferred, turns a panic of the goroutine into an error
// wrapping slidelog.ErrPanic, with the panic's value, and stores it in
// *err; without a panic it does nothing. The error reads as the root's
// own ("slidelog: the Redis client panicked: value").
func recoverTo(err *error) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("%w: %v", slidelog.ErrPanic, v)
	}
}
