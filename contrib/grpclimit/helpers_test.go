package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
)

// The health service's methods: Check and List are unary, Watch a server
// stream.
const (
	check = healthpb.Health_Check_FullMethodName
	list  = healthpb.Health_List_FullMethodName
	watch = healthpb.Health_Watch_FullMethodName
)

// epoch is the server time at which miniredis tests start.
var epoch = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// mini returns a client of a miniredis whose clock stands at epoch.
func mini(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(epoch)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return m, rdb
}

// The real redis-server shared by the tests of this package, started on a
// free loopback port the first time a test asks for it.
var real redistest.Shared

// realRedis returns a client of a real redis-server. A missing
// redis-server fails the test; set SLIDELOG_SKIP_REAL_REDIS=1 to skip such
// tests on purpose.
func realRedis(t *testing.T) *redis.Client {
	t.Helper()
	return newClient(t, real.Addr(t))
}

func newClient(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestMain(m *testing.M) {
	redistest.Quiet()
	code := m.Run()
	real.Stop()
	os.Exit(code)
}

// uniqueName names a limiter prefix no other test uses, so that tests on
// the shared redis-server never need FLUSHDB.
func uniqueName(t *testing.T) string {
	return fmt.Sprintf("%s:%d:", t.Name(), time.Now().UnixNano())
}

// service is a health server over loopback TCP, behind the interceptors
// given, and a client of it.
type service struct {
	health *health.Server
	client healthpb.HealthClient
	calls  atomic.Int64 // calls and streams that reached the service
	conn   *grpc.ClientConn
}

// serve starts the health service on 127.0.0.1:0 with server options (the
// interceptors under test) and dials it with dial options.
func serve(t *testing.T, server []grpc.ServerOption, dial ...grpc.DialOption) *service {
	t.Helper()
	s := &service{health: health.NewServer()}
	counted := []grpc.ServerOption{
		// Innermost: counts what got through the interceptors under test.
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			s.calls.Add(1)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			s.calls.Add(1)
			return h(srv, ss)
		}),
	}
	srv := grpc.NewServer(append(server, counted...)...)
	healthpb.RegisterHealthServer(srv, s.health)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s.client = healthpb.NewHealthClient(conn)
	s.conn = conn
	return s
}

// answer is what a client learns of one call: its code, message and
// header metadata, and the retry delay of its RetryInfo detail (-1 for
// none).
type answer struct {
	code   codes.Code
	msg    string
	header metadata.MD
	retry  time.Duration
	err    error
}

// checkCall calls Check with ctx (metadata in it is sent).
func (s *service) checkCall(ctx context.Context) answer {
	var header metadata.MD
	_, err := s.client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
	return answerOf(err, header)
}

// listCall calls List with ctx.
func (s *service) listCall(ctx context.Context) answer {
	_, err := s.client.List(ctx, &healthpb.HealthListRequest{})
	return answerOf(err, nil)
}

func (s *service) checkOnce(t *testing.T) answer {
	t.Helper()
	return s.checkCall(context.Background())
}

// watchOpen opens a Watch stream and reads its first message (or its error).
func (s *service) watchOpen(ctx context.Context) answer {
	stream, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return answerOf(err, nil)
	}
	_, err = stream.Recv()
	header, herr := stream.Header()
	if err == nil && herr != nil {
		err = herr
	}
	return answerOf(err, header)
}

func answerOf(err error, header metadata.MD) answer {
	st := status.Convert(err)
	a := answer{code: st.Code(), msg: st.Message(), header: header, retry: -1, err: err}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			a.retry = ri.GetRetryDelay().AsDuration()
		}
	}
	return a
}

// fields is the rate-limit fields of a header: ratelimit-policy, ratelimit
// ("" for one not sent). A field sent more than once is both values,
// joined by " | ".
func (a answer) fields() (policy, state string) {
	join := func(v []string) string {
		s := ""
		for i, x := range v {
			if i > 0 {
				s += " | "
			}
			s += x
		}
		return s
	}
	return join(a.header.Get("ratelimit-policy")), join(a.header.Get("ratelimit"))
}

func (a answer) String() string {
	p, s := a.fields()
	return fmt.Sprintf("%v %q policy=%q state=%q retry=%v", a.code, a.msg, p, s, a.retry)
}

// recorder is a Decider that records every key and Result of the Decider
// it wraps.
type recorder struct {
	slidelog.Decider
	mu      sync.Mutex
	keys    []string
	results []slidelog.Result
}

func (r *recorder) AllowN(ctx context.Context, key string, limit slidelog.Limit, n int) (slidelog.Result, error) {
	res, err := r.Decider.AllowN(ctx, key, limit, n)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, key)
	r.results = append(r.results, res)
	return res, err
}

func (r *recorder) seen() ([]string, []slidelog.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...), append([]slidelog.Result(nil), r.results...)
}

// failing is a Decider whose every AllowN fails with err, after the
// context has been looked at (a limiter does that first).
type failing struct {
	slidelog.Decider
	err error
}

func (f failing) AllowN(ctx context.Context, _ string, _ slidelog.Limit, _ int) (slidelog.Result, error) {
	if err := ctx.Err(); err != nil {
		return slidelog.Result{}, fmt.Errorf("slidelog: run script: %w", err)
	}
	return slidelog.Result{}, f.err
}

var errDown = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
