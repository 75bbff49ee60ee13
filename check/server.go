package check

// The checks Run makes on each server, one method each.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

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

// readConfig reads the settings Run needs with CONFIG GET, one at a
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
