package slidelog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipeCounter counts the pipelines a client sends.
type pipeCounter struct {
	*redis.Client
	pipelines atomic.Int64
}

func (p *pipeCounter) Pipeline() redis.Pipeliner {
	p.pipelines.Add(1)
	return p.Client.Pipeline()
}

// scriptCalls counts, through a go-redis hook, the script calls a client
// sends, the decisions (keys) they carry, and the failed ones carrying more
// than one.
type scriptCalls struct {
	calls, keys, mostKeys, failedMerged atomic.Int64
}

func (s *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		s.count(cmd)
		return err
	}
}

func (s *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			s.count(cmd)
		}
		return err
	}
}

func (s *scriptCalls) count(cmd redis.Cmder) {
	if cmd.Name() != "evalsha" && cmd.Name() != "eval" {
		return
	}
	k, _ := strconv.Atoi(fmt.Sprint(cmd.Args()[2]))
	s.calls.Add(1)
	s.keys.Add(int64(k))
	for {
		m := s.mostKeys.Load()
		if int64(k) <= m || s.mostKeys.CompareAndSwap(m, int64(k)) {
			break
		}
	}
	if k > 1 && cmd.Err() != nil && !isNoScript(cmd.Err()) {
		s.failedMerged.Add(1)
	}
}

// On a real server, 64 concurrent callers of one batched limiter: exactly
// Events admitted, in far fewer pipelines than calls and far fewer script
// calls than decisions (one call takes many), and NOSCRIPT after SCRIPT
// FLUSH is recovered inside a pipeline.
func TestBatchingRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	sc := &scriptCalls{}
	rdb.AddHook(sc)
	pc := &pipeCounter{Client: rdb}
	l := New(pc, WithPrefix(uniqueKey(t)+":"), WithBatching(0))
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	lim := Limit{Events: 300, Window: time.Minute}
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
	if n := rdb.ZCard(ctx, l.prefix+"hot").Val(); n != 300 {
		t.Errorf("log holds %d", n)
	}
	if p := pc.pipelines.Load(); p >= calls.Load()/2 {
		t.Errorf("%d pipelines for %d calls: batching did not batch", p, calls.Load())
	}
	if c := sc.calls.Load(); c >= calls.Load()/2 || sc.mostKeys.Load() < 2 {
		t.Errorf("%d script calls for %d decisions (most in one: %d): decisions did not share calls",
			c, calls.Load(), sc.mostKeys.Load())
	}
	t.Logf("%d calls in %d pipelines, %d script calls (most decisions in one: %d)",
		calls.Load(), pc.pipelines.Load(), sc.calls.Load(), sc.mostKeys.Load())
}

// A shared script call that Redis refuses part way (a key holding another
// type) is sent again decision by decision: the admitted decisions before
// the failing one stay admitted exactly once (their events are found, not
// recorded twice), the others are decided on their own, and only the
// decisions on the wrong key fail, with ErrWrongType.
func TestBatchingMergedCallFails(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	sc := &scriptCalls{}
	rdb.AddHook(sc)
	prefix := uniqueKey(t) + ":"
	l := New(rdb, WithPrefix(prefix), WithBatching(0))
	if err := rdb.Set(ctx, prefix+"bad", "a string", 0).Err(); err != nil {
		t.Fatal(err)
	}
	lim := Limit{Events: 50, Window: time.Minute}
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
					if !errors.Is(err, ErrWrongType) {
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
		n := rdb.ZCard(ctx, prefix+strconv.Itoa(k)).Val()
		if n != admitted[k].Load() {
			t.Errorf("key %d: %d admitted, log holds %d", k, admitted[k].Load(), n)
		}
	}
	if v := rdb.Get(ctx, prefix+"bad").Val(); v != "a string" {
		t.Errorf("the other type's value became %q", v)
	}
	if sc.failedMerged.Load() == 0 {
		t.Errorf("no shared call failed (%d calls, most decisions in one: %d): the fallback was not exercised",
			sc.calls.Load(), sc.mostKeys.Load())
	}
	t.Logf("%d script calls, %d shared calls failed and were sent again one by one",
		sc.calls.Load(), sc.failedMerged.Load())
}

// A caller whose context ends while its batch waits gets ctx.Err().
func TestBatchingContext(t *testing.T) {
	m := newMini(t)
	l := New(m.rdb, WithBatching(8))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Allow(ctx, "k", PerSecond(1)); !errors.Is(err, context.Canceled) {
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
	New(scripterOnly{m.rdb}, WithBatching(8))
}

// The deny cache answers locally while Redis' denial holds, exactly as
// Redis would, and asks Redis again once it may admit.
func TestDenyCache(t *testing.T) {
	m := newMini(t)
	f := &faulty{Client: m.rdb}
	l := New(f, WithDenyCache())
	ctx := context.Background()
	lim := Limit{Events: 3, Window: 200 * time.Millisecond}
	for range 3 {
		if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	m.at(50 * time.Millisecond)
	first, err := l.Allow(ctx, "k", lim)
	if err != nil || first.Allowed || first.RetryAfter != 150*time.Millisecond {
		t.Fatalf("denial: %+v %v", first, err)
	}
	calls := f.calls.Load()
	for i := range 100 {
		r, err := l.Allow(ctx, "k", lim)
		if err != nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > first.RetryAfter {
			t.Fatalf("local %d: %+v %v", i, r, err)
		}
		if r.Time().Before(first.Time()) {
			t.Fatalf("local %d decided at %v, before Redis' %v", i, r.Time(), first.Time())
		}
	}
	if f.calls.Load() != calls {
		t.Errorf("%d Redis calls for requests the cache covers", f.calls.Load()-calls)
	}
	// Not covered: another limit, another key.
	if _, err := l.Allow(ctx, "k", Limit{Events: 4, Window: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(ctx, "other", lim); err != nil {
		t.Fatal(err)
	}
	if got := f.calls.Load() - calls; got != 2 {
		t.Errorf("%d Redis calls for 2 uncovered requests", got)
	}
	// Reset forgets the denial.
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed {
		t.Errorf("after Reset: %+v %v", r, err)
	}
	// Once RetryAfter has passed since the request was sent, Redis is asked.
	for range 3 {
		_, _ = l.Allow(ctx, "k", lim)
	}
	r, err := l.Allow(ctx, "k", lim)
	if err != nil || r.Allowed {
		t.Fatal(r, err)
	}
	time.Sleep(r.RetryAfter)
	m.at(50*time.Millisecond + 250*time.Millisecond) // the server's clock moved past the window too
	calls = f.calls.Load()
	if r, err := l.Allow(ctx, "k", lim); err != nil || !r.Allowed || f.calls.Load() != calls+1 {
		t.Errorf("after RetryAfter: %+v %v, %d Redis calls", r, err, f.calls.Load()-calls)
	}
}

// The cache never grows without bound: a full shard sweeps expired denials.
func TestDenyCacheSweeps(t *testing.T) {
	d := newDenyCache()
	long := time.Now().Add(-time.Hour)
	lim := PerSecond(1)
	for i := range 64 * sweepAt * 2 {
		d.record(strconv.Itoa(i), lim, 1, long, Result{RetryAfter: time.Millisecond})
	}
	total := 0
	for i := range d.shards {
		total += len(d.shards[i].m)
	}
	if total > 64*sweepAt {
		t.Errorf("%d expired denials kept", total)
	}
	// Live denials are kept, and recording more of them stays cheap.
	for i := range 64 * sweepAt * 2 {
		d.record(strconv.Itoa(i), lim, 1, time.Now(), Result{RetryAfter: time.Hour})
	}
	total = 0
	for i := range d.shards {
		total += len(d.shards[i].m)
	}
	if total != 64*sweepAt*2 {
		t.Errorf("%d live denials kept, want %d", total, 64*sweepAt*2)
	}
}

// gated holds every script call until open is closed, counting them.
type gated struct {
	*redis.Client
	open  chan struct{}
	calls atomic.Int64
}

func (g *gated) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	g.calls.Add(1)
	<-g.open
	return g.Client.EvalSha(ctx, sha, keys, args...)
}

// Callers that miss the deny cache while a call for the same key is in
// flight wait for it: when Redis denies that one, it answers them all.
func TestDenyCacheCoalesces(t *testing.T) {
	m := newMini(t)
	ctx := context.Background()
	lim := PerMinute(1)
	if r, err := New(m.rdb).Allow(ctx, "k", lim); err != nil || !r.Allowed { // fill the window
		t.Fatal(r, err)
	}
	g := &gated{Client: m.rdb, open: make(chan struct{})}
	if err := script.Load(ctx, m.rdb).Err(); err != nil {
		t.Fatal(err)
	}
	l := New(g, WithDenyCache())
	// A denial remembered until now: the moment a flood would stampede.
	l.deny.record("k", lim, 1, time.Now().Add(-time.Hour), Result{RetryAfter: time.Second})
	close(g.open)
	g.open = make(chan struct{})
	g.calls.Store(0)
	var wg sync.WaitGroup
	var denied atomic.Int64
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := l.Allow(ctx, "k", lim); err == nil && !r.Allowed {
				denied.Add(1)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond) // all 20 have missed the cache by now
	close(g.open)
	wg.Wait()
	if denied.Load() != 20 || g.calls.Load() != 1 {
		t.Errorf("%d denied with %d Redis calls; want 20 denied with 1", denied.Load(), g.calls.Load())
	}
}

// On a Cluster, only decisions whose keys share a hash slot share a call;
// other scripts never share; at most mergeMax decisions go in one call.
func TestBatchPlan(t *testing.T) {
	dec := func(key string) *pending {
		return &pending{script: script, keys: []string{key}, args: []any{1, "", 1, 1}}
	}
	all := &pending{script: allowAllScript, keys: []string{"{x}:1", "{x}:2"}, args: []any{1, "", 1, 1, 1, 2}}
	batch := []*pending{dec("a{x}"), dec("c{y}"), all, dec("b{x}")}
	for range mergeMax + 1 {
		batch = append(batch, dec("hot"))
	}
	for _, c := range []struct {
		merge merge
		want  []int // keys per call, in order
	}{
		{mergeNone, append([]int{1, 1, 2, 1}, slices.Repeat([]int{1}, mergeMax+1)...)},
		{mergeSlot, []int{2, 2, 1, mergeMax, 1}},
		{mergeAll, []int{2, mergeMax, 4}},
	} {
		calls := (&batcher{merge: c.merge}).plan(batch)
		var got []int
		for _, call := range calls {
			got = append(got, len(call.keys))
			if len(call.of) > 1 && 4*len(call.of) != len(call.args) {
				t.Errorf("merge %d: %d decisions with %d args", c.merge, len(call.of), len(call.args))
			}
			if c.merge == mergeSlot {
				for _, k := range call.keys {
					if call.script == script && slot(k) != slot(call.keys[0]) {
						t.Errorf("keys %v of one call are on different slots", call.keys)
					}
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("merge %d: keys per call %v, want %v", c.merge, got, c.want)
		}
	}
}
