package main

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
)

// --replicas and --replicas-timeout: a bad value, a timeout not below
// --deadline, and --replicas on the embedded Redis (which has no replicas)
// are one line naming the flag, exit 2.
func TestServeReplicasBadValues(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"--replicas", "-1"}, "--replicas"},
		{[]string{"--replicas", "two"}, "-replicas"},
		{[]string{"--replicas", "1", "--replicas-timeout", "0s"}, "--replicas-timeout"},
		{[]string{"--replicas", "1", "--deadline", "100ms", "--replicas-timeout", "100ms"}, "--replicas-timeout"},
		{[]string{"--replicas", "1"}, "--replicas 1 needs a real Redis"},
	} {
		code, _, errs := runDone(append([]string{"serve", "--listen", "127.0.0.1:0"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.flag) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and an error in one line naming %s", c.args, code, errs, c.flag)
		}
	}
}

// serve --replicas 1 on a master with one replica admits, and the replica
// holds the event when the answer comes; --replicas 2 never admits (one
// replica cannot acknowledge for two) and spends nothing of the limit.
func TestServeReplicas(t *testing.T) {
	ctx := context.Background()
	master := redistest.Start(t, append(redistest.Safe(), "--repl-diskless-sync-delay", "0")...)
	host, port, _ := strings.Cut(master, ":")
	replica := redistest.Start(t, append(redistest.Safe(), "--replicaof", host, port)...)
	rdb := redis.NewClient(&redis.Options{Addr: master})
	defer func() { _ = rdb.Close() }()
	rr := redis.NewClient(&redis.Options{Addr: replica})
	defer func() { _ = rr.Close() }()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(rdb.Info(ctx, "replication").Val(), "state=online"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no replica online after a minute")
		}
	}
	// The replica acknowledges writes (its first sync done) before traffic:
	// then a busy machine only slows the acknowledgments the timeout bounds.
	if n, err := rdb.Wait(ctx, 1, 10*time.Second).Result(); err != nil || n < 1 {
		t.Fatalf("WAIT 1: %d, %v", n, err)
	}
	for _, c := range []struct {
		replicas int
		timeout  time.Duration
		codes    string
		events   int64
	}{
		{1, 5 * time.Second, "200 200 429", 2}, // a timeout no busy machine reaches
		{2, 300 * time.Millisecond, "503 503 503", 0},
	} {
		prefix := "replicas" + string(rune('0'+c.replicas))
		h, stop, err := serveHandler(serveConfig{key: "header:X-Tenant", policy: "closed", name: "x", instances: 1,
			limit: slidelog.PerMinute(2), deadline: 10 * time.Second, replicas: c.replicas, replicasTimeout: c.timeout},
			"redis://"+master, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var codes []string
		admitted := int64(0)
		for range 3 {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-Tenant", prefix)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			codes = append(codes, strings.TrimSpace(strings.Fields(w.Result().Status)[0]))
			if w.Code == 200 {
				// acknowledged: the replica holds every event answered admitted
				admitted++
				key := "slidelog:header:" + prefix
				if n := rr.ZCard(ctx, key).Val(); n < admitted {
					t.Errorf("--replicas %d: admitted %d, the replica holds %d events of %s", c.replicas, admitted, n, key)
				}
			}
		}
		stop()
		if got := strings.Join(codes, " "); got != c.codes {
			t.Errorf("--replicas %d: %s, want %s", c.replicas, got, c.codes)
		}
		waitEvents := func() int64 { return rdb.ZCard(ctx, "slidelog:header:"+prefix).Val() }
		for deadline := time.Now().Add(10 * time.Second); waitEvents() != c.events && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		}
		if n := waitEvents(); n != c.events {
			t.Errorf("--replicas %d: the master holds %d events, want %d", c.replicas, n, c.events)
		}
	}
}
