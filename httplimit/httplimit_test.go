package httplimit_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
	"github.com/slidelog/slidelog/internal/redistest"
	"github.com/slidelog/slidelog/local"
)

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })

// server is a limiter on a miniredis whose clock stands still.
func server(t *testing.T, opts ...slidelog.Option) (*miniredis.Miniredis, *slidelog.Limiter) {
	m := miniredis.RunT(t)
	m.SetTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(redistest.DialOnce(&redis.Options{Addr: m.Addr(), MaxRetries: -1})) // (tests stop it)
	t.Cleanup(func() { _ = rdb.Close() })
	return m, slidelog.New(rdb, opts...)
}

func get(h http.Handler, remote string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestHeadersAllowedAndDenied(t *testing.T) {
	m, l := server(t)
	h := httplimit.New(httplimit.Options{Limiter: l, Limit: slidelog.Limit{Events: 2, Window: 90 * time.Second},
		Name: "api", LegacyHeaders: true})(ok)
	steps := []struct {
		at                        time.Duration
		status                    int
		rateLimit, retry, remains string
		reset                     string
	}{
		{0, 200, `"api";r=1;t=0`, "", "1", "90"},
		{10 * time.Second, 200, `"api";r=0;t=90`, "", "0", "90"},
		// denied: the first event leaves at 90s; 69.5s rounds up to 70
		{20*time.Second + 500*time.Millisecond, 429, `"api";r=0;t=70`, "70", "0", "80"},
		// 1µs before it leaves: Retry-After is 1, never 0
		{90*time.Second - time.Microsecond, 429, `"api";r=0;t=1`, "1", "0", "11"},
		{90 * time.Second, 200, `"api";r=0;t=90`, "", "0", "90"},
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, s := range steps {
		m.SetTime(start.Add(s.at))
		w := get(h, "192.0.2.1:1234")
		hd := w.Header()
		if w.Code != s.status || hd.Get("RateLimit") != s.rateLimit || hd.Get("Retry-After") != s.retry ||
			hd.Get("RateLimit-Policy") != `"api";q=2;w=90` || hd.Get("X-RateLimit-Limit") != "2" ||
			hd.Get("X-RateLimit-Remaining") != s.remains || hd.Get("X-RateLimit-Reset") != s.reset {
			t.Errorf("step %d: %d %v", i, w.Code, hd)
		}
		if s.status == 429 {
			var p struct {
				Status int    `json:"status"`
				Title  string `json:"title"`
			}
			if hd.Get("Content-Type") != "application/problem+json" || json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Status != 429 {
				t.Errorf("step %d: body %q (%s)", i, w.Body, hd.Get("Content-Type"))
			}
		}
	}
}

func TestNoLegacyHeadersByDefault(t *testing.T) {
	_, l := server(t)
	w := get(httplimit.New(httplimit.Options{Limiter: l, Limit: slidelog.PerSecond(1)})(ok), "192.0.2.1:1")
	if w.Header().Get("X-RateLimit-Limit") != "" || w.Header().Get("RateLimit-Policy") != `"default";q=1;w=1` {
		t.Errorf("headers %v", w.Header())
	}
}

// Redis down: 503 under FailClosed, admitted under FailOpen, the local
// share under FailLocal; the headers say what was applied.
func TestRedisDown(t *testing.T) {
	lim := slidelog.PerHour(4)
	for _, c := range []struct {
		name   string
		policy slidelog.Policy
		codes  []int
	}{
		{"closed", slidelog.FailClosed, []int{503, 503, 503}},
		{"open", slidelog.FailOpen, []int{200, 200, 200}},
		{"local", slidelog.FailLocal(local.New(), 2), []int{200, 200, 429}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, l := server(t, slidelog.WithPolicy(c.policy))
			m.Close()
			h := httplimit.New(httplimit.Options{Limiter: l, Limit: lim})(ok)
			for i, code := range c.codes {
				w := get(h, "192.0.2.1:1")
				if w.Code != code {
					t.Errorf("request %d: %d, want %d (%s)", i, w.Code, code, w.Body)
				}
				if c.name == "local" && w.Header().Get("RateLimit-Policy") != `"default";q=2;w=3600` {
					t.Errorf("request %d: policy %q, want the local share", i, w.Header().Get("RateLimit-Policy"))
				}
			}
		})
	}
}

func TestWeightedAndKeys(t *testing.T) {
	_, l := server(t)
	h := httplimit.New(httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(10),
		Key: httplimit.Header("X-API-Key"), Cost: func(*http.Request) int { return 4 }})(ok)
	codes := []int{}
	for range 3 {
		codes = append(codes, get(h, "192.0.2.1:1", "X-API-Key", "abc").Code)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Errorf("weighted: %v, want 200 200 429", codes)
	}
	if w := get(h, "192.0.2.1:1", "X-API-Key", "other"); w.Code != 200 {
		t.Errorf("another key: %d", w.Code)
	}
	if w := get(h, "192.0.2.1:1"); w.Code != 400 {
		t.Errorf("no key: %d", w.Code)
	}
	heavy := httplimit.New(httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(10),
		Cost: func(*http.Request) int { return 11 }})(ok)
	if w := get(heavy, "192.0.2.1:1"); w.Code != 413 {
		t.Errorf("a request heavier than the limit: %d, want 413", w.Code)
	}
}

// A daily quota's 429 names it as a Limit prints itself ("3 per day in
// Europe/Berlin"), and its RateLimit t is the day's end while room is
// left. Before, the body said "3 per 0s" (a quota's Window) and t=0.
func TestCalendarQuotaFields(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2027, 3, 28, 10, 0, 0, 0, berlin) // a day of 23 hours; 14 h to its end
	h := httplimit.New(httplimit.Options{Limiter: local.New(local.WithClock(func() time.Time { return at })), Limit: slidelog.Daily(2, berlin)})(ok)
	if w := get(h, "192.0.2.1:1"); w.Code != 200 || !strings.Contains(w.Header().Get("RateLimit"), "r=1;t=50400") {
		t.Errorf("with room: %d, RateLimit %q; want r=1;t=50400", w.Code, w.Header().Get("RateLimit"))
	}
	get(h, "192.0.2.1:1")
	if w := get(h, "192.0.2.1:1"); w.Code != 429 || !strings.Contains(w.Body.String(), "rate limit of 2 per day in Europe/Berlin reached; retry in 50400 s") {
		t.Errorf("denied: %d %q", w.Code, w.Body.String())
	}
}
