package redistest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clockLine is the line of the scripts that reads Redis' TIME.
const clockLine = "local time = call('TIME')"

// Clock gives the scripts a client sends a clock the test sets, on a
// real server: a go-redis hook rewrites each script that reads TIME
// (clockLine) to read the Redis hash at Key (fields s and us, as TIME
// answers) instead, so that a trace runs on a real server at the
// microseconds it names, as it runs on miniredis (SetTime). An EVALSHA
// of a script it has not seen is sent with an unknown SHA, so that the
// client sends the script's source (NOSCRIPT), which the hook rewrites.
// It is for a standalone server (the hash's key is not among KEYS) and
// for a client only the test uses.
//
// The clock starts a day ahead of the real one: keys expire (PEXPIREAT)
// on the server's real clock, and none should while a trace runs.
type Clock struct {
	Key string
	rdb *redis.Client

	mu    sync.Mutex
	now   time.Time
	shas  map[string]string // a script's SHA -> its rewritten one ("" when it reads no TIME)
	fresh int
}

// NewClock hooks rdb's scripts to a Clock of its own.
func NewClock(t testing.TB, rdb *redis.Client) *Clock {
	c := &Clock{Key: "slidelog-test-clock:" + strconv.FormatInt(time.Now().UnixNano(), 36), rdb: rdb,
		shas: map[string]string{}}
	rdb.AddHook(c)
	c.Set(t, time.Now().Add(24*time.Hour).Truncate(time.Microsecond))
	t.Cleanup(func() { rdb.Del(context.Background(), c.Key) })
	return c
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set sets the clock to at.
func (c *Clock) Set(t testing.TB, at time.Time) {
	t.Helper()
	c.mu.Lock()
	c.now = at
	c.mu.Unlock()
	us := at.UnixMicro()
	if err := c.rdb.HSet(context.Background(), c.Key, "s", us/1e6, "us", us%1e6).Err(); err != nil {
		t.Fatalf("clock: %v", err)
	}
}

// Advance moves the clock by d (back when d < 0).
func (c *Clock) Advance(t testing.TB, d time.Duration) { c.Set(t, c.Now().Add(d)) }

func (c *Clock) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *Clock) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.rewrite(cmd)
		return next(ctx, cmd)
	}
}

func (c *Clock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.rewrite(cmd)
		}
		return next(ctx, cmds)
	}
}

// rewrite points a script call at the script that reads the test's clock.
func (c *Clock) rewrite(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 2 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch cmd.Name() {
	case "eval":
		src, ok := args[1].(string)
		if !ok {
			return
		}
		sum := sha1.Sum([]byte(src))
		sha := hex.EncodeToString(sum[:])
		if !strings.Contains(src, clockLine) {
			c.shas[sha] = ""
			return
		}
		fake := strings.Replace(src, clockLine, "local time = call('HMGET', '"+c.Key+"', 's', 'us')", 1)
		sum = sha1.Sum([]byte(fake))
		c.shas[sha] = hex.EncodeToString(sum[:])
		args[1] = fake
	case "evalsha":
		sha, ok := args[1].(string)
		if !ok {
			return
		}
		fake, seen := c.shas[sha]
		switch {
		case !seen:
			// unknown here: NOSCRIPT, and the client sends the source
			c.fresh++
			args[1] = strings.Repeat("0", 30) + strconv.FormatInt(int64(c.fresh)+1<<39, 16)
		case fake != "":
			args[1] = fake
		}
	}
}
