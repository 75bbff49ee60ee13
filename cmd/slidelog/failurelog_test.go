package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
)

// A request slidelog refuses before asking Redis (too many limits for one
// AllowEach, which the rls then decides each on its own) is no failure of
// Redis: no "rate limiter failed" line, and no "redis decides again"
// after it. A Redis failure is logged, and the success after it says so.
func TestFailureLogLeavesBadInputOut(t *testing.T) {
	var out bytes.Buffer
	at := time.Unix(1_764_000_000, 0)
	f := newFailureLog(slog.New(slog.NewTextHandler(&out, nil)), "closed", func() time.Time { return at })
	ctx := context.Background()
	tooMany := fmt.Errorf("%w: AllowEach over more than MaxLimits (64) limits", slidelog.ErrInvalidLimit)
	f.Decided(ctx, slidelog.Observation{Op: "allow_each", Err: tooMany})
	f.Decided(ctx, slidelog.Observation{Op: "allow_all", Allowed: true})
	if out.Len() != 0 {
		t.Errorf("a refused request logged:\n%s", out.String())
	}
	f.Decided(ctx, slidelog.Observation{Op: "allow", Err: errors.New("dial tcp: connection refused")})
	f.Decided(ctx, slidelog.Observation{Op: "allow", Allowed: true})
	if s := out.String(); !strings.Contains(s, "rate limiter failed") || !strings.Contains(s, "redis decides again") {
		t.Errorf("a Redis failure and the success after it:\n%s", s)
	}
}
