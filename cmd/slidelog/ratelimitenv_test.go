package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// getenvOf is a getenv over vars alone.
func getenvOf(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// Unset, every variable has envoyproxy/ratelimit's default.
func TestRatelimitEnvDefaults(t *testing.T) {
	e, err := readRatelimitEnv(getenvOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := &ratelimitEnv{
		config: "/srv/runtime_data/current/config", http: "0.0.0.0:8080", grpc: "0.0.0.0:8081", debug: "0.0.0.0:6070",
		logLevel: "warn", logFormat: "text", headers: "none",
		limitHeader: "RateLimit-Limit", remainingHeader: "RateLimit-Remaining", resetHeader: "RateLimit-Reset",
		nearLimit: 0.8, maxConnAge: 24 * time.Hour, maxConnAgeGrace: time.Hour,
		redis: ratelimitRedis{socketType: "unix", typ: "single", url: "/var/run/nutcracker/ratelimit.sock", timeout: 10 * time.Second},
	}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("defaults:\n%+v\nwant\n%+v", e, want)
	}
}

// Each variable rls honours, and what it sets.
func TestRatelimitEnvVariables(t *testing.T) {
	for _, c := range []struct {
		vars map[string]string
		get  func(*ratelimitEnv) any
		want any
	}{
		{map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit"}, func(e *ratelimitEnv) any { return e.config }, "/data/ratelimit/config"},
		{map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_APPDIRECTORY": "rules"}, func(e *ratelimitEnv) any { return e.config }, "/data/rules"},
		{map[string]string{"RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true"}, func(e *ratelimitEnv) any { return e.ignored }, []string(nil)},
		{map[string]string{"HOST": "::", "PORT": "9000"}, func(e *ratelimitEnv) any { return e.http }, "[::]:9000"},
		{map[string]string{"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "9001"}, func(e *ratelimitEnv) any { return e.grpc }, "127.0.0.1:9001"},
		{map[string]string{"GRPC_UDS": "/tmp/rl.sock", "GRPC_PORT": "9001"}, func(e *ratelimitEnv) any { return e.grpc }, "unix:/tmp/rl.sock"},
		{map[string]string{"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "7000"}, func(e *ratelimitEnv) any { return e.debug }, "127.0.0.1:7000"},
		{map[string]string{"LOG_LEVEL": "DEBUG"}, func(e *ratelimitEnv) any { return e.logLevel }, "DEBUG"},
		{map[string]string{"LOG_LEVEL": "warning"}, func(e *ratelimitEnv) any { return e.logLevel }, "warning"},
		{map[string]string{"LOG_FORMAT": "JSON"}, func(e *ratelimitEnv) any { return e.logFormat }, "json"},
		{map[string]string{"CONFIG_TYPE": "FILE", "BACKEND_TYPE": "redis"}, func(e *ratelimitEnv) any { return e.config }, "/srv/runtime_data/current/config"},
		{map[string]string{"SHADOW_MODE": "true"}, func(e *ratelimitEnv) any { return e.shadow }, true},
		{map[string]string{"QUOTA_MODE": "1"}, func(e *ratelimitEnv) any { return e.quota }, true},
		{map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}, func(e *ratelimitEnv) any { return e.headers }, "legacy"},
		{map[string]string{"LIMIT_LIMIT_HEADER": "X-L", "LIMIT_REMAINING_HEADER": "X-R", "LIMIT_RESET_HEADER": "X-T"},
			func(e *ratelimitEnv) any { return []string{e.limitHeader, e.remainingHeader, e.resetHeader} }, []string{"X-L", "X-R", "X-T"}},
		{map[string]string{"NEAR_LIMIT_RATIO": "0.9"}, func(e *ratelimitEnv) any { return e.nearLimit }, 0.9},
		{map[string]string{"CACHE_KEY_PREFIX": "rl_"}, func(e *ratelimitEnv) any { return e.prefix }, "rl_"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c", "GRPC_SERVER_TLS_KEY": "/k", "GRPC_CLIENT_TLS_CACERT": "/ca", "GRPC_CLIENT_TLS_SAN": "envoy"},
			func(e *ratelimitEnv) any { return []string{e.tlsCert, e.tlsKey, e.tlsClientCA, e.tlsClientSAN} }, []string{"/c", "/k", "/ca", "envoy"}},
		// without GRPC_SERVER_USE_TLS, its files are not read (Envoy Gateway's
		// GRPC_SERVER_TLS_CA_CERT, which envoyproxy/ratelimit never reads, neither)
		{map[string]string{"GRPC_SERVER_TLS_CERT": "/c", "GRPC_SERVER_TLS_KEY": "/k", "GRPC_SERVER_TLS_CA_CERT": "/ca"},
			func(e *ratelimitEnv) any { return []string{e.tlsCert, e.tlsKey, e.tlsClientCA} }, []string{"", "", ""}},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "1h", "GRPC_MAX_CONNECTION_AGE_GRACE": "30s"},
			func(e *ratelimitEnv) any { return []time.Duration{e.maxConnAge, e.maxConnAgeGrace} }, []time.Duration{time.Hour, 30 * time.Second}},
		{map[string]string{"USE_PROMETHEUS": "true"}, func(e *ratelimitEnv) any { return e.metricsAddr + " " + e.metricsPath }, ":9090 /metrics"},
		{map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "PROMETHEUS_PATH": "/m"}, func(e *ratelimitEnv) any { return e.metricsAddr + " " + e.metricsPath }, ":19001 /m"},
		{map[string]string{"PROMETHEUS_ADDR": ":19001"}, func(e *ratelimitEnv) any { return e.metricsAddr }, ""},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"},
			func(e *ratelimitEnv) any { return e.redis.socketType + " " + e.redis.typ + " " + e.redis.url }, "tcp single redis:6379"},
		{map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_SENTINEL_AUTH": "spw"},
			func(e *ratelimitEnv) any { return e.redis.typ + " " + e.redis.url + " " + e.redis.sentinelAuth }, "sentinel mymaster,s1:26379,s2:26379 spw"},
		{map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "a:7000,b:7001"}, func(e *ratelimitEnv) any { return e.redis.typ }, "cluster"},
		{map[string]string{"REDIS_AUTH": "user:pw"}, func(e *ratelimitEnv) any { return e.redis.auth }, "user:pw"},
		{map[string]string{"REDIS_POOL_SIZE": "25"}, func(e *ratelimitEnv) any { return e.redis.poolSize }, 25},
		{map[string]string{"REDIS_TIMEOUT": "2s"}, func(e *ratelimitEnv) any { return []any{e.redis.timeout, e.redis.timeoutSet} }, []any{2 * time.Second, true}},
		{map[string]string{"REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/c", "REDIS_TLS_CLIENT_KEY": "/k", "REDIS_TLS_CACERT": "/ca", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"},
			func(e *ratelimitEnv) any {
				r := e.redis
				return []any{r.tls, r.cert, r.key, r.ca, r.skipVerify}
			}, []any{true, "/c", "/k", "/ca", true}},
		{map[string]string{"REDIS_POOL_ON_EMPTY_BEHAVIOR": "wait"}, func(e *ratelimitEnv) any { return e.ignored }, []string(nil)},
		// read by envoyproxy/ratelimit only with the features rls refuses
		// (memcached, a per-second Redis) or with another CONFIG_TYPE (the
		// xDS server's with FILE): ignored, as it ignores them
		{map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": "eg:18001", "MEMCACHE_HOST_PORT": "m:11211", "REDIS_PERSECOND_URL": "r2:6379"},
			func(e *ratelimitEnv) any { return []any{e.ignored, e.xds} }, []any{[]string(nil), (*ratelimitXDS)(nil)}},
		// CONFIG_TYPE=GRPC_XDS_SOTW: the xDS server and its settings, at
		// envoyproxy/ratelimit's defaults
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}, func(e *ratelimitEnv) any { return *e.xds },
			ratelimitXDS{url: "localhost:18000", nodeID: "default", metadata: map[string]string{}, headers: map[string]string{}, retry: 3 * time.Second}},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
			"CONFIG_GRPC_XDS_NODE_METADATA": "zone=a,team=x=y", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-tenant:t1,Authorization:Bearer a:b",
			"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "500ms", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "8388608",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
			"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt", "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "envoy-gateway"},
			func(e *ratelimitEnv) any { return *e.xds },
			ratelimitXDS{url: "envoy-gateway:18001", nodeID: "envoy-ratelimit", metadata: map[string]string{"zone": "a", "team": "x=y"},
				headers: map[string]string{"x-tenant": "t1", "authorization": "Bearer a:b"}, retry: 500 * time.Millisecond, maxMsg: 8388608,
				tls: true, cert: "/certs/tls.crt", key: "/certs/tls.key", ca: "/certs/ca.crt", san: "envoy-gateway"}},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"},
			func(e *ratelimitEnv) any { return []bool{e.forceStart, e.healthyWithConfig} }, []bool{true, true}},
		// with FILE, they change nothing
		{map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"},
			func(e *ratelimitEnv) any { return []bool{e.forceStart, e.healthyWithConfig} }, []bool{false, false}},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "zone=a,oops"}, func(e *ratelimitEnv) any { return e.hints },
			[]string{`CONFIG_GRPC_XDS_NODE_METADATA: "oops" is not key=value, and is not sent (as envoyproxy/ratelimit skips it)`}},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "5s"}, func(e *ratelimitEnv) any { return e.ignored },
			[]string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=5s: the xDS client waits CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL (±50%) before connecting again"}},
		// set to their defaults, the ignored ones say nothing
		{map[string]string{"USE_STATSD": "false", "DISABLE_STATS": "0", "STATS_FLUSH_INTERVAL": "10000ms", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true"},
			func(e *ratelimitEnv) any { return e.ignored }, []string(nil)},
	} {
		e, err := readRatelimitEnv(getenvOf(c.vars))
		if err != nil {
			t.Errorf("%v: %v", c.vars, err)
			continue
		}
		if got := c.get(e); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v: %#v, want %#v", c.vars, got, c.want)
		}
	}
}

// A value rls cannot honour, or that does not parse, is refused with its
// name and why; every one of them at once.
func TestRatelimitEnvRefused(t *testing.T) {
	for _, c := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"CONFIG_TYPE": "file"}, `CONFIG_TYPE="file": want FILE or GRPC_XDS_SOTW`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-tenant=t1"}, `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS="x-tenant=t1": want key:value`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "3"}, `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL="3": want a duration`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "0s"}, `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL="0s": want more than 0`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "4MB"}, `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES="4MB": want a whole number`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/c"}, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together"},
		{map[string]string{"BACKEND_TYPE": "memcache"}, `BACKEND_TYPE="memcache": memcached is not offered`},
		{map[string]string{"REDIS_PERSECOND": "true"}, `REDIS_PERSECOND="true": a second Redis`},
		{map[string]string{"REDIS_TYPE": "ring"}, `REDIS_TYPE="ring": want single, sentinel, cluster`},
		{map[string]string{"REDIS_SOCKET_TYPE": "udp"}, `REDIS_SOCKET_TYPE="udp": want tcp, unix`},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "s1:26379"}, `REDIS_URL="s1:26379": REDIS_TYPE=SENTINEL wants the master's name`},
		{map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "redis://a:7000"}, `REDIS_URL="redis://a:7000": REDIS_TYPE=CLUSTER wants HOST:PORT addresses`},
		{map[string]string{"REDIS_POOL_SIZE": "0"}, `REDIS_POOL_SIZE="0": want a whole number, at least 1`},
		{map[string]string{"REDIS_TIMEOUT": "10"}, `REDIS_TIMEOUT="10": want a duration`},
		{map[string]string{"REDIS_TLS": "yes"}, `REDIS_TLS="yes": want true or false`},
		{map[string]string{"REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/c"}, "REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together"},
		{map[string]string{"REDIS_POOL_ON_EMPTY_BEHAVIOR": "CREATE"}, `REDIS_POOL_ON_EMPTY_BEHAVIOR="CREATE": not supported`},
		{map[string]string{"PORT": "http"}, `PORT="http": want a port number`},
		{map[string]string{"GRPC_PORT": "70000"}, `GRPC_PORT="70000": want a port number`},
		{map[string]string{"DEBUG_PORT": "-1"}, `DEBUG_PORT="-1": want a port number`},
		{map[string]string{"LOG_LEVEL": "loud"}, `LOG_LEVEL="loud": want debug, info, warn or error`},
		{map[string]string{"LOG_FORMAT": "logfmt"}, `LOG_FORMAT="logfmt": want text, json`},
		{map[string]string{"SHADOW_MODE": "on"}, `SHADOW_MODE="on": want true or false`},
		{map[string]string{"NEAR_LIMIT_RATIO": "1.5"}, `NEAR_LIMIT_RATIO="1.5": want a number above 0`},
		{map[string]string{"LIMIT_RESET_HEADER": "Reset Time"}, `LIMIT_RESET_HEADER="Reset Time": want a header name`},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c"}, "GRPC_SERVER_USE_TLS=true wants GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c", "GRPC_SERVER_TLS_KEY": "/k", "GRPC_CLIENT_TLS_SAN": "x"}, "GRPC_CLIENT_TLS_SAN wants GRPC_CLIENT_TLS_CACERT"},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "forever"}, `GRPC_MAX_CONNECTION_AGE="forever": want a duration`},
		{map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_PATH": "metrics"}, `PROMETHEUS_PATH="metrics": want a path starting with /`},
		{map[string]string{"RUNTIME_WATCH_ROOT": "maybe"}, `RUNTIME_WATCH_ROOT="maybe": want true or false`},
	} {
		_, err := readRatelimitEnv(getenvOf(c.vars))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.vars, err, c.want)
		}
	}
	// every refusal at once, each on a line of its own
	_, err := readRatelimitEnv(getenvOf(map[string]string{"CONFIG_TYPE": "XDS", "PORT": "x"}))
	if err == nil || len(strings.Split(err.Error(), "\n")) != 2 {
		t.Errorf("two refusals: %v", err)
	}
}

// A variable that asks for what rls does not do is logged once, with why;
// at its default it says nothing.
func TestRatelimitEnvIgnored(t *testing.T) {
	e, err := readRatelimitEnv(getenvOf(map[string]string{
		"USE_STATSD": "true", "STATSD_PORT": "9125", "TRACING_ENABLED": "true", "PROMETHEUS_MAPPER_YAML": "/etc/m.yaml",
		"LOCAL_CACHE_SIZE_IN_BYTES": "1000000", "RUNTIME_IGNOREDOTFILES": "false", "MERGE_DOMAIN_CONFIG": "true",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false", "REDIS_PIPELINE_WINDOW": "150us",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"USE_STATSD=true: no statsd is sent",
		"STATSD_PORT=9125: no statsd is sent",
		"PROMETHEUS_MAPPER_YAML=/etc/m.yaml: the metrics' names are fixed",
		"TRACING_ENABLED=true: no traces are sent",
		"LOCAL_CACHE_SIZE_IN_BYTES=1000000: no local cache of denials",
		"MERGE_DOMAIN_CONFIG=true: files of one domain are not merged",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false: denied hits are never counted",
		"REDIS_PIPELINE_WINDOW=150us: the limiter batches",
		"RUNTIME_IGNOREDOTFILES=false: files whose names start with '.' are never read",
	}
	if len(e.ignored) != len(want) {
		t.Fatalf("ignored:\n%s\nwant %d lines", strings.Join(e.ignored, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(e.ignored[i], w) {
			t.Errorf("line %d: %q, want %q...", i, e.ignored[i], w)
		}
	}
}

// The binary run as ratelimit is rls with envoyproxy/ratelimit's variables,
// unless its arguments name a command.
func TestArgsFor(t *testing.T) {
	for _, c := range []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"/slidelog", []string{"serve"}, []string{"serve"}},
		{"/bin/ratelimit", nil, []string{"rls", "--ratelimit-env"}},
		{"ratelimit", []string{"--log-level", "debug"}, []string{"rls", "--ratelimit-env", "--log-level", "debug"}},
		{"/bin/ratelimit", []string{"healthcheck"}, []string{"healthcheck"}},
		{"/bin/ratelimit", []string{"version"}, []string{"version"}},
		{"/bin/ratelimit", []string{"serve", "--listen", ":8080"}, []string{"serve", "--listen", ":8080"}},
		{"/usr/bin/ratelimit-old", nil, nil},
	} {
		if got := argsFor(c.argv0, c.args); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %q: %q, want %q", c.argv0, c.args, got, c.want)
		}
	}
}

func TestDefaultHealthURL(t *testing.T) {
	for _, c := range []struct {
		vars map[string]string
		want string
	}{
		{nil, "http://127.0.0.1:8080/healthcheck"},
		{map[string]string{"HOST": "::", "PORT": "9000"}, "http://127.0.0.1:9000/healthcheck"},
		{map[string]string{"HOST": "0.0.0.0"}, "http://127.0.0.1:8080/healthcheck"},
		{map[string]string{"HOST": "10.1.2.3"}, "http://10.1.2.3:8080/healthcheck"},
		{map[string]string{"HOST": "fd00::1"}, "http://[fd00::1]:8080/healthcheck"},
	} {
		if got := defaultHealthURL(getenvOf(c.vars)); got != c.want {
			t.Errorf("%v: %s, want %s", c.vars, got, c.want)
		}
	}
}

// REDIS_URL a host:port without REDIS_SOCKET_TYPE is a socket's path, as
// envoyproxy/ratelimit takes it: said once, as a likely mistake.
func TestRatelimitEnvSocketHint(t *testing.T) {
	for _, c := range []struct {
		vars  map[string]string
		hints int
	}{
		{map[string]string{"REDIS_URL": "redis:6379"}, 1},
		{map[string]string{"REDIS_URL": "redis:6379", "REDIS_SOCKET_TYPE": "unix"}, 0},
		{map[string]string{"REDIS_URL": "redis:6379", "REDIS_SOCKET_TYPE": "tcp"}, 0},
		{map[string]string{"REDIS_URL": "/run/redis.sock"}, 0},
	} {
		e, err := readRatelimitEnv(getenvOf(c.vars))
		if err != nil || len(e.hints) != c.hints {
			t.Errorf("%v: hints %q (%v), want %d", c.vars, e.hints, err, c.hints)
		}
	}
}

// The client REDIS_* make: its type and options.
func TestRatelimitRedisClient(t *testing.T) {
	base := ratelimitRedis{socketType: "tcp", typ: "single", url: "redis:6379", auth: "u:p", poolSize: 7, timeout: 2 * time.Second, timeoutSet: true}
	rdb, shown, err := ratelimitRedisClient(base)
	if err != nil {
		t.Fatal(err)
	}
	o := rdb.(*redis.Client).Options()
	if shown != "tcp redis:6379" || o.Network != "tcp" || o.Addr != "redis:6379" || o.Username != "u" || o.Password != "p" ||
		o.PoolSize != 7 || o.DialTimeout != 2*time.Second || o.ReadTimeout != 2*time.Second || o.WriteTimeout != 2*time.Second ||
		o.TLSConfig != nil || !o.ContextTimeoutEnabled || o.MaxRetries != 1 {
		t.Errorf("single: %s, %+v", shown, o)
	}
	_ = rdb.Close()

	unix := base
	unix.socketType, unix.url, unix.auth = "unix", "/run/redis.sock", "pw"
	rdb, _, _ = ratelimitRedisClient(unix)
	if o := rdb.(*redis.Client).Options(); o.Network != "unix" || o.Addr != "/run/redis.sock" || o.Username != "" || o.Password != "pw" {
		t.Errorf("unix: %+v", o)
	}
	_ = rdb.Close()

	url := base
	url.url, url.auth, url.timeoutSet = "rediss://alice:secret@redis.example:6380/2", "", false
	rdb, shown, _ = ratelimitRedisClient(url)
	if o := rdb.(*redis.Client).Options(); shown != "tcp redis.example:6380" || o.Username != "alice" || o.Password != "secret" || o.DB != 2 ||
		o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.example" || o.DialTimeout != 5*time.Second {
		t.Errorf("rediss URL: %s, %+v", shown, o)
	}
	_ = rdb.Close()

	sentinel := base
	sentinel.typ, sentinel.url, sentinel.sentinelAuth = "sentinel", "mymaster,s1:26379,s2:26379", "su:sp"
	rdb, shown, _ = ratelimitRedisClient(sentinel)
	if _, ok := rdb.(*redis.Client); !ok || shown != "sentinel mymaster,s1:26379,s2:26379" {
		t.Errorf("sentinel: %T %s", rdb, shown)
	}
	_ = rdb.Close()

	cluster := base
	cluster.typ, cluster.url, cluster.tls = "cluster", "a:7000,b:7001", true
	rdb, shown, err = ratelimitRedisClient(cluster)
	if err != nil {
		t.Fatal(err)
	}
	if o := rdb.(*redis.ClusterClient).Options(); shown != "cluster a:7000,b:7001" || !reflect.DeepEqual(o.Addrs, []string{"a:7000", "b:7001"}) ||
		o.Username != "u" || o.Password != "p" || o.PoolSize != 7 || o.TLSConfig == nil || o.ReadTimeout != 2*time.Second {
		t.Errorf("cluster: %s, %+v", shown, o)
	}
	_ = rdb.Close()

	// files that do not load are refused
	bad := base
	bad.tls, bad.ca = true, "/nonexistent/ca.crt"
	if _, _, err := ratelimitRedisClient(bad); err == nil || !strings.Contains(err.Error(), "REDIS_TLS_CACERT") {
		t.Errorf("a missing CA: %v", err)
	}
	bad.ca, bad.cert, bad.key = "", "/nonexistent/c", "/nonexistent/k"
	if _, _, err := ratelimitRedisClient(bad); err == nil || !strings.Contains(err.Error(), "REDIS_TLS_CLIENT_CERT") {
		t.Errorf("a missing client certificate: %v", err)
	}
}

func TestSplitAuth(t *testing.T) {
	for auth, want := range map[string][2]string{"pw": {"", "pw"}, "user:pw": {"user", "pw"}, "user:p:w": {"user", "p:w"}, "": {"", ""}} {
		if u, p := splitAuth(auth); u != want[0] || p != want[1] {
			t.Errorf("%q: %q %q, want %q", auth, u, p, want)
		}
	}
}
