package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// healthcheck exits 0 on 200 and 1 on anything else, naming the answer.
func TestHealthcheck(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			http.Error(w, "draining", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("OK"))
	}))
	defer srv.Close()
	code, out, _ := runLive("healthcheck", "--url", srv.URL+"/healthcheck")
	if code != 0 || !strings.Contains(out, "/healthcheck: OK") {
		t.Fatalf("healthy: exit %d, %q", code, out)
	}
	healthy.Store(false)
	code, _, errs := runLive("healthcheck", "--url", srv.URL+"/healthcheck")
	if code != 1 || !strings.Contains(errs, "500 Internal Server Error draining") {
		t.Fatalf("draining: exit %d, %q", code, errs)
	}
	srv.Close()
	if code, _, errs := runLive("healthcheck", "--url", srv.URL+"/healthcheck"); code != 1 || !strings.Contains(errs, "connection refused") {
		t.Fatalf("gone: exit %d, %q", code, errs)
	}
}
