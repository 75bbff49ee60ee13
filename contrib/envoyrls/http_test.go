package envoyrls_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slidelog/slidelog/contrib/envoyrls"
)

func TestJSONEndpoint(t *testing.T) {
	e := start(t, basic)
	h := httptest.NewServer(envoyrls.NewHandler(e.srv, nil))
	defer h.Close()
	post := func(body string) (int, string) {
		resp, err := http.Post(h.URL+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	req := `{"domain": "web", "descriptors": [{"entries": [{"key": "plan", "value": "free"}]}]}`
	for i, want := range []int{200, 200, 429} {
		code, body := post(req)
		if code != want {
			t.Fatalf("request %d: %d %s, want %d", i+1, code, body, want)
		}
		if i == 0 && !strings.Contains(body, `"overallCode":"OK"`) || !strings.Contains(body, `"requestsPerUnit":2`) {
			t.Fatalf("request %d: %s", i+1, body)
		}
		if want == 429 && !strings.Contains(body, `"OVER_LIMIT"`) {
			t.Fatalf("429 without OVER_LIMIT: %s", body)
		}
	}
	if code, body := post(`{"domain": "web"}`); code != 400 || !strings.Contains(body, "descriptor list must not be empty") {
		t.Fatalf("empty descriptors: %d %s", code, body)
	}
	if code, _ := post(`not json`); code != 400 {
		t.Fatalf("not JSON: %d", code)
	}
	for path, want := range map[string]string{
		"/healthcheck": "OK",
		"/rlconfig":    "web.remote_address: unit=MINUTE requests_per_unit=3",
		"/metrics":     `ratelimit_service_rate_limit_over_limit{domain="web",rule="plan_free"} 1`,
	} {
		resp, err := http.Get(h.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %s, want %q", path, resp.StatusCode, b, want)
		}
	}
}

func TestHotReload(t *testing.T) {
	dir := t.TempDir()
	write := func(name, yml string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(yml), 0o644); err != nil {
			t.Fatal(err)
		}
		// A later modification time than the last, whatever the clock's grain.
		later := time.Now().Add(time.Duration(len(yml)) * time.Millisecond)
		if err := os.Chtimes(p, later, later); err != nil {
			t.Fatal(err)
		}
	}
	rule := func(n string) string {
		return "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: " + n + "}\n"
	}
	write("d.yaml", rule("1"))
	write("ignored.txt", "not yaml")
	e := start(t, "domain: unused")
	r, err := envoyrls.NewReloader(dir, e.srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := httptest.NewServer(envoyrls.NewHandler(e.srv, r))
	defer h.Close()
	if got := e.admitted(t, "d", 3, desc("k", "a")); got != 1 {
		t.Fatalf("first configuration: %d of 3, want 1", got)
	}
	if loaded, err := r.Check(); loaded || err != nil {
		t.Fatalf("nothing changed: loaded %v, %v", loaded, err)
	}
	write("d.yaml", rule("3"))
	if loaded, err := r.Check(); !loaded || err != nil {
		t.Fatalf("changed: loaded %v, %v", loaded, err)
	}
	if got := e.admitted(t, "d", 3, desc("k", "a")); got != 2 {
		t.Fatalf("after the reload: %d of 3, want 2 more of 3", got)
	}
	// A broken file: refused, the last good configuration stays, /rlconfig says why.
	write("e.yaml", "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	if loaded, err := r.Check(); loaded || err == nil || !strings.Contains(err.Error(), "invalid rate limit unit 'fortnight'") {
		t.Fatalf("broken file: loaded %v, %v", loaded, err)
	}
	if got := e.admitted(t, "d", 3, desc("k", "b")); got != 3 {
		t.Fatalf("after a refused reload: %d of 3, want the last good 3", got)
	}
	resp, err := http.Get(h.URL + "/rlconfig")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{"d.k: unit=MINUTE requests_per_unit=3", "reload refused", "e.yaml: invalid rate limit unit 'fortnight'"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/rlconfig lacks %q:\n%s", want, b)
		}
	}
	// Fixed: both domains load.
	write("e.yaml", "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	if loaded, err := r.Check(); !loaded || err != nil {
		t.Fatalf("fixed: loaded %v, %v", loaded, err)
	}
	if got := e.admitted(t, "e", 2, desc("k", "a")); got != 1 {
		t.Fatalf("the new domain: %d of 2", got)
	}
	if !strings.Contains(metricsText(t, e.srv), "ratelimit_service_config_load_error 1") {
		t.Error("config_load_error not counted")
	}
}
