package slidelog_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/config"
	"github.com/slidelog/slidelog/internal/minitest"
	"github.com/slidelog/slidelog/internal/optiontest"
	"github.com/slidelog/slidelog/internal/redistest"
)

// epoch is the server time at which miniredis tests start; mini is a
// miniredis whose clock the test sets to the microsecond (internal/minitest's).
var epoch = minitest.Epoch

type mini = minitest.Mini

func newMini(t testing.TB) *mini { return minitest.New(t) }

// The real redis-server shared by the tests of this package, started on a
// free loopback port the first time a test asks for it.
var real redistest.Shared

// realRedis returns a client of a real redis-server. A missing redis-server
// fails the test: the real-server tests are what catch the places where
// miniredis and Redis differ, so they never skip silently. Set
// SLIDELOG_SKIP_REAL_REDIS=1 to skip them on purpose.
func realRedis(t testing.TB) *redis.Client {
	t.Helper()
	return newClient(t, real.Addr(t))
}

// onBoth runs f as two subtests: on a miniredis whose clock the test sets
// (m), and on a real redis-server (m nil).
func onBoth(t *testing.T, f func(t *testing.T, rdb *redis.Client, m *mini)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		m := newMini(t)
		f(t, m.Rdb, m)
	})
	t.Run("redis", func(t *testing.T) { f(t, realRedis(t), nil) })
}

func newClient(t testing.TB, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestMain(m *testing.M) {
	redistest.Quiet()
	code := m.Run()
	real.Stop()
	os.Exit(code)
}

// uniqueKey names a key no other test uses, so that tests never need FLUSHDB.
func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("%s:%d", t.Name(), time.Now().UnixNano())
}

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("tzdata: %v", err)
	}
	return loc
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// compactFromFirst makes a limiter's logs of limits over 128 events compact
// logs from their first admission, not past a listpack's 128 events;
// compactScript is the decision script of such a limiter.
var (
	compactFromFirst = slidelog.Option(optiontest.ConvertPast(0))
	// slotLog makes the compact logs compact logs of a slot per event
	// (compact.lua), the format before the block log: the tests of its
	// own layout set it.
	slotLog       = slidelog.Option(optiontest.SlotLog())
	compactScript = slidelog.DecideScriptFor(0, false, config.DefaultMaxLive)
)

// compactAbove makes a limiter keep the logs of limits over events
// compactly (optiontest.CompactAbove).
func compactAbove(events int) slidelog.Option {
	return slidelog.Option(optiontest.CompactAbove(events))
}

// batchingModes are the two ways a limiter sends its decisions.
var batchingModes = []struct {
	Name string
	Opt  slidelog.Option
}{
	{"batched", slidelog.WithBatching(256)},
	{"unbatched", slidelog.WithoutBatching()},
}

// generous: a deadline the tests with a real replica never wait for but on
// a failure.
const generous = 30 * time.Second
