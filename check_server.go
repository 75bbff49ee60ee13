package slidelog

// The checks Check runs on each server, one method each.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// checkScript is the script Check runs: slidelog's scripts take their
// clock from TIME.
var checkScript = redis.NewScript("-- slidelog check: may a script call TIME?\nreturn redis.call('TIME')")

// aclCommands are the commands slidelog sends, each with arguments that
// make ACL DRYRUN accept it; "KEY" stands for a key under the prefix.
var aclCommands = [][]any{
	{"EVALSHA", checkScript.Hash(), "1", "KEY"},
	{"EVAL", "return 1", "1", "KEY"},
	{"ZADD", "KEY", "1", "m"},
	{"ZCARD", "KEY"},
	{"ZRANGE", "KEY", "0", "-1"},
	{"ZCOUNT", "KEY", "0", "1"},
	{"ZREMRANGEBYSCORE", "KEY", "0", "1"},
	{"PEXPIREAT", "KEY", "1"},
	{"ZSCORE", "KEY", "m"},
	{"ZREM", "KEY", "m"},
	{"DEL", "KEY"},
	{"TIME"},
}

// serverCheck checks one server. A command the server answers with an
// error (NOPERM, unknown command) is a finding; any other failure (the
// network, the context) is fatal and ends the check.
type serverCheck struct {
	node    *redis.Client
	addr    string
	prefix  string
	cluster bool // the limiter's client is a ClusterClient
	acks    int  // WithReplicas' n: the replicas each admission waits for; 0 without

	found []Finding
	fatal error

	info    map[string]string // INFO's fields; nil when INFO was refused
	infoErr error
	config  map[string]string // CONFIG GET's answers, by parameter
	confErr error             // why CONFIG GET was refused
	major   int               // the Redis version's major number; 0 when unknown
}

func (s *serverCheck) add(sev Severity, check, format string, a ...any) {
	s.found = append(s.found, Finding{Severity: sev, Check: check, Server: s.addr, Text: fmt.Sprintf(format, a...)})
}

// refused reports whether err is the server's answer (an error reply), and
// records any other error as fatal.
func (s *serverCheck) refused(err error) bool {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return true
	}
	if s.fatal == nil {
		s.fatal = err
	}
	return false
}

// why is err in one line, for "could not check X: why".
func why(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

func (s *serverCheck) run(ctx context.Context) {
	for _, step := range []func(context.Context){
		s.readInfo, s.readConfig, s.server, s.maxmemory, s.persistence, s.replication, s.clusterState, s.script, s.acl,
	} {
		if step(ctx); s.fatal != nil || s.mode() == "sentinel" && s.found != nil {
			return
		}
	}
}

// failoverAddr is the address a Sentinel failover client's options hold.
const failoverAddr = "FailoverClient"

// masterAddr is the address of the master a failover client is connected
// to: as the master says (CLIENT INFO's laddr, Redis 6.2 and later), or
// else (Redis 6.0 has no CLIENT INFO) the address of a connection the
// failover client's dialer opens to the master its sentinels name.
func (s *serverCheck) masterAddr(ctx context.Context) string {
	info, err := s.node.Do(ctx, "CLIENT", "INFO").Text()
	for _, field := range strings.Fields(info) {
		if v, ok := strings.CutPrefix(field, "laddr="); ok && err == nil {
			return v
		}
	}
	if opts := s.node.Options(); opts.Dialer != nil {
		if conn, err := opts.Dialer(ctx, opts.Network, opts.Addr); err == nil {
			addr := conn.RemoteAddr().String()
			_ = conn.Close()
			if _, _, err := net.SplitHostPort(addr); err == nil {
				return addr
			}
		}
	}
	return "the failover client's master"
}

// readInfo reads INFO's default sections (server, memory, persistence,
// replication, cluster among them; one section name per call before
// Redis 7).
func (s *serverCheck) readInfo(ctx context.Context) {
	text, err := s.node.Info(ctx).Result()
	if err != nil {
		if s.refused(err) {
			s.infoErr = err
		}
		return
	}
	s.info = map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			s.info[k] = v
		}
	}
}

// readConfig reads the settings Check needs with CONFIG GET, one at a
// time (several in one CONFIG GET need Redis 7). A parameter the server
// does not have (lua-replicate-commands since Redis 7) answers nothing.
func (s *serverCheck) readConfig(ctx context.Context) {
	s.config = map[string]string{}
	for _, p := range []string{"maxmemory-policy", "maxmemory", "appendonly", "appendfsync", "save", "lua-replicate-commands"} {
		m, err := s.node.ConfigGet(ctx, p).Result()
		if err != nil {
			if s.refused(err) {
				s.confErr = err
			}
			return
		}
		if v, ok := m[p]; ok {
			s.config[p] = v
		}
	}
}

// setting is a CONFIG GET answer, or why it is not known.
func (s *serverCheck) setting(p string) (string, error) {
	if v, ok := s.config[p]; ok {
		return v, nil
	}
	if s.confErr != nil {
		return "", fmt.Errorf("CONFIG GET refused: %s", why(s.confErr))
	}
	return "", fmt.Errorf("CONFIG GET %s answered nothing", p)
}

func (s *serverCheck) server(context.Context) {
	if s.info == nil {
		s.add(SeverityWarning, "server", "could not check the server and its version: INFO refused: %s", why(s.infoErr))
		return
	}
	version := s.info["redis_version"]
	s.major, _ = strconv.Atoi(strings.Split(version, ".")[0])
	name := "Redis " + version
	if v := s.info["valkey_version"]; v != "" {
		name = "Valkey " + v
	}
	mode := s.mode()
	switch {
	case mode == "sentinel":
		s.add(SeverityProblem, "server", "%s is a Sentinel, not a data server: connect through a failover client (redis.NewFailoverClient) that asks it for the master", name)
	case s.major < 6 && version != "":
		s.add(SeverityProblem, "server", "%s (%s): slidelog needs Redis 6.0 or later", name, mode)
	case version == "":
		s.add(SeverityWarning, "server", "could not check the server's version: INFO gave no redis_version")
	default:
		s.add(SeverityInfo, "server", "%s (%s)", name, mode)
	}
}

// mode is INFO's redis_mode (Redis), or server_mode (Valkey 8):
// standalone, cluster or sentinel.
func (s *serverCheck) mode() string {
	if m := s.info["redis_mode"]; m != "" {
		return m
	}
	return s.info["server_mode"]
}

func (s *serverCheck) maxmemory(context.Context) {
	policy, err := s.setting("maxmemory-policy")
	source := ""
	if err != nil && s.info != nil && s.info["maxmemory_policy"] != "" {
		policy, err, source = s.info["maxmemory_policy"], nil, " (read from INFO)"
	}
	if err != nil {
		s.add(SeverityWarning, "maxmemory-policy", "could not check maxmemory-policy: %s; slidelog needs noeviction", why(err))
		return
	}
	if policy == "noeviction" {
		s.add(SeverityInfo, "maxmemory-policy", "maxmemory-policy noeviction%s: at maxmemory, admissions fail with OOM and no log is evicted", source)
		return
	}
	now := ""
	if v, err := s.setting("maxmemory"); err == nil && v == "0" {
		now = " (maxmemory is 0 now: no limit yet, but the policy applies once one is set)"
	}
	s.add(SeverityProblem, "maxmemory-policy", "maxmemory-policy %s%s can evict slidelog's logs (every log has a TTL, so volatile-* policies evict them as allkeys-* ones do): an evicted log is a limit that silently restarts; set maxmemory-policy noeviction%s",
		policy, source, now)
}

func (s *serverCheck) persistence(context.Context) {
	aof, err := s.setting("appendonly")
	if err != nil && s.info != nil && s.info["aof_enabled"] != "" {
		aof, err = map[string]string{"1": "yes", "0": "no"}[s.info["aof_enabled"]], nil
	}
	if err != nil || aof == "" {
		s.add(SeverityWarning, "persistence", "could not check persistence (appendonly, appendfsync, save): %s; without it a restart forgets every window", why(err))
		return
	}
	if aof == "yes" {
		fsync, err := s.setting("appendfsync")
		switch {
		case err != nil:
			s.add(SeverityWarning, "persistence", "appendonly yes; could not check appendfsync: %s (with everysec a crash may forget up to a second of admissions, with no up to about 30 s)", why(err))
		case fsync == "always":
			s.add(SeverityInfo, "persistence", "appendonly yes, appendfsync always: every admission is on disk before its answer; a restart or a crash forgets nothing")
		case fsync == "everysec":
			s.add(SeverityInfo, "persistence", "appendonly yes, appendfsync everysec: a clean restart forgets nothing, a crash up to about a second of admissions (appendfsync always: none)")
		default:
			s.add(SeverityWarning, "persistence", "appendonly yes, appendfsync %s: the system writes the AOF to disk when it likes, so a crash may forget the last 30 s or so of admissions, and limits admit them again; set appendfsync always or everysec", fsync)
		}
		return
	}
	save, err := s.setting("save")
	switch {
	case err != nil:
		s.add(SeverityWarning, "persistence", "appendonly no; could not check save: %s; without snapshots a restart forgets every window, and every limit admits a whole window again", why(err))
	case strings.TrimSpace(save) == "":
		s.add(SeverityWarning, "persistence", `no persistence (appendonly no, save ""): a restart forgets every window, and every limit admits a whole window again; set appendonly yes`)
	default:
		s.add(SeverityWarning, "persistence", `appendonly no, snapshots only (save %q): a crash forgets every admission since the last snapshot, and limits admit them again; set appendonly yes`, save)
	}
}

func (s *serverCheck) replication(context.Context) {
	if s.info == nil || s.info["role"] == "" {
		reason := "INFO gave no role"
		if s.infoErr != nil {
			reason = "INFO refused: " + why(s.infoErr)
		}
		s.add(SeverityWarning, "replication", "could not check replication: %s", reason)
		return
	}
	if s.info["role"] != "master" {
		s.add(SeverityProblem, "replication", "role %s (of %s:%s): slidelog writes every admission, and a replica refuses writes (READONLY) or loses them at its next sync; connect to the master",
			s.info["role"], s.info["master_host"], s.info["master_port"])
		return
	}
	n, online := s.replicas()
	syncing := ""
	if online < n {
		syncing = fmt.Sprintf("; %d of the %d connected still in their first sync, acknowledging no write yet", n-online, n)
	}
	if online < s.acks {
		s.add(SeverityProblem, "replication", "role master, %d of the %d replicas WithReplicas waits for connected and online: every admission waits its timeout and fails with ErrNotReplicated; connect more replicas or lower WithReplicas' n%s", online, s.acks, syncing)
		return
	}
	if s.acks > 0 {
		s.add(SeverityInfo, "replication", "role master, %s connected; WithReplicas: an admission waits until %d of them have it%s", plural(n, "replica"), s.acks, syncing)
		return
	}
	switch n {
	case 0:
		s.add(SeverityInfo, "replication", "role master, 0 replicas connected")
	case 1:
		s.add(SeverityInfo, "replication", "role master, 1 replica connected (replication is asynchronous: a failover may lose the last admissions)%s", syncing)
	default:
		s.add(SeverityInfo, "replication", "role master, %d replicas connected (replication is asynchronous: a failover may lose the last admissions)%s", n, syncing)
	}
}

// replicas are INFO's replicas connected (connected_slaves) and how many
// of them are online (a slaveN line with state=online): a replica still
// in its first sync acknowledges no WAIT.
func (s *serverCheck) replicas() (connected, online int) {
	connected, _ = strconv.Atoi(s.info["connected_slaves"])
	lines := 0
	for k, v := range s.info {
		if n, ok := strings.CutPrefix(k, "slave"); !ok || n == "" || strings.Trim(n, "0123456789") != "" {
			continue
		}
		lines++
		for _, field := range strings.Split(v, ",") {
			if field == "state=online" {
				online++
			}
		}
	}
	if lines == 0 {
		online = connected // no details: take them as online
	}
	return connected, online
}

func (s *serverCheck) clusterState(ctx context.Context) {
	if s.info == nil || s.info["cluster_enabled"] != "1" {
		return
	}
	if !s.cluster {
		s.add(SeverityProblem, "cluster", "a Cluster node behind a client that is not a *redis.ClusterClient: keys on other nodes' slots fail with MOVED; use redis.NewClusterClient")
	}
	text, err := s.node.ClusterInfo(ctx).Result()
	if err != nil {
		if s.refused(err) {
			s.add(SeverityWarning, "cluster", "could not check the Cluster's state: CLUSTER INFO refused: %s", why(err))
		}
		return
	}
	f := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			f[k] = v
		}
	}
	if f["cluster_state"] != "ok" {
		s.add(SeverityProblem, "cluster", "cluster_state %s (%s of 16384 slots assigned, %s ok): decisions for keys of the slots not served fail (CLUSTERDOWN)",
			f["cluster_state"], f["cluster_slots_assigned"], f["cluster_slots_ok"])
		return
	}
	s.add(SeverityInfo, "cluster", "cluster_state ok, %s slots assigned, %s known nodes", f["cluster_slots_assigned"], f["cluster_known_nodes"])
}

// script runs checkScript by EVALSHA; on NOSCRIPT by EVAL, and then again
// by EVALSHA, as go-redis' Script.Run does with slidelog's scripts. On
// Redis 6, lua-replicate-commands no (yes by default; gone in Redis 7,
// which always replicates a script's effects) makes every write after TIME
// in a script fail: checkScript writes nothing, so the setting is read.
func (s *serverCheck) script(ctx context.Context) {
	fail := func(how string, err error) {
		if s.refused(err) {
			s.add(SeverityProblem, "script", "a script calling TIME failed (%s): %s; slidelog decides in Lua scripts that take their clock from TIME", how, why(err))
		}
	}
	how := "EVALSHA works and a script may call TIME"
	err := checkScript.EvalSha(ctx, s.node, nil).Err()
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err = checkScript.Eval(ctx, s.node, nil).Err(); err != nil {
			fail("EVAL after NOSCRIPT", err)
			return
		}
		if err = checkScript.EvalSha(ctx, s.node, nil).Err(); err != nil {
			fail("EVALSHA after EVAL", err)
			return
		}
		how = "EVALSHA, NOSCRIPT then EVAL, and TIME in a script work"
	} else if err != nil {
		fail("EVALSHA", err)
		return
	}
	if s.config["lua-replicate-commands"] == "no" {
		s.add(SeverityProblem, "script", "%s, but lua-replicate-commands is no: Redis 6 then refuses a script's writes after TIME (Write commands not allowed after non deterministic commands), and slidelog's scripts write after TIME: every admission fails; set lua-replicate-commands yes (the default)", how)
		return
	}
	s.add(SeverityInfo, "script", "%s", how)
}

// acl asks ACL DRYRUN (Redis 7 and later) whether the connection's user
// may run each command slidelog sends on a key under the prefix.
func (s *serverCheck) acl(ctx context.Context) {
	if s.major > 0 && s.major < 7 {
		s.add(SeverityWarning, "acl", "could not check ACL permissions: ACL DRYRUN needs Redis 7 or later")
		return
	}
	user, err := s.node.Do(ctx, "ACL", "WHOAMI").Text()
	if err != nil {
		if s.refused(err) {
			s.add(SeverityWarning, "acl", "could not check ACL permissions: ACL WHOAMI refused: %s", why(err))
		}
		return
	}
	key := s.prefix + "check"
	var denied []string
	commands := aclCommands
	if s.acks > 0 {
		commands = append(commands[:len(commands):len(commands)], []any{"WAIT", "1", "1"})
	}
	for _, c := range commands {
		args := []any{"ACL", "DRYRUN", user}
		for _, a := range c {
			if a == "KEY" {
				a = key
			}
			args = append(args, a)
		}
		answer, err := s.node.Do(ctx, args...).Text()
		if err != nil {
			if s.refused(err) {
				s.add(SeverityWarning, "acl", "could not check ACL permissions: ACL DRYRUN refused: %s", why(err))
			}
			return
		}
		if answer != "OK" {
			denied = append(denied, fmt.Sprintf("%s (%s)", c[0], why(errors.New(answer))))
		}
	}
	if len(denied) > 0 {
		s.add(SeverityProblem, "acl", "user %s may not run what slidelog sends on %s: %s", user, key, strings.Join(denied, "; "))
		return
	}
	s.add(SeverityInfo, "acl", "user %s may run every command slidelog sends on %s*", user, s.prefix)
}

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
