package main

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// ratelimitEnv is what envoyproxy/ratelimit's environment variables ask of
// rls (--ratelimit-env, or the binary run as "ratelimit"), each unset one at
// envoyproxy/ratelimit's default. docs/envoy.md has the table.
type ratelimitEnv struct {
	config    string // RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY
	http      string // HOST:PORT
	grpc      string // GRPC_HOST:GRPC_PORT, or unix:GRPC_UDS
	debug     string // DEBUG_HOST:DEBUG_PORT
	logLevel  string // LOG_LEVEL
	logFormat string // LOG_FORMAT: text or json
	shadow    bool   // SHADOW_MODE
	quota     bool   // QUOTA_MODE
	headers   string // "legacy" with LIMIT_RESPONSE_HEADERS_ENABLED, else "none"
	// LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER
	limitHeader, remainingHeader, resetHeader string
	nearLimit                                 float64 // NEAR_LIMIT_RATIO
	prefix                                    string  // CACHE_KEY_PREFIX ("": rls' own)

	// GRPC_SERVER_USE_TLS: the server's certificate files ("" without
	// TLS), and with GRPC_CLIENT_TLS_CACERT the CA of the clients'
	// certificates (mutual TLS), GRPC_CLIENT_TLS_SAN a name they must carry.
	tlsCert, tlsKey, tlsClientCA, tlsClientSAN string
	// GRPC_MAX_CONNECTION_AGE, GRPC_MAX_CONNECTION_AGE_GRACE
	maxConnAge, maxConnAgeGrace time.Duration

	// USE_PROMETHEUS: where /metrics is served besides the HTTP port
	// (PROMETHEUS_ADDR, PROMETHEUS_PATH); "" when it is off.
	metricsAddr, metricsPath string

	redis ratelimitRedis

	// xds is the xDS configuration source of CONFIG_TYPE=GRPC_XDS_SOTW
	// (nil with FILE: the files under config).
	xds *ratelimitXDS
	// FORCE_START_WITHOUT_INITIAL_CONFIG: with xDS, serve before a first
	// configuration arrives.
	forceStart bool
	// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: with xDS, /healthcheck
	// answers 200 only with a configuration of at least one domain.
	healthyWithConfig bool

	// ignored are the variables set to a value that asks for something
	// rls does not do, with why: logged once at start-up.
	ignored []string
	// hints are likely mistakes, logged once at start-up.
	hints []string
}

// ratelimitRedis is the Redis that REDIS_* name.
type ratelimitRedis struct {
	socketType   string // tcp or unix (REDIS_SOCKET_TYPE, for SINGLE)
	typ          string // single, sentinel or cluster (REDIS_TYPE)
	url          string // REDIS_URL
	auth         string // REDIS_AUTH: password, or user:password
	sentinelAuth string // REDIS_SENTINEL_AUTH
	poolSize     int    // REDIS_POOL_SIZE
	timeout      time.Duration
	// timeoutSet: REDIS_TIMEOUT was given (unset, go-redis' own timeouts
	// stay; envoyproxy/ratelimit's 10s is longer than any of them).
	timeoutSet bool
	tls        bool   // REDIS_TLS
	cert, key  string // REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY
	ca         string // REDIS_TLS_CACERT
	skipVerify bool   // REDIS_TLS_SKIP_HOSTNAME_VERIFICATION
}

// ratelimitXDS is the management server that CONFIG_GRPC_XDS_* name.
type ratelimitXDS struct {
	url      string            // CONFIG_GRPC_XDS_SERVER_URL
	nodeID   string            // CONFIG_GRPC_XDS_NODE_ID
	metadata map[string]string // CONFIG_GRPC_XDS_NODE_METADATA, k=v,k2=v2
	headers  map[string]string // CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS, k:v,k2:v2
	retry    time.Duration     // CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL
	maxMsg   int               // XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES (0: gRPC's default)
	// CONFIG_GRPC_XDS_SERVER_USE_TLS, and its files ("": none)
	tls                bool
	cert, key, ca, san string
}

// ignoredVars are envoyproxy/ratelimit's variables that rls reads only to
// say it does not do what they ask: a value other than the default is
// logged once, with why. Those of features rls refuses outright are in
// readRatelimitEnv.
var ignoredVars = []struct{ name, def, why string }{
	{"USE_STATSD", "false", "no statsd is sent: scrape /metrics (Prometheus) instead"},
	{"STATSD_HOST", "localhost", "no statsd is sent"},
	{"STATSD_PORT", "8125", "no statsd is sent"},
	{"USE_DOG_STATSD", "false", "no dogstatsd is sent: scrape /metrics (Prometheus) instead"},
	{"USE_DOG_STATSD_MOGRIFIERS", "", "no dogstatsd is sent"},
	{"EXTRA_TAGS", "", "the metrics carry no extra tags"},
	{"STATS_FLUSH_INTERVAL", "10s", "/metrics is read when scraped"},
	{"DISABLE_STATS", "false", "/metrics is always served"},
	{"PROMETHEUS_MAPPER_YAML", "", "the metrics' names are fixed (docs/envoy.md), no mapper is read"},
	{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "false", "the response time histogram (ratelimit_service_response_time_seconds) is in seconds"},
	{"TRACING_ENABLED", "false", "no traces are sent"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", "no local cache of denials: a take-back frees room that such a cache would not see"},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", "each key expires exactly when its last event leaves its window"},
	{"RESPONSE_DYNAMIC_METADATA", "false", "no dynamic metadata is sent back"},
	{"MERGE_DOMAIN_CONFIG", "false", "files of one domain are not merged: a second file of a domain is refused as a duplicate"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true", "denied hits are never counted, whatever this says"},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", "/healthcheck does not follow Redis: a decision while Redis is unavailable is answered by --policy"},
	{"REDIS_PIPELINE_WINDOW", "0", "the limiter batches concurrent decisions itself"},
	{"REDIS_PIPELINE_LIMIT", "0", "the limiter batches concurrent decisions itself"},
	{"REDIS_CLUSTER_PIPELINE_PARALLELISM", "1", "the limiter batches concurrent decisions itself"},
	{"REDIS_STARTUP_INITIAL_INTERVAL", "1s", "rls starts without waiting for Redis; decisions while it is unavailable are answered by --policy"},
	{"REDIS_STARTUP_MAX_INTERVAL", "30s", "rls starts without waiting for Redis"},
	{"REDIS_STARTUP_MAX_ELAPSED_TIME", "0", "rls starts without waiting for Redis"},
	{"RUNTIME_IGNOREDOTFILES", "true", "files whose names start with '.' are never read"},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", "the xDS client waits CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL (±50%) before connecting again"},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", "the xDS client waits CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL (±50%) before connecting again"},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", "the xDS client waits CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL (±50%) before connecting again"},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", "the xDS client waits CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL (±50%) before connecting again"},
}

// readRatelimitEnv reads envoyproxy/ratelimit's variables through getenv
// (an empty value is an unset one). An error names every variable that
// does not parse or asks for what rls refuses to do.
func readRatelimitEnv(getenv func(string) string) (*ratelimitEnv, error) {
	var errs []error
	bad := func(name, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s=%q: %s", name, getenv(name), fmt.Sprintf(format, a...)))
	}
	str := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	boolean := func(name string, def bool) bool {
		v := getenv(name)
		if v == "" {
			return def
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad(name, "want true or false")
			return def
		}
		return b
	}
	port := func(name string, def int) string {
		v := getenv(name)
		if v == "" {
			return strconv.Itoa(def)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 65535 {
			bad(name, "want a port number, 0 to 65535")
			return strconv.Itoa(def)
		}
		return strconv.Itoa(n)
	}
	duration := func(name string, def time.Duration) (time.Duration, bool) {
		v := getenv(name)
		if v == "" {
			return def, false
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			bad(name, "want a duration such as 500ms, 10s or 1h")
			return def, false
		}
		return d, true
	}
	oneOf := func(name, def string, values ...string) string {
		v := strings.ToLower(str(name, def))
		if !slices.Contains(values, v) {
			bad(name, "want %s", strings.Join(values, ", "))
			return def
		}
		return v
	}

	e := &ratelimitEnv{}
	switch v := str("CONFIG_TYPE", "FILE"); v {
	case "FILE":
	case "GRPC_XDS_SOTW":
		e.xds = &ratelimitXDS{url: str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"), nodeID: str("CONFIG_GRPC_XDS_NODE_ID", "default")}
	default:
		bad("CONFIG_TYPE", "want FILE or GRPC_XDS_SOTW")
	}
	if x := e.xds; x != nil {
		// envoyproxy/ratelimit's reading: k=v pairs, an item without '='
		// skipped (said here, once)
		x.metadata = map[string]string{}
		for _, item := range strings.Split(getenv("CONFIG_GRPC_XDS_NODE_METADATA"), ",") {
			if k, v, ok := strings.Cut(item, "="); ok {
				x.metadata[k] = v
			} else if item != "" {
				e.hints = append(e.hints, fmt.Sprintf("CONFIG_GRPC_XDS_NODE_METADATA: %q is not key=value, and is not sent (as envoyproxy/ratelimit skips it)", item))
			}
		}
		// envconfig's map: k:v pairs, each with its ':'
		x.headers = map[string]string{}
		if v := getenv("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"); v != "" {
			for _, item := range strings.Split(v, ",") {
				k, v, ok := strings.Cut(item, ":")
				if !ok || k == "" {
					bad("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "want key:value[,key:value...]")
					break
				}
				x.headers[strings.ToLower(k)] = v
			}
		}
		x.retry, _ = duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", 3*time.Second)
		if x.retry == 0 {
			bad("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "want more than 0")
		}
		if v := getenv("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				bad("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "want a whole number of bytes")
			} else {
				x.maxMsg = n
			}
		}
		if x.tls = boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false); x.tls {
			x.cert, x.key = getenv("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"), getenv("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
			x.ca, x.san = getenv("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"), getenv("CONFIG_GRPC_XDS_SERVER_TLS_SAN")
			if (x.cert == "") != (x.key == "") {
				errs = append(errs, errors.New("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together: the client's certificate and its key"))
			}
		}
	}
	switch v := str("BACKEND_TYPE", "redis"); v {
	case "redis":
	case "memcache":
		bad("BACKEND_TYPE", "memcached is not offered: slidelog keeps each window's events in Redis")
	default:
		bad("BACKEND_TYPE", "want redis")
	}
	if boolean("REDIS_PERSECOND", false) {
		bad("REDIS_PERSECOND", "a second Redis for per-second limits is not offered: every limit is on REDIS_URL")
	}

	e.config = filepath.Join(str("RUNTIME_ROOT", "/srv/runtime_data/current"), getenv("RUNTIME_SUBDIRECTORY"), str("RUNTIME_APPDIRECTORY", "config"))
	boolean("RUNTIME_WATCH_ROOT", true) // either way the files are looked at every --reload
	boolean("RUNTIME_IGNOREDOTFILES", false)
	// with CONFIG_TYPE=FILE, no effect: rls starts only with a configuration
	e.forceStart = boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false) && e.xds != nil
	e.healthyWithConfig = boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false) && e.xds != nil

	e.http = net.JoinHostPort(str("HOST", "0.0.0.0"), port("PORT", 8080))
	if uds := getenv("GRPC_UDS"); uds != "" {
		e.grpc = "unix:" + uds
	} else {
		e.grpc = net.JoinHostPort(str("GRPC_HOST", "0.0.0.0"), port("GRPC_PORT", 8081))
	}
	e.debug = net.JoinHostPort(str("DEBUG_HOST", "0.0.0.0"), port("DEBUG_PORT", 6070))

	e.logLevel = "warn"
	if v := getenv("LOG_LEVEL"); v != "" {
		if _, err := parseLogLevel(v); err != nil {
			bad("LOG_LEVEL", "%v", err)
		} else {
			e.logLevel = v
		}
	}
	e.logFormat = oneOf("LOG_FORMAT", "text", "text", "json")

	e.shadow = boolean("SHADOW_MODE", false)
	e.quota = boolean("QUOTA_MODE", false)
	e.headers = "none"
	if boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
		e.headers = "legacy"
	}
	e.limitHeader = str("LIMIT_LIMIT_HEADER", "RateLimit-Limit")
	e.remainingHeader = str("LIMIT_REMAINING_HEADER", "RateLimit-Remaining")
	e.resetHeader = str("LIMIT_RESET_HEADER", "RateLimit-Reset")
	for _, h := range []string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"} {
		if v := getenv(h); v != "" && !validHeaderName(v) {
			bad(h, "want a header name (letters, digits and !#$%%&'*+-.^_`|~)")
		}
	}
	e.nearLimit = 0.8
	if v := getenv("NEAR_LIMIT_RATIO"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1 {
			bad("NEAR_LIMIT_RATIO", "want a number above 0, at most 1")
		} else {
			e.nearLimit = f
		}
	}
	e.prefix = getenv("CACHE_KEY_PREFIX")

	if boolean("GRPC_SERVER_USE_TLS", false) {
		e.tlsCert, e.tlsKey = getenv("GRPC_SERVER_TLS_CERT"), getenv("GRPC_SERVER_TLS_KEY")
		if e.tlsCert == "" || e.tlsKey == "" {
			errs = append(errs, errors.New("GRPC_SERVER_USE_TLS=true wants GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY, the server's certificate chain and key (PEM files)"))
		}
		e.tlsClientCA, e.tlsClientSAN = getenv("GRPC_CLIENT_TLS_CACERT"), getenv("GRPC_CLIENT_TLS_SAN")
		if e.tlsClientSAN != "" && e.tlsClientCA == "" {
			errs = append(errs, errors.New("GRPC_CLIENT_TLS_SAN wants GRPC_CLIENT_TLS_CACERT, the CA of the clients' certificates"))
		}
	}
	e.maxConnAge, _ = duration("GRPC_MAX_CONNECTION_AGE", 24*time.Hour)
	e.maxConnAgeGrace, _ = duration("GRPC_MAX_CONNECTION_AGE_GRACE", time.Hour)

	if boolean("USE_PROMETHEUS", false) {
		e.metricsAddr = str("PROMETHEUS_ADDR", ":9090")
		e.metricsPath = str("PROMETHEUS_PATH", "/metrics")
		if !strings.HasPrefix(e.metricsPath, "/") {
			bad("PROMETHEUS_PATH", "want a path starting with /")
		}
	}

	r := &e.redis
	r.socketType = oneOf("REDIS_SOCKET_TYPE", "unix", "tcp", "unix")
	r.typ = oneOf("REDIS_TYPE", "single", "single", "sentinel", "cluster")
	r.url = str("REDIS_URL", "/var/run/nutcracker/ratelimit.sock")
	r.auth, r.sentinelAuth = getenv("REDIS_AUTH"), getenv("REDIS_SENTINEL_AUTH")
	if _, _, err := net.SplitHostPort(r.url); err == nil && r.typ == "single" && r.socketType == "unix" && getenv("REDIS_SOCKET_TYPE") == "" {
		e.hints = append(e.hints, fmt.Sprintf("REDIS_URL=%s is taken as a Unix socket's path: REDIS_SOCKET_TYPE is unset, and envoyproxy/ratelimit's default is unix; set REDIS_SOCKET_TYPE=tcp for a host:port", r.url))
	}
	switch parts := strings.Split(r.url, ","); r.typ {
	case "sentinel":
		if len(parts) < 2 || slices.Contains(parts, "") {
			bad("REDIS_URL", "REDIS_TYPE=SENTINEL wants the master's name and the sentinels: NAME,HOST:PORT[,HOST:PORT...]")
		}
	case "cluster":
		if slices.Contains(parts, "") {
			bad("REDIS_URL", "REDIS_TYPE=CLUSTER wants HOST:PORT[,HOST:PORT...]")
		}
	}
	if r.typ != "single" && strings.Contains(r.url, "://") {
		bad("REDIS_URL", "REDIS_TYPE=%s wants HOST:PORT addresses, not URLs", strings.ToUpper(r.typ))
	}
	if v := getenv("REDIS_POOL_SIZE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			bad("REDIS_POOL_SIZE", "want a whole number, at least 1")
		} else {
			r.poolSize = n
		}
	}
	r.timeout, r.timeoutSet = duration("REDIS_TIMEOUT", 10*time.Second)
	r.tls = boolean("REDIS_TLS", false)
	r.cert, r.key, r.ca = getenv("REDIS_TLS_CLIENT_CERT"), getenv("REDIS_TLS_CLIENT_KEY"), getenv("REDIS_TLS_CACERT")
	r.skipVerify = boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)
	if r.tls && (r.cert == "") != (r.key == "") {
		errs = append(errs, errors.New("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together: the client's certificate and its key"))
	}
	switch v := strings.ToUpper(str("REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT")); v {
	case "WAIT":
	case "CREATE", "ERROR":
		bad("REDIS_POOL_ON_EMPTY_BEHAVIOR", "not supported (envoyproxy/ratelimit refuses it too): a call waits for a connection, within --deadline; use WAIT")
	default:
		bad("REDIS_POOL_ON_EMPTY_BEHAVIOR", "want WAIT")
	}

	for _, v := range ignoredVars {
		if val := getenv(v.name); val != "" && !sameSetting(val, v.def) {
			e.ignored = append(e.ignored, fmt.Sprintf("%s=%s: %s", v.name, val, v.why))
		}
	}
	return e, errors.Join(errs...)
}

// sameSetting: a and b say the same (true and 1, 10s and 10000ms).
func sameSetting(a, b string) bool {
	if a == b {
		return true
	}
	if x, err := strconv.ParseBool(a); err == nil {
		if y, err := strconv.ParseBool(b); err == nil {
			return x == y
		}
	}
	if x, err := time.ParseDuration(a); err == nil {
		if y, err := time.ParseDuration(b); err == nil {
			return x == y
		}
	}
	return false
}

// validHeaderName: s is an HTTP header name (a token, RFC 9110).
func validHeaderName(s string) bool { return httpguts.ValidHeaderFieldName(s) }
