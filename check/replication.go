package check

// Run's replication and Cluster checks: the replicas WithReplicas needs,
// and the Cluster's state.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

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

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
