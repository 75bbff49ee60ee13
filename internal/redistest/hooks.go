package redistest

import (
	"context"
	"strings"
	"sync"

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
