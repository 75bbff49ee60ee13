package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
	"github.com/slidelog/slidelog/local"
)

// The health check is registered for GET alone: ExemptRoutes asks the mux,
// so GET /healthz is exempt while POST /healthz, which the mux hands to the
// API, is counted like any API request.
func ExampleExemptRoutes() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a clock that stands still, for the output
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "healthy") })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "api") })
	h := httplimit.New(httplimit.Options{
		Limiter: local.New(local.WithClock(func() time.Time { return start })), // or a *slidelog.Limiter
		Limit:   slidelog.PerMinute(1),
		Exempt:  httplimit.ExemptRoutes(mux, "GET /healthz"),
	})(mux)

	for _, method := range []string{"GET", "GET", "POST", "POST"} {
		r := httptest.NewRequest(method, "/healthz", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		body := w.Body.String()
		if w.Code != http.StatusOK {
			body = "-" // the 429's problem+json
		}
		rl := w.Header().Get("RateLimit")
		if rl == "" {
			rl = "(exempt: no RateLimit)"
		}
		fmt.Printf("%-4s /healthz %d %-7s %s\n", method, w.Code, body, rl)
	}
	// Output:
	// GET  /healthz 200 healthy (exempt: no RateLimit)
	// GET  /healthz 200 healthy (exempt: no RateLimit)
	// POST /healthz 200 api     "default";r=0;t=60
	// POST /healthz 429 -       "default";r=0;t=60
}
