// Package deadline tells whether a call's context has ended, the one rule
// of the library and of contrib/grpclimit.
package deadline

import (
	"context"
	"time"
)

// Ended is ctx.Err(), or context.DeadlineExceeded once ctx's deadline has
// passed though ctx.Err() does not tell it yet. go-redis sets a
// connection's deadline to the context's, so the network can report a
// deadline before the context's own timer has run (a busy machine delays
// it): a call cut short by the caller's deadline is told as such either
// way, not as an unavailable Redis.
func Ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
