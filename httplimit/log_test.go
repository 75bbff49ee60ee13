package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
)

// records is a slog.Handler that keeps every record.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *records) WithGroup(string) slog.Handler            { return h }

func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}

// lines is the records so far, each as its message and attributes.
func (h *records) lines() []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]any
	for _, r := range h.recs {
		m := map[string]any{"msg": r.Message, "level": r.Level}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Any(); return true })
		out = append(out, m)
	}
	return out
}

// capture makes slog.Default() log to a records for the test. A
// middleware's default OnError reads the clock of its Options: set it with
// onClock.
func capture(t *testing.T) *records {
	h := &records{}
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
	return h
}

// onClock is o with its default OnError's rate of lines on c.
func onClock(o httplimit.Options, c *clock) httplimit.Options {
	return httplimit.WithClock(o, c.now, nil)
}

// failing is a limiter whose every call fails as an unavailable Redis does.
type failing struct{ slidelog.Decider }

var errDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (failing) AllowN(context.Context, string, slidelog.Limit, int) (slidelog.Result, error) {
	return slidelog.Result{}, errDown
}

func (failing) AcquireN(context.Context, string, slidelog.Limit, int) (slidelog.Lease, error) {
	return slidelog.Lease{}, errDown
}

// Without OnError, a 503 is logged through slog.Default(): one line, then
// none for a second however many requests fail, then one saying how many
// were left out. (Before the fix nothing was logged: an outage was silent.)
func TestDefaultOnErrorLogs(t *testing.T) {
	c := &clock{}
	c.set(0)
	logs := capture(t)
	for _, mw := range []struct {
		name string
		mw   func(http.Handler) http.Handler
	}{
		{"New", httplimit.New(onClock(httplimit.Options{Limiter: failing{}, Limit: slidelog.PerMinute(10)}, c))},
		{"InFlight", httplimit.InFlight(httplimit.InFlightOptions{Options: onClock(httplimit.Options{Limiter: failing{}, Limit: slidelog.InFlight(10, time.Minute)}, c)})},
	} {
		t.Run(mw.name, func(t *testing.T) {
			logs.mu.Lock()
			logs.recs = nil
			logs.mu.Unlock()
			c.set(time.Hour)
			h := mw.mw(ok)
			for range 100 {
				if w := get(h, "192.0.2.1:1"); w.Code != 503 || w.Header().Get("Content-Type") != "application/problem+json" {
					t.Fatalf("%d %v, want 503 with a problem body", w.Code, w.Header())
				}
			}
			c.set(time.Hour + httplimit.LogInterval - time.Nanosecond)
			get(h, "192.0.2.1:1")
			lines := logs.lines()
			if len(lines) != 1 {
				t.Fatalf("%d lines after 101 failures within a second, want 1: %v", len(lines), lines)
			}
			if strings.Contains(fmt.Sprint(lines), "192.0.2.1") {
				t.Errorf("a line holds the key: %v", lines)
			}
			l := lines[0]
			if e, _ := l["error"].(error); !errors.Is(e, errDown) || l["level"] != slog.LevelError || l["status"] != int64(503) || l["path"] != "/" || l["suppressed"] != nil {
				t.Errorf("the first line: %v", l)
			}
			c.set(time.Hour + httplimit.LogInterval)
			get(h, "192.0.2.1:1")
			lines = logs.lines()
			if len(lines) != 2 || lines[1]["suppressed"] != int64(100) {
				t.Fatalf("after a second: %v, want a second line with suppressed=100", lines)
			}
		})
	}
}

// The default logs 500s (a bug) too, but not a client's 400 or 413; an
// OnError of one's own replaces it, and nothing is logged.
func TestDefaultOnErrorLogsWhat(t *testing.T) {
	c := &clock{}
	logs := capture(t)
	_, l := server(t)
	lim := slidelog.PerMinute(10)
	for i, o := range []httplimit.Options{
		{Limiter: l, Limit: lim, Key: httplimit.Header("X-API-Key")},          // 400
		{Limiter: l, Limit: lim, Cost: func(*http.Request) int { return 11 }}, // 413
		{Limiter: failing{}, Limit: lim, OnError: func(w http.ResponseWriter, _ *http.Request, status int, _ error) { w.WriteHeader(status) }},
	} {
		c.set(time.Duration(i) * time.Hour)
		if w := get(httplimit.New(onClock(o, c))(ok), "192.0.2.1:1"); w.Code < 400 {
			t.Fatalf("case %d: %d", i, w.Code)
		}
	}
	if lines := logs.lines(); len(lines) != 0 {
		t.Errorf("lines %v, want none", lines)
	}
	c.set(10 * time.Hour)
	bug := httplimit.New(onClock(httplimit.Options{Limiter: l, Limit: lim, Cost: func(*http.Request) int { return 0 }}, c))(ok)
	if w := get(bug, "192.0.2.1:1"); w.Code != 500 {
		t.Fatalf("%d, want 500", w.Code)
	}
	if lines := logs.lines(); len(lines) != 1 || lines[0]["status"] != int64(500) {
		t.Errorf("lines %v, want the 500", lines)
	}
}

// InFlight's default OnLeaseError logs a failed release.
func TestDefaultOnLeaseErrorLogs(t *testing.T) {
	after, _ := fakeTimers()
	c := &clock{}
	logs := capture(t)
	m, l := server(t)
	h := httplimit.InFlight(httplimit.InFlightOptions{
		Options: httplimit.WithClock(httplimit.Options{Limiter: l, Limit: slidelog.InFlight(1, time.Hour)}, c.now, after),
	})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		m.SetError("LOADING Redis is loading the dataset in memory")
	}))
	if w := get(h, "192.0.2.1:1"); w.Code != 200 {
		t.Fatalf("%d", w.Code)
	}
	m.SetError("")
	lines := logs.lines()
	if len(lines) != 1 {
		t.Fatalf("lines %v, want one", lines)
	}
	if err, _ := lines[0]["error"].(error); err == nil || !strings.Contains(err.Error(), "release") || lines[0]["level"] != slog.LevelError {
		t.Errorf("line %v", lines[0])
	}
}
