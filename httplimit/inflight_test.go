package httplimit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
	"github.com/slidelog/slidelog/internal/redistest"
	"github.com/slidelog/slidelog/local"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is a settable clock for local.WithClock, read by request goroutines.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(d time.Duration) {
	c.mu.Lock()
	c.t = epoch.Add(d)
	c.mu.Unlock()
}

// fakeTimer is a renewal timer that fires when the test says.
type fakeTimer struct {
	mu    sync.Mutex
	d     time.Duration
	fn    func()
	armed bool
}

func (f *fakeTimer) Reset(d time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := f.armed
	f.d, f.armed = d, true
	return was
}

func (f *fakeTimer) Stop() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := f.armed
	f.armed = false
	return was
}

// fire runs the renewal if the timer is armed, and reports whether it was.
func (f *fakeTimer) fire() bool {
	f.mu.Lock()
	armed := f.armed
	f.armed = false
	f.mu.Unlock()
	if armed {
		f.fn()
	}
	return armed
}

// fakeTimers is renewal timers that fire when the test says: after plans
// a renewal on one (httplimit.WithClock's after), and made returns the
// timers after made so far.
func fakeTimers() (after func(time.Duration, func()) httplimit.Timer, made func() []*fakeTimer) {
	var mu sync.Mutex
	var timers []*fakeTimer
	after = func(d time.Duration, fn func()) httplimit.Timer {
		f := &fakeTimer{d: d, fn: fn, armed: true}
		mu.Lock()
		timers = append(timers, f)
		mu.Unlock()
		return f
	}
	made = func() []*fakeTimer {
		mu.Lock()
		defer mu.Unlock()
		return append([]*fakeTimer(nil), timers...)
	}
	return after, made
}

// gate is a handler whose requests with "X-Block" wait, once inside, until
// the test lets one go; the others answer at once.
type gate struct {
	entered chan struct{}
	proceed chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}), proceed: make(chan struct{})} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Block") != "" {
		g.entered <- struct{}{}
		<-g.proceed
	}
	_, _ = w.Write([]byte("ok"))
}

// hold sends a request that waits in the gate, and returns once it is
// inside; its response comes on the channel when the gate lets it go. A
// request answered without entering fails the test.
func (g *gate) hold(t *testing.T, h http.Handler, remote string) <-chan *httptest.ResponseRecorder {
	t.Helper()
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- get(h, remote, "X-Block", "1") }()
	select {
	case <-g.entered:
	case w := <-done:
		t.Fatalf("a request to hold was answered %d without running", w.Code)
	}
	return done
}

// Two requests of a client hold both slots: a third is answered 429 with
// Retry-After at the oldest lease's end, rounded up, never 0, and no
// RateLimit field; a request that returns frees its slot at once.
func TestInFlightHoldsAndReleases(t *testing.T) {
	after, _ := fakeTimers()
	c := &clock{t: epoch}
	l := local.New(local.WithClock(c.now))
	g := newGate()
	h := httplimit.InFlight(httplimit.InFlightOptions{Options: httplimit.WithClock(httplimit.Options{Limiter: l,
		Limit: slidelog.InFlight(2, 10*time.Second), Name: "api", LegacyHeaders: true}, nil, after)})(g)
	a := g.hold(t, h, "192.0.2.1:1")
	b := g.hold(t, h, "192.0.2.1:2")
	for _, s := range []struct {
		at    time.Duration
		retry string
	}{{0, "10"}, {2500 * time.Millisecond, "8"}, {10*time.Second - time.Microsecond, "1"}} {
		c.set(s.at)
		w := get(h, "192.0.2.1:3")
		hd := w.Header()
		if w.Code != 429 || hd.Get("Retry-After") != s.retry || hd.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(w.Body.String(), "all 2 slots") {
			t.Errorf("at %v: %d %v %s", s.at, w.Code, hd, w.Body)
		}
		for _, f := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit"} {
			if hd.Get(f) != "" {
				t.Errorf("at %v: an in-flight limit wrote %s", s.at, f)
			}
		}
	}
	if w := get(h, "198.51.100.7:1"); w.Code != 200 {
		t.Errorf("another client: %d", w.Code)
	}
	g.proceed <- struct{}{}
	var first *httptest.ResponseRecorder
	other := b
	select {
	case first = <-a:
	case first = <-b:
		other = a
	}
	if first.Code != 200 || first.Header().Get("RateLimit") != "" {
		t.Errorf("a held request: %d %v", first.Code, first.Header())
	}
	// Its slot is free at once, well before any lease ends.
	third := g.hold(t, h, "192.0.2.1:3")
	if w := get(h, "192.0.2.1:3"); w.Code != 429 {
		t.Errorf("the other holder and the third hold both slots: %d", w.Code)
	}
	c.set(10 * time.Second) // the other's lease, never renewed here, ran out
	if w := get(h, "192.0.2.1:3"); w.Code != 200 {
		t.Errorf("after the lease ran out: %d", w.Code)
	}
	g.proceed <- struct{}{}
	g.proceed <- struct{}{}
	<-other
	<-third
}

// A handler that panics gives its slot back, and the panic goes on.
func TestInFlightPanicReleases(t *testing.T) {
	after, _ := fakeTimers()
	_, l := server(t)
	boom := errors.New("boom")
	h := httplimit.InFlight(httplimit.InFlightOptions{Options: httplimit.WithClock(httplimit.Options{Limiter: l,
		Limit: slidelog.InFlight(1, time.Hour)}, nil, after)})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(boom) }))
	for i := range 3 {
		got := func() (v any) {
			defer func() { v = recover() }()
			get(h, "192.0.2.1:1")
			return nil
		}()
		if err, _ := got.(error); !errors.Is(err, boom) {
			t.Fatalf("request %d: recovered %v, want the handler's panic", i, got)
		}
	}
}

type cancelKey struct{}

// The client went away (its context canceled) while the handler ran: the
// slot is still released.
func TestInFlightReleasesAfterCancel(t *testing.T) {
	after, _ := fakeTimers()
	_, l := server(t)
	h := httplimit.InFlight(httplimit.InFlightOptions{Options: httplimit.WithClock(httplimit.Options{Limiter: l,
		Limit: slidelog.InFlight(1, time.Hour)}, nil, after)})(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		r.Context().Value(cancelKey{}).(context.CancelFunc)()
	}))
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := httptest.NewRequestWithContext(context.WithValue(ctx, cancelKey{}, cancel), "GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			t.Fatalf("request %d: %d: the slot of the request before was not released", i, w.Code)
		}
	}
}

// Errors answer as New's do: 413, 400, 500, 503, through OnError.
func TestInFlightErrors(t *testing.T) {
	after, _ := fakeTimers()
	_, l := server(t, slidelog.WithMaxEvents(10))
	m2, down := server(t)
	m2.Close()
	lim := slidelog.InFlight(2, time.Minute)
	for _, c := range []struct {
		name   string
		o      httplimit.Options
		status int
		want   error
	}{
		{"heavier than the limit", httplimit.Options{Limiter: l, Limit: lim, Cost: func(*http.Request) int { return 3 }}, 413, slidelog.ErrExceedsLimit},
		{"no key", httplimit.Options{Limiter: l, Limit: lim, Key: httplimit.Header("X-API-Key")}, 400, nil},
		{"zero cost", httplimit.Options{Limiter: l, Limit: lim, Cost: func(*http.Request) int { return 0 }}, 500, slidelog.ErrInvalidN},
		{"invalid LimitFor", httplimit.Options{Limiter: l, LimitFor: func(*http.Request) slidelog.Limit { return slidelog.InFlight(0, time.Second) }}, 500, slidelog.ErrInvalidLimit},
		{"LimitFor's lease under MinLease", httplimit.Options{Limiter: l, LimitFor: func(*http.Request) slidelog.Limit { return slidelog.InFlight(2, time.Millisecond) }}, 500, slidelog.ErrInvalidLimit},
		{"empty key", httplimit.Options{Limiter: l, Limit: lim, Key: func(*http.Request) (string, error) { return "", nil }}, 500, slidelog.ErrEmptyKey},
		{"over WithMaxEvents", httplimit.Options{Limiter: l, Limit: slidelog.InFlight(11, time.Minute)}, 500, slidelog.ErrLimitTooLarge},
		{"redis down", httplimit.Options{Limiter: down, Limit: lim}, 503, nil},
	} {
		var status int
		var got error
		c.o.OnError = func(w http.ResponseWriter, _ *http.Request, s int, err error) {
			status, got = s, err
			w.WriteHeader(s)
		}
		called := false
		next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true })
		w := get(httplimit.InFlight(httplimit.InFlightOptions{Options: httplimit.WithClock(c.o, nil, after)})(next), "192.0.2.1:1")
		if w.Code != c.status || status != c.status || got == nil || (c.want != nil && !errors.Is(got, c.want)) || called {
			t.Errorf("%s: %d, OnError(%d, %v), handler called %v; want %d", c.name, w.Code, status, got, called, c.status)
		}
		if w.Header().Get("Retry-After") != "" || w.Header().Get("RateLimit-Policy") != "" {
			t.Errorf("%s: headers %v", c.name, w.Header())
		}
	}
	// The default OnError: a problem body.
	h := httplimit.InFlight(httplimit.InFlightOptions{Options: httplimit.WithClock(httplimit.Options{Limiter: down, Limit: lim}, nil, after)})(ok)
	if w := get(h, "192.0.2.1:1"); w.Code != 503 || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("default OnError: %d %v", w.Code, w.Header())
	}
}

// An exempt request is neither counted nor holding a slot.
func TestInFlightExempt(t *testing.T) {
	after, _ := fakeTimers()
	_, l := server(t)
	g := newGate()
	h := httplimit.InFlight(httplimit.InFlightOptions{Options: httplimit.WithClock(httplimit.Options{Limiter: l, Limit: slidelog.InFlight(1, time.Hour),
		Exempt: func(r *http.Request) bool { return r.URL.Path == "/healthz" }}, nil, after)})(g)
	health := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		r := httptest.NewRequest("GET", "/healthz", nil)
		r.RemoteAddr = "192.0.2.1:1"
		r.Header.Set("X-Block", "1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		health <- w
	}()
	<-g.entered
	// The exempt request runs; the one slot is still free.
	held := g.hold(t, h, "192.0.2.1:1")
	if w := get(h, "192.0.2.1:1"); w.Code != 429 {
		t.Errorf("the one slot is held: %d", w.Code)
	}
	r := httptest.NewRequest("GET", "/healthz", nil)
	r.RemoteAddr = "192.0.2.1:1"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 {
		t.Errorf("an exempt request while the slot is held: %d", w.Code)
	}
	g.proceed <- struct{}{}
	g.proceed <- struct{}{}
	<-health
	<-held
}

// A running request renews its lease every third of it, so it holds its
// slot for as long as it runs; a renewal that comes too late is told to
// OnLeaseError, and stops.
func TestInFlightRenews(t *testing.T) {
	after, timers := fakeTimers()
	c := &clock{t: epoch}
	l := local.New(local.WithClock(c.now))
	g := newGate()
	var mu sync.Mutex
	var leaseErrs []error
	h := httplimit.InFlight(httplimit.InFlightOptions{
		Options: httplimit.WithClock(httplimit.Options{Limiter: l, Limit: slidelog.InFlight(1, 9*time.Second)}, c.now, after),
		OnLeaseError: func(_ *http.Request, err error) {
			mu.Lock()
			leaseErrs = append(leaseErrs, err)
			mu.Unlock()
		},
	})(g)
	a := g.hold(t, h, "192.0.2.1:1")
	tm := timers()
	if len(tm) != 1 || tm[0].d != 3*time.Second {
		t.Fatalf("timers %v: want one, every 3 s", tm)
	}
	renewer := tm[0]
	for i, at := range []time.Duration{8 * time.Second, 16 * time.Second} {
		c.set(at)
		if !renewer.fire() {
			t.Fatalf("renewal %d: the timer was not armed", i)
		}
		// without the renewal the lease would have run out at 9 s (18 s)
		c.set(at + 8*time.Second)
		if w := get(h, "192.0.2.1:2"); w.Code != 429 || w.Header().Get("Retry-After") != "1" {
			t.Errorf("renewal %d: %d, Retry-After %q", i, w.Code, w.Header().Get("Retry-After"))
		}
	}
	// No renewal for 9 s: the slot frees, another request takes it, and the
	// late renewal finds the slot gone.
	c.set(33 * time.Second)
	b := g.hold(t, h, "192.0.2.1:2")
	if !renewer.fire() {
		t.Fatal("the timer was not armed")
	}
	mu.Lock()
	if len(leaseErrs) != 1 || !errors.Is(leaseErrs[0], slidelog.ErrNotHeld) {
		t.Errorf("OnLeaseError got %v, want ErrNotHeld", leaseErrs)
	}
	mu.Unlock()
	if renewer.fire() {
		t.Error("a lost lease is renewed again")
	}
	g.proceed <- struct{}{}
	g.proceed <- struct{}{}
	<-a
	<-b
	if tm := timers(); tm[1].fire() {
		t.Error("a finished request's renewal is still armed")
	}
	mu.Lock()
	if len(leaseErrs) != 1 {
		t.Errorf("lease errors %v: a finished request must release without error", leaseErrs)
	}
	mu.Unlock()
}

// A release that fails (Redis failing) is told to OnLeaseError; the slot
// then stays held until its lease runs out.
func TestInFlightReleaseFails(t *testing.T) {
	after, _ := fakeTimers()
	m, l := server(t)
	var got error
	h := httplimit.InFlight(httplimit.InFlightOptions{
		Options:      httplimit.WithClock(httplimit.Options{Limiter: l, Limit: slidelog.InFlight(1, time.Hour)}, nil, after),
		OnLeaseError: func(_ *http.Request, err error) { got = err },
	})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		m.SetError("LOADING Redis is loading the dataset in memory")
	}))
	if w := get(h, "192.0.2.1:1"); w.Code != 200 || got == nil || !strings.Contains(got.Error(), "release") {
		t.Fatalf("%d, OnLeaseError(%v)", w.Code, got)
	}
	m.SetError("")
	if w := get(h, "192.0.2.1:1"); w.Code != 429 {
		t.Errorf("the unreleased slot: %d, want 429 until its lease runs out", w.Code)
	}
}

// Configuration mistakes fail when the middleware is built.
func TestInFlightRefusesMisconfiguration(t *testing.T) {
	_, l := server(t)
	notAcquirer := struct{ slidelog.Decider }{l}
	for _, c := range []struct {
		name string
		o    httplimit.InFlightOptions
		want string
	}{
		{"not an Acquirer", httplimit.InFlightOptions{Options: httplimit.Options{Limiter: notAcquirer, Limit: slidelog.InFlight(1, time.Minute)}}, "Acquirer"},
		{"no limiter", httplimit.InFlightOptions{Options: httplimit.Options{Limit: slidelog.InFlight(1, time.Minute)}}, "Limiter"},
		{"no limit", httplimit.InFlightOptions{Options: httplimit.Options{Limiter: l}}, "Limit"},
		{"invalid limit", httplimit.InFlightOptions{Options: httplimit.Options{Limiter: l, Limit: slidelog.InFlight(-1, time.Minute)}}, "Options.Limit"},
		{"lease under MinLease", httplimit.InFlightOptions{Options: httplimit.Options{Limiter: l, Limit: slidelog.InFlight(1, time.Millisecond)}}, "MinLease"},
	} {
		err := c.o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate %v, want an error naming %s", c.name, err, c.want)
		}
		got := func() (msg string) {
			defer func() {
				if r := recover(); r != nil {
					msg = r.(string)
				}
			}()
			httplimit.InFlight(c.o)
			return ""
		}()
		if err != nil && got != err.Error() {
			t.Errorf("%s: panic %q, want %q", c.name, got, err)
		}
	}
	if err := (httplimit.InFlightOptions{Options: httplimit.Options{Limiter: local.New(), Limit: slidelog.InFlight(1, time.Minute)}}).Validate(); err != nil {
		t.Errorf("local: %v", err)
	}
	if err := (httplimit.InFlightOptions{Options: httplimit.Options{Limiter: l, Limit: slidelog.InFlight(1, httplimit.MinLease)}}).Validate(); err != nil {
		t.Errorf("a lease of MinLease: %v", err)
	}
}

// End to end on a real redis-server, through an HTTP server: many clients
// at once, never more than the limit's handlers running, every slot back
// at the end.
func TestInFlightRealRedis(t *testing.T) {
	addr, rdb := realRedis(t)
	const holders = 4
	handler, most := counting(time.Millisecond)
	// Two instances of the service, each with its own limiter and server.
	var urls []string
	for range 2 {
		l := instance(t, addr)
		srv := httptest.NewServer(httplimit.InFlight(httplimit.InFlightOptions{Options: httplimit.Options{Limiter: l,
			Limit: slidelog.InFlight(holders, time.Minute), Key: httplimit.Header("X-Tenant")}})(handler))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	var codes sync.Map
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				req, _ := http.NewRequest("GET", urls[i%2], nil)
				req.Header.Set("X-Tenant", "acme")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_ = resp.Body.Close()
				if ra := resp.Header.Get("Retry-After"); resp.StatusCode == 429 && (len(ra) == 0 || ra == "0" || len(ra) > 2) {
					t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
				}
				n, _ := codes.LoadOrStore(resp.StatusCode, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}
		}()
	}
	wg.Wait()
	count := func(code int) int64 {
		if n, ok := codes.Load(code); ok {
			return n.(*atomic.Int64).Load()
		}
		return 0
	}
	if most.Load() > holders || count(200) == 0 || count(429) == 0 || count(200)+count(429) != 24*20 {
		t.Errorf("at most %d handlers at once (limit %d); %d admitted, %d denied", most.Load(), holders, count(200), count(429))
	}
	if n := rdb.ZCard(context.Background(), "slidelog:{slidelog:header:acme}:inflight").Val(); n != 0 {
		t.Errorf("every request returned, and the log holds %d", n)
	}
}

// rateFieldNames are the fields a rate limit's middleware writes.
var rateFieldNames = []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}

// rateFieldsOf is the rate-limit fields w carries, "" if none.
func rateFieldsOf(w *httptest.ResponseRecorder) string {
	var found []string
	for _, f := range rateFieldNames {
		if v := w.Header().Get(f); v != "" {
			found = append(found, f+": "+v)
		}
	}
	return strings.Join(found, ", ")
}

// A rate limit mounted outside an in-flight limit, rate(inflight(h)), the
// order docs/inflight.md showed before: the in-flight limit's 429 and its
// errors carry no RateLimit field, though the rate limit wrote them before
// (they described the rate limit, "r=1;t=0", beside the in-flight
// Retry-After: 3600; TestInFlightWithRateLimit failed on it before the
// fix). And the cost of this order: the rate limit charged the request the
// in-flight limit denied, so the third request takes the minute's last
// event and the fourth is over the rate. docs/inflight.md shows the other
// order (TestInFlightOutsideChargesNoDenied).
func TestInFlightWithRateLimit(t *testing.T) {
	after, _ := fakeTimers()
	_, l := server(t)
	g := newGate()
	key := httplimit.Header("X-API-Key")
	rate := httplimit.New(httplimit.Options{Limiter: l, Limit: slidelog.PerMinute(3), Key: key, LegacyHeaders: true})
	inflight := httplimit.InFlight(httplimit.InFlightOptions{Options: httplimit.WithClock(httplimit.Options{Limiter: l,
		Limit: slidelog.InFlight(1, time.Hour), Key: key}, nil, after)})
	h := rate(inflight(g))
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- get(h, "192.0.2.1:1", "X-API-Key", "abc", "X-Block", "1") }()
	<-g.entered
	w := get(h, "192.0.2.1:1", "X-API-Key", "abc")
	if w.Code != 429 || w.Header().Get("Retry-After") != "3600" || rateFieldsOf(w) != "" {
		t.Errorf("second request, the slot held: %d, Retry-After %q, rate fields %q; want 429, 3600 and none", w.Code, w.Header().Get("Retry-After"), rateFieldsOf(w))
	}
	g.proceed <- struct{}{}
	if w := <-done; w.Code != 200 || w.Header().Get("RateLimit") != `"default";r=2;t=0` {
		t.Errorf("first request: %d %v", w.Code, w.Header())
	}
	if w := get(h, "192.0.2.1:1", "X-API-Key", "abc"); w.Code != 200 || w.Header().Get("RateLimit") != `"default";r=0;t=60` {
		t.Errorf("third request, the slot free and one left in the minute (the second was charged): %d %v", w.Code, w.Header())
	}
	if w := get(h, "192.0.2.1:1", "X-API-Key", "abc"); w.Code != 429 || w.Header().Get("Retry-After") != "60" || w.Header().Get("RateLimit") != `"default";r=0;t=60` {
		t.Errorf("fourth request, over the rate: %d %v", w.Code, w.Header())
	}

	// An in-flight error (its limiter down, the rate's up): no rate field either.
	m2, down := server(t)
	m2.Close()
	h = rate(httplimit.InFlight(httplimit.InFlightOptions{Options: httplimit.WithClock(httplimit.Options{Limiter: down,
		Limit: slidelog.InFlight(1, time.Hour), Key: key}, nil, after)})(ok))
	if w := get(h, "192.0.2.1:1", "X-API-Key", "other"); w.Code != 503 || rateFieldsOf(w) != "" {
		t.Errorf("the in-flight limiter down: %d, rate fields %q; want 503 and none", w.Code, rateFieldsOf(w))
	}
}

// The order docs/inflight.md shows, inflight(rate(h)), charges no denied
// request: a request the in-flight limit denies never reaches the rate
// limit (not charged, no RateLimit field), and one the rate limit denies
// gives back its slot as soon as it is answered (nothing held). Five
// requests denied while the slot is held leave the minute's quota whole:
// two more are admitted after, and only the third of them is over the
// rate, which then holds no slot.
func TestInFlightOutsideChargesNoDenied(t *testing.T) {
	after, _ := fakeTimers()
	_, l := server(t)
	g := newGate()
	key := httplimit.Header("X-API-Key")
	perMinute, oneAtOnce := slidelog.PerMinute(3), slidelog.InFlight(1, time.Hour)
	rate := httplimit.New(httplimit.Options{Limiter: l, Limit: perMinute, Key: key})
	inflight := httplimit.InFlight(httplimit.InFlightOptions{Options: httplimit.WithClock(httplimit.Options{Limiter: l, Limit: oneAtOnce, Key: key}, nil, after)})
	h := inflight(rate(g))
	ctx := context.Background()
	charged := func() int {
		res, err := l.Peek(ctx, "header:abc", perMinute)
		if err != nil {
			t.Fatal(err)
		}
		return perMinute.Events - res.Remaining
	}
	held := func() bool { // whether the key's slot is taken
		lease, err := l.Acquire(ctx, "header:abc", oneAtOnce)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return !lease.Allowed
	}

	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- get(h, "192.0.2.1:1", "X-API-Key", "abc", "X-Block", "1") }()
	<-g.entered
	for i := range 5 {
		w := get(h, "192.0.2.1:1", "X-API-Key", "abc")
		if w.Code != 429 || w.Header().Get("Retry-After") != "3600" || rateFieldsOf(w) != "" {
			t.Errorf("denied by the slot, %d: %d, Retry-After %q, rate fields %q", i, w.Code, w.Header().Get("Retry-After"), rateFieldsOf(w))
		}
	}
	if n := charged(); n != 1 {
		t.Errorf("the rate limit charged %d events for 1 admitted request and 5 denied by the in-flight limit, want 1", n)
	}
	g.proceed <- struct{}{}
	if w := <-done; w.Code != 200 || w.Header().Get("RateLimit") != `"default";r=2;t=0` {
		t.Errorf("the first request: %d %v", w.Code, w.Header())
	}
	for i, want := range []int{200, 200, 429, 429} {
		w := get(h, "192.0.2.1:1", "X-API-Key", "abc")
		if w.Code != want || w.Header().Get("RateLimit") == "" {
			t.Errorf("after the release, request %d: %d %v, want %d with the rate's fields", i, w.Code, w.Header(), want)
		}
		if want == 429 && w.Header().Get("Retry-After") != "60" {
			t.Errorf("over the rate, request %d: Retry-After %q, want 60", i, w.Header().Get("Retry-After"))
		}
	}
	if n := charged(); n != 3 {
		t.Errorf("the rate limit holds %d events for 3 admitted requests, want 3", n)
	}
	if held() {
		t.Error("a request the rate limit denied still holds its slot")
	}
}

// dueTimer is a renewal timer that knows when, on the test's clock, it
// would fire.
type dueTimer struct {
	c     *clock
	mu    sync.Mutex
	due   time.Time
	fn    func()
	armed bool
}

func (f *dueTimer) Reset(d time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := f.armed
	f.due, f.armed = f.c.now().Add(d), true
	return was
}

func (f *dueTimer) Stop() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := f.armed
	f.armed = false
	return was
}

// fireWhenDue sets the clock to when the timer would fire, and fires it.
func (f *dueTimer) fireWhenDue(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	armed, due := f.armed, f.due
	f.armed = false
	f.mu.Unlock()
	if !armed {
		t.Fatal("the renewal timer is not armed")
	}
	f.c.set(due.Sub(epoch))
	f.fn()
}

// slowRenewals is an Acquirer whose leases' renewals, while slow is set,
// fail after taking a third of the lease on the clock: a renewal cut short
// by its own bound (a third of the lease), as when Redis does not answer.
type slowRenewals struct {
	*local.Limiter
	c    *clock
	slow atomic.Bool
}

func (s *slowRenewals) AcquireN(ctx context.Context, key string, limit slidelog.Limit, n int) (slidelog.Lease, error) {
	l, err := s.Limiter.AcquireN(ctx, key, limit, n)
	if err != nil || !l.Allowed {
		return l, err
	}
	return slidelog.NewLease(l.Result, l.Release).WithRenew(func(ctx context.Context) (slidelog.Result, error) {
		if s.slow.Load() {
			s.c.mu.Lock()
			s.c.t = s.c.t.Add(limit.Window / 3)
			s.c.mu.Unlock()
			return slidelog.Result{}, context.DeadlineExceeded
		}
		r, err := l.Renew(ctx)
		return r.Result, err
	}), nil
}

// A renewal that fails by running out its bound (a third of the lease)
// leaves time for another before the lease ends: the next one is planned a
// third of the lease after the failed one began, not after it ended. Before,
// it came exactly at the lease's end, too late: the slot was lost, and a
// request running for as long as it likes would share its slot.
func TestInFlightRenewsAfterSlowFailure(t *testing.T) {
	c := &clock{t: epoch}
	var made []*dueTimer
	after := func(d time.Duration, fn func()) httplimit.Timer {
		f := &dueTimer{c: c, due: c.now().Add(d), fn: fn, armed: true}
		made = append(made, f)
		return f
	}
	acq := &slowRenewals{Limiter: local.New(local.WithClock(c.now)), c: c}
	g := newGate()
	var mu sync.Mutex
	var leaseErrs []error
	h := httplimit.InFlight(httplimit.InFlightOptions{
		Options: httplimit.WithClock(httplimit.Options{Limiter: acq, Limit: slidelog.InFlight(1, 9*time.Second)}, c.now, after),
		OnLeaseError: func(_ *http.Request, err error) {
			mu.Lock()
			leaseErrs = append(leaseErrs, err)
			mu.Unlock()
		},
	})(g)
	a := g.hold(t, h, "192.0.2.1:1") // acquired at 0: the lease ends at 9 s
	if len(made) != 1 {
		t.Fatalf("%d timers", len(made))
	}
	renewer := made[0]
	acq.slow.Store(true)
	renewer.fireWhenDue(t) // at 3 s; it fails at 6 s
	acq.slow.Store(false)
	renewer.fireWhenDue(t) // in time: before 9 s
	if at := c.now().Sub(epoch); at >= 9*time.Second {
		t.Errorf("the renewal after a slow failure came at %v, at or after the lease's end (9s)", at)
	}
	c.set(10 * time.Second)
	if w := get(h, "192.0.2.1:2"); w.Code != 429 {
		t.Errorf("at 10 s the running request's slot is free: %d", w.Code)
	}
	mu.Lock()
	if len(leaseErrs) != 1 || !errors.Is(leaseErrs[0], context.DeadlineExceeded) {
		t.Errorf("OnLeaseError got %v, want the slow renewal's error alone", leaseErrs)
	}
	mu.Unlock()
	g.proceed <- struct{}{}
	<-a
}

// noRenewals is an Acquirer whose leases cannot be renewed (NewLease
// without WithRenew), as FailLocal's leases from a fallback that is not an
// Acquirer.
type noRenewals struct{ *local.Limiter }

func (n noRenewals) AcquireN(ctx context.Context, key string, limit slidelog.Limit, count int) (slidelog.Lease, error) {
	l, err := n.Limiter.AcquireN(ctx, key, limit, count)
	return slidelog.NewLease(l.Result, l.Release), err
}

// A lease that cannot be renewed is told to OnLeaseError once, and not
// tried again every third of the lease for as long as the request runs.
func TestInFlightUnrenewable(t *testing.T) {
	after, timers := fakeTimers()
	g := newGate()
	var mu sync.Mutex
	var leaseErrs []error
	h := httplimit.InFlight(httplimit.InFlightOptions{
		Options: httplimit.WithClock(httplimit.Options{Limiter: noRenewals{local.New()}, Limit: slidelog.InFlight(1, time.Minute)}, nil, after),
		OnLeaseError: func(_ *http.Request, err error) {
			mu.Lock()
			leaseErrs = append(leaseErrs, err)
			mu.Unlock()
		},
	})(g)
	a := g.hold(t, h, "192.0.2.1:1")
	renewer := timers()[0]
	if !renewer.fire() {
		t.Fatal("the timer was not armed")
	}
	if renewer.fire() {
		t.Error("a lease that cannot be renewed is renewed again")
	}
	mu.Lock()
	if len(leaseErrs) != 1 || !errors.Is(leaseErrs[0], errors.ErrUnsupported) {
		t.Errorf("OnLeaseError got %v, want one errors.ErrUnsupported", leaseErrs)
	}
	mu.Unlock()
	g.proceed <- struct{}{}
	if w := <-a; w.Code != 200 {
		t.Errorf("%d", w.Code)
	}
}

// End to end on a real redis-server: clients that send a request and go
// away at once (the request's context ends while its slot is being taken,
// often while its call waits in a pipeline), among clients that wait for
// their answers. Never more than the limit's handlers run, and once every
// request is over, every slot is back: none is left held by nobody for its
// lease.
func TestInFlightClientsGoAwayRealRedis(t *testing.T) {
	addr, rdb := realRedis(t)
	const holders = 4
	var inside sync.WaitGroup
	handler, most := counting(100 * time.Microsecond)
	var servers []*httptest.Server
	for range 2 {
		l := instance(t, addr)
		mw := httplimit.InFlight(httplimit.InFlightOptions{Options: httplimit.Options{Limiter: l,
			Limit: slidelog.InFlight(holders, time.Minute), Key: httplimit.Header("X-Tenant")}})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inside.Add(1)
			defer inside.Done()
			mw(handler).ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		servers = append(servers, srv)
	}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv := servers[i%2]
			for j := range 30 {
				if (i+j)%2 == 0 {
					// send, and go away without reading the answer
					c, err := net.Dial("tcp", srv.Listener.Addr().String())
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nX-Tenant: acme\r\n\r\n"))
					_ = c.Close()
					continue
				}
				req, _ := http.NewRequest("GET", srv.URL, nil)
				req.Header.Set("X-Tenant", "acme")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_ = resp.Body.Close()
				if resp.StatusCode != 200 && resp.StatusCode != 429 {
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	for _, srv := range servers {
		srv.Close() // waits for no request; inside does
	}
	inside.Wait()
	if most.Load() > holders {
		t.Errorf("%d handlers at once, limit %d", most.Load(), holders)
	}
	log := "slidelog:{slidelog:header:acme}:inflight"
	var n int64
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if n = rdb.ZCard(context.Background(), log).Val(); n == 0 {
			return
		}
	}
	t.Errorf("every request is over, and %d slots are held by nobody", n)
}

// realRedis starts a real redis-server for the test, and a client of it.
func realRedis(t *testing.T) (string, *redis.Client) {
	t.Helper()
	addr := redistest.Start(t)
	return addr, instanceClient(t, addr)
}

// instance is one instance of a service: a limiter of its own on the
// Redis at addr.
func instance(t *testing.T, addr string) *slidelog.Limiter {
	return slidelog.New(instanceClient(t, addr))
}

func instanceClient(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// counting is a handler that takes d, and the most of its calls that ran
// at once.
func counting(d time.Duration) (http.Handler, *atomic.Int64) {
	var running, most atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(d)
		running.Add(-1)
		_, _ = w.Write([]byte("ok"))
	}), &most
}
