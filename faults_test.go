package slidelog

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// faulty is a *redis.Client that counts script calls and, when fail is set,
// answers every one with that error instead of asking Redis.
type faulty struct {
	*redis.Client
	fail  error
	calls atomic.Int64
}

func (f *faulty) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	f.calls.Add(1)
	if f.fail != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(f.fail)
		return cmd
	}
	return f.Client.EvalSha(ctx, sha, keys, args...)
}

func (f *faulty) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	f.calls.Add(1)
	if f.fail != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(f.fail)
		return cmd
	}
	return f.Client.Eval(ctx, src, keys, args...)
}

func (f *faulty) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	f.calls.Add(1)
	return f.Client.Del(ctx, keys...)
}

// twice runs every script two times with the same arguments and answers
// with the second reply: what go-redis does when a reply is lost to a read
// timeout and it retries (MaxRetries).
type twice struct{ *redis.Client }

func (w twice) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if err := w.Client.EvalSha(ctx, sha, keys, args...).Err(); err != nil {
		return w.Client.EvalSha(ctx, sha, keys, args...) // NOSCRIPT and the like
	}
	return w.Client.EvalSha(ctx, sha, keys, args...)
}

func (w twice) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	_ = w.Client.Eval(ctx, src, keys, args...)
	return w.Client.Eval(ctx, src, keys, args...)
}

// A re-run of the same call records nothing twice and stays admitted.
func TestRetriedCallIsIdempotent(t *testing.T) {
	for name, rdb := range map[string]*redis.Client{"miniredis": newMini(t).rdb, "redis": realRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueKey(t) + ":"
			l := New(twice{rdb}, WithPrefix(prefix))
			lim := Limit{Events: 5, Window: time.Minute}
			steps := []struct {
				n         int
				allowed   bool
				remaining int
			}{
				{1, true, 4},
				{3, true, 1}, // would be denied had the first run's 3 events counted twice
				{1, true, 0}, // the retry meets a full window: still admitted, by its own id
				{1, false, 0},
				{2, false, 0},
			}
			for i, s := range steps {
				r, err := l.AllowN(ctx, "k", lim, s.n)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if r.Allowed != s.allowed || r.Remaining != s.remaining {
					t.Errorf("step %d: allowed=%v remaining=%d, want %v %d", i, r.Allowed, r.Remaining, s.allowed, s.remaining)
				}
				if s.allowed && r.RetryAfter != 0 {
					t.Errorf("step %d: admitted with RetryAfter %v", i, r.RetryAfter)
				}
			}
			if n := rdb.ZCard(ctx, prefix+"k").Val(); n != 5 {
				t.Errorf("log holds %d events, want 5", n)
			}
		})
	}
}
