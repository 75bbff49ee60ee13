package slidelog_test

import (
	"context"
	"errors"
	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/redistest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/ids"
	"github.com/slidelog/slidelog/internal/reply"
	"github.com/slidelog/slidelog/internal/transport"
)

// pipeCounter counts the pipelines a client sends.
type pipeCounter struct {
	*redis.Client
	pipelines atomic.Int64
}

// On a real server, 64 concurrent callers of one batched limiter: exactly
// Events admitted, in far fewer pipelines than calls and far fewer script
// calls than decisions (one call takes many), and NOSCRIPT after SCRIPT
// FLUSH is recovered inside a pipeline.
func TestBatchingRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	sc := &redistest.ScriptCalls{}
	rdb.AddHook(sc)
	pc := &pipeCounter{Client: rdb}
	l := slidelog.New(pc, slidelog.WithPrefix(uniqueKey(t)+":"), slidelog.WithBatching(256))
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	lim := slidelog.Limit{Events: 300, Window: time.Minute}
	var admitted, calls atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				r, err := l.Allow(ctx, "hot", lim)
				if err != nil {
					t.Error(err)
					return
				}
				calls.Add(1)
				if r.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 300 || calls.Load() != 64*20 {
		t.Errorf("admitted %d of %d calls, want 300 of 1280", admitted.Load(), calls.Load())
	}
	if n := logLen(t, rdb, l.Prefix()+"hot"); n != 300 {
		t.Errorf("log holds %d", n)
	}
	if p := pc.pipelines.Load(); p >= calls.Load()/2 {
		t.Errorf("%d pipelines for %d calls: batching did not batch", p, calls.Load())
	}
	if c := sc.Calls.Load(); c >= calls.Load()/2 || sc.MostKeys.Load() < 2 {
		t.Errorf("%d script calls for %d decisions (most in one: %d): decisions did not share calls",
			c, calls.Load(), sc.MostKeys.Load())
	}
	t.Logf("%d calls in %d pipelines, %d script calls (most decisions in one: %d)",
		calls.Load(), pc.pipelines.Load(), sc.Calls.Load(), sc.MostKeys.Load())
}

// A decision on a key of another type fails alone, inside the call it
// shares with others: the others are decided as if it were not there (each
// admission recorded once) and their logs get their expiries, and only the
// decisions on the wrong key fail, with ErrWrongType. (A shared call that
// failed whole at the wrong key would leave the admissions before it
// without their deferred expiries: sent again, they find their events and
// write nothing.)
func TestBatchingWrongTypeFailsAlone(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	sc := &redistest.ScriptCalls{}
	rdb.AddHook(sc)
	prefix := uniqueKey(t) + ":"
	l := slidelog.New(rdb, slidelog.WithPrefix(prefix), slidelog.WithBatching(256))
	if err := rdb.Set(ctx, prefix+"bad", "a string", 0).Err(); err != nil {
		t.Fatal(err)
	}
	lim := slidelog.Limit{Events: 50, Window: time.Minute}
	const keys, rounds = 8, 10
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				if (g+i)%4 == 0 {
					_, err := l.Allow(ctx, "bad", lim)
					if !errors.Is(err, slidelog.ErrWrongType) {
						t.Errorf("bad key: err %v, want ErrWrongType", err)
					}
					continue
				}
				k := (g + i) % keys
				r, err := l.Allow(ctx, strconv.Itoa(k), lim)
				if err != nil {
					t.Errorf("key %d: %v", k, err)
					return
				}
				if r.Allowed {
					admitted[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for k := range keys {
		key := prefix + strconv.Itoa(k)
		n := rdb.ZCard(ctx, key).Val()
		if n != admitted[k].Load() {
			t.Errorf("key %d: %d admitted, log holds %d", k, admitted[k].Load(), n)
		}
		if ttl := rdb.PTTL(ctx, key).Val(); n > 0 && ttl < time.Minute-5*time.Second {
			t.Errorf("key %d: expiry %v, want about the window (%v)", k, ttl, lim.Window)
		}
	}
	if v := rdb.Get(ctx, prefix+"bad").Val(); v != "a string" {
		t.Errorf("the other type's value became %q", v)
	}
	if sc.MostKeys.Load() < 2 || sc.FailedMerged.Load() != 0 {
		t.Errorf("%d calls, most decisions in one %d, %d shared calls failed whole: want shared calls, none failed",
			sc.Calls.Load(), sc.MostKeys.Load(), sc.FailedMerged.Load())
	}
}

// The same, one shared call at a time, on both servers: an admission before
// the wrong key and one after it are admitted and expire a window after
// now; the wrong key's decision has the WRONGTYPE error for its own.
func TestSharedCallWrongTypeAlone(t *testing.T) {
	for name, rdb := range map[string]*redis.Client{"miniredis": newMini(t).Rdb, "redis": realRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniqueKey(t) + ":"
			l := slidelog.New(rdb, slidelog.WithPrefix(prefix), slidelog.WithBatching(256))
			if err := rdb.Set(ctx, prefix+"bad", "a string", 0).Err(); err != nil {
				t.Fatal(err)
			}
			lim := slidelog.Limit{Events: 2, Window: time.Hour}
			// one shared call: the decisions' keys and arguments one after
			// the other, as the batcher joins them (internal/transport)
			var keys []string
			var args []any
			for _, key := range []string{"a", "bad", "c"} {
				arg := &ids.Arg{}
				arg.Set(ids.Process().Reserve(1))
				keys = append(keys, prefix+key)
				args = append(args, 1, arg, lim.Events, lim.Window.Microseconds())
			}
			v, err := l.DecisionScript().Run(ctx, rdb, keys, args...).Slice()
			if err != nil || len(v) != 3 {
				t.Fatalf("the shared call: %v, %v", v, err)
			}
			for i, key := range []string{"a", "bad", "c"} {
				if key == "bad" {
					if !reply.IsFailed(v[i]) || !strings.Contains(v[i].(string), "WRONGTYPE") {
						t.Errorf("bad: %v; want its WRONGTYPE alone", v[i])
					}
					continue
				}
				r, err := slidelog.Decode(v[i], []slidelog.Limit{lim})
				if err != nil || !r.Allowed {
					t.Errorf("%s: %+v, %v; want admitted", key, r, err)
				}
				if ttl := rdb.PTTL(ctx, prefix+key).Val(); ttl < 59*time.Minute {
					t.Errorf("%s: expiry %v, want about the window (1h)", key, ttl)
				}
				if n := rdb.ZCard(ctx, prefix+key).Val(); n != 1 {
					t.Errorf("%s: log holds %d, want 1", key, n)
				}
			}
		})
	}
}

// A caller whose context ends while its batch waits gets ctx.Err().
func TestBatchingContext(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(m.Rdb, slidelog.WithBatching(8))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Allow(ctx, "k", slidelog.PerSecond(1)); !errors.Is(err, context.Canceled) {
		t.Errorf("err %v", err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("a canceled call wrote %v", keys)
	}
	defer func() {
		if recover() == nil {
			t.Error("WithBatching on a client without Pipeline did not panic")
		}
	}()
	slidelog.New(redistest.ScripterOnly{Scripter: m.Rdb}, slidelog.WithBatching(8))
}

func (p *pipeCounter) Pipeline() redis.Pipeliner {
	p.pipelines.Add(1)
	return p.Client.Pipeline()
}

// A lone caller never waits for company: with nothing in flight, its call
// goes out alone, with no pipeline, exactly as without batching.
func TestBatchingLoneCaller(t *testing.T) {
	m := newMini(t)
	pc := &pipeCounter{Client: m.Rdb}
	l := slidelog.New(pc)
	ctx := context.Background()
	for i := range 5 {
		if r, err := l.Allow(ctx, "k", slidelog.PerMinute(3)); err != nil || r.Allowed != (i < 3) {
			t.Fatalf("call %d: %+v, %v", i, r, err)
		}
	}
	if n := pc.pipelines.Load(); n != 0 {
		t.Errorf("%d pipelines for 5 calls one after the other, want none", n)
	}
}

// A caller whose context ended before its turn gets ctx.Err(), never a
// reply of nothing.
func TestBatchingCanceledContext(t *testing.T) {
	m := newMini(t)
	l := slidelog.New(m.Rdb, slidelog.WithBatching(256))
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10000 {
				if _, err := l.Allow(canceled, "k", slidelog.PerSecond(1)); !errors.Is(err, context.Canceled) {
					wrong.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := wrong.Load(); n != 0 {
		t.Errorf("%d of 80000 calls on a canceled context got an error other than context.Canceled", n)
	}
}

// flightHook counts the script calls and pipelines of script calls a client
// has in flight at once, and holds each for a moment, so that callers pile
// up behind them.
type flightHook struct {
	now, most atomic.Int64
}

func (h *flightHook) enter() func() {
	redistest.RaiseTo(&h.most, h.now.Add(1))
	time.Sleep(time.Millisecond)
	return func() { h.now.Add(-1) }
}

func (h *flightHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *flightHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !redistest.IsScriptCall(cmd) {
			return next(ctx, cmd)
		}
		defer h.enter()()
		return next(ctx, cmd)
	}
}

func (h *flightHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		// (a new connection's first commands go in a pipeline of their own,
		// inside the one that dialed it)
		if len(cmds) == 0 || !redistest.IsScriptCall(cmds[0]) {
			return next(ctx, cmds)
		}
		defer h.enter()()
		return next(ctx, cmds)
	}
}

// However many callers wait, at most transport.PipelinesInFlight pipelines (a lone
// caller's call counted) are in flight at once, and under load the
// batcher uses them all; every caller is answered, exactly.
func TestPipelinesInFlight(t *testing.T) {
	m := newMini(t)
	h := &flightHook{}
	m.Rdb.AddHook(h)
	l := slidelog.New(m.Rdb)
	ctx := context.Background()
	const callers, calls = 64, 20
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				r, err := l.Allow(ctx, "k", slidelog.PerHour(500))
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := h.most.Load(); got != transport.PipelinesInFlight {
		t.Errorf("at most %d calls and pipelines in flight at once, want %d", got, transport.PipelinesInFlight)
	}
	if got := admitted.Load(); got != 500 {
		t.Errorf("%d of %d decisions admitted under a limit of 500, want 500", got, callers*calls)
	}
}
