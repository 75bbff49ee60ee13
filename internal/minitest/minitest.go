// Package minitest is the tests' miniredis whose clock a test sets to the
// microsecond (apart from redistest, so that the modules whose tests use
// only real servers need no miniredis).
package minitest

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Epoch is the server time at which a Mini starts (an arbitrary instant of
// a realistic magnitude: microsecond scores near 1.76e15).
var Epoch = time.Date(2025, 11, 24, 16, 0, 0, 0, time.UTC)

// Mini is a miniredis whose clock the test sets to the microsecond, and a
// client of it.
type Mini struct {
	*miniredis.Miniredis
	Rdb   *redis.Client
	clock time.Time // what TIME returns
}

// New starts a Mini at Epoch; the test's end stops it.
func New(t testing.TB) *Mini {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(Epoch)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return &Mini{Miniredis: m, Rdb: rdb, clock: Epoch}
}

// At sets the server clock to Epoch + d (what TIME returns, and the TTL
// clock).
func (m *Mini) At(d time.Duration) {
	m.clock = Epoch.Add(d)
	m.SetTime(m.clock)
}

// Now is the server clock (what TIME returns).
func (m *Mini) Now() time.Time { return m.clock }
