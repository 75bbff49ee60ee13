package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// ArgsHook is a go-redis hook that records how many arguments each
// command it sees has, by command name (lower case).
type ArgsHook struct {
	mu   sync.Mutex
	args map[string][]int
}

// Args is the argument counts of the calls of the named commands, in the
// order of the names (each name's calls in their order).
func (h *ArgsHook) Args(names ...string) []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int
	for _, name := range names {
		out = append(out, h.args[name]...)
	}
	return out
}

// Forget forgets every call seen so far.
func (h *ArgsHook) Forget() {
	h.mu.Lock()
	h.args = nil
	h.mu.Unlock()
}

func (h *ArgsHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *ArgsHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		if h.args == nil {
			h.args = map[string][]int{}
		}
		name := strings.ToLower(cmd.Name())
		h.args[name] = append(h.args[name], len(cmd.Args()))
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *ArgsHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ScripterOnly hides every method of a client but redis.Scripter's: a
// client wrapper that can run scripts and nothing else.
type ScripterOnly struct{ redis.Scripter }

// Faulty is a client that counts its script calls (and DELs) and, while
// Fail is set, answers every script call with that error instead of
// asking Redis.
type Faulty struct {
	*redis.Client
	Fail  error
	Calls atomic.Int64
}

// failed counts a script call and, while Fail is set, is its answer (else
// nil: the call goes to Redis).
func (f *Faulty) failed(ctx context.Context) *redis.Cmd {
	f.Calls.Add(1)
	if f.Fail == nil {
		return nil
	}
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(f.Fail)
	return cmd
}

func (f *Faulty) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if cmd := f.failed(ctx); cmd != nil {
		return cmd
	}
	return f.Client.EvalSha(ctx, sha, keys, args...)
}

func (f *Faulty) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	if cmd := f.failed(ctx); cmd != nil {
		return cmd
	}
	return f.Client.Eval(ctx, src, keys, args...)
}

func (f *Faulty) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	f.Calls.Add(1)
	return f.Client.Del(ctx, keys...)
}

// Twice runs every script two times with the same arguments and answers
// with the second reply: what go-redis does when a reply is lost to a read
// timeout and it retries (MaxRetries).
type Twice struct{ *redis.Client }

func (w Twice) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if err := w.Client.EvalSha(ctx, sha, keys, args...).Err(); err != nil {
		return w.Client.EvalSha(ctx, sha, keys, args...) // NOSCRIPT and the like
	}
	return w.Client.EvalSha(ctx, sha, keys, args...)
}

func (w Twice) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	_ = w.Client.Eval(ctx, src, keys, args...)
	return w.Client.Eval(ctx, src, keys, args...)
}

// ScriptCalls is a go-redis hook that counts the script calls a client
// sends (alone or in pipelines), the decisions (keys) they carry, the most
// one carried, and the failed ones that carried more than one (NOSCRIPT
// aside: the call is sent again).
type ScriptCalls struct {
	Calls, Keys, MostKeys, FailedMerged atomic.Int64
}

func (s *ScriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *ScriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		s.count(cmd)
		return err
	}
}

func (s *ScriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			s.count(cmd)
		}
		return err
	}
}

func (s *ScriptCalls) count(cmd redis.Cmder) {
	if !IsScriptCall(cmd) {
		return
	}
	k, _ := strconv.Atoi(fmt.Sprint(cmd.Args()[2]))
	s.Calls.Add(1)
	s.Keys.Add(int64(k))
	RaiseTo(&s.MostKeys, int64(k))
	if k > 1 && cmd.Err() != nil && !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		s.FailedMerged.Add(1)
	}
}

// IsScriptCall tells a script call (EVALSHA, or EVAL after NOSCRIPT).
func IsScriptCall(cmd redis.Cmder) bool {
	return cmd.Name() == "evalsha" || cmd.Name() == "eval"
}

// RaiseTo raises a to v if v is larger.
func RaiseTo(a *atomic.Int64, v int64) {
	for m := a.Load(); v > m && !a.CompareAndSwap(m, v); m = a.Load() {
	}
}
