package slidelog

import (
	"context"
	"fmt"
	"time"
)

// AllowAll decides n events for key against several limits at once, in one
// atomic script: every limit admits them, or none records anything. A
// request admitted by "10 per second" but denied by "1 000 per hour" spends
// nothing of the first.
//
// Each limit keeps its own log, one per window, on the Cluster slot of the
// key's single-limit log (keys.go gives their names), so the call works on
// Redis Cluster whatever the key's bytes, and Reset forgets them with the
// rest. Two limits may not share a window.
//
// The Result: Limit is the limit that denied (the one whose RetryAfter is
// latest) or, when allowed, the one with the fewest Remaining; Remaining is
// the smallest over the limits; RetryAfter is the largest per-limit
// RetryAfter, the instant at which every window fits; ResetAfter is the
// largest. AllowAll never answers from the deny cache.
func (l *Limiter) AllowAll(ctx context.Context, key string, n int, limits ...Limit) (Result, error) {
	start := time.Now()
	r, err := l.allowAll(ctx, key, n, limits)
	if l.plain {
		return r, err
	}
	return l.finish(ctx, opAllowAll, key, limits, n, start, r, false, err)
}

func (l *Limiter) allowAll(ctx context.Context, key string, n int, limits []Limit) (Result, error) {
	if key == "" {
		return Result{}, ErrEmptyKey
	}
	if len(limits) == 0 {
		return Result{}, fmt.Errorf("%w: AllowAll needs at least one limit", ErrInvalidLimit)
	}
	seen := make(map[time.Duration]bool, len(limits))
	for _, lim := range limits {
		if err := l.validate(lim, n); err != nil {
			return Result{}, err
		}
		w := lim.Window.Truncate(time.Microsecond)
		if seen[w] {
			return Result{}, fmt.Errorf("%w: two limits with the window %v", ErrInvalidLimit, w)
		}
		seen[w] = true
	}

	base, index := l.allKeys(key)
	keys := make([]string, len(limits), len(limits)+1)
	id := ids.reserve(n)
	arg := &idArg{}
	arg.set(id)
	args := make([]any, 2, 2+2*len(limits))
	args[0], args[1] = n, arg
	for i, lim := range limits {
		keys[i] = windowKey(base, lim.Window)
		args = append(args, lim.Events, int64(lim.Window/time.Microsecond))
	}
	keys = append(keys, index)
	r, which, err := l.eval(ctx, allowAllScript, keys, args, Limit{})
	if err != nil {
		return Result{}, err
	}
	r.Limit = limits[which]
	if r.Allowed {
		logs := keys[:len(limits)]
		r.handle = Handle{keys: &logs, id: id, n: n, user: key}
	}
	return r, nil
}
