package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
	"github.com/slidelog/slidelog/local"
)

// Health checks and the internal network are exempt from a limit of 1 per
// minute per client. The client is found behind the proxy at 172.16.0.1 the
// same way for the key and for the allow list, so an outside client that
// writes an internal address into X-Forwarded-For is still counted.
func ExampleExemptClients() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a clock that stands still, for the output
	ipKey := httplimit.IPKey{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")}}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "healthy") })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	h := httplimit.New(httplimit.Options{
		Limiter: local.New(local.WithClock(func() time.Time { return start })), // or a *slidelog.Limiter
		Limit:   slidelog.PerMinute(1),
		Key:     httplimit.ClientIP(ipKey),
		Exempt: httplimit.ExemptAny(
			httplimit.ExemptPaths("/healthz"),
			httplimit.ExemptClients(ipKey, netip.MustParsePrefix("10.0.0.0/8")),
		),
	})(mux)

	send := func(path, xff string) {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "172.16.0.1:443" // the proxy
		r.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		rl := w.Header().Get("RateLimit")
		if rl == "" {
			rl = "(exempt: no RateLimit)"
		}
		fmt.Printf("%-15s %-22s %d %s\n", path, xff, w.Code, rl)
	}
	send("/api", "203.0.113.7")
	send("/api", "203.0.113.7")
	send("/healthz", "203.0.113.7")
	send("/healthz/../api", "203.0.113.7")
	send("/api", "10.1.2.3")
	send("/api", "10.1.2.3")
	send("/api", "10.1.2.3, 203.0.113.7")
	// Output:
	// /api            203.0.113.7            200 "default";r=0;t=60
	// /api            203.0.113.7            429 "default";r=0;t=60
	// /healthz        203.0.113.7            200 (exempt: no RateLimit)
	// /healthz/../api 203.0.113.7            429 "default";r=0;t=60
	// /api            10.1.2.3               200 (exempt: no RateLimit)
	// /api            10.1.2.3               200 (exempt: no RateLimit)
	// /api            10.1.2.3, 203.0.113.7  429 "default";r=0;t=60
}
