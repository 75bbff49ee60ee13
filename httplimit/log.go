package httplimit

import (
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// LogInterval is the least time between two lines that a middleware's
// default OnError (and InFlight's default OnLeaseError) logs: during an
// outage every request fails, and one line a second says so without a
// flood. The lines left out are counted, and the next line that is logged
// says how many ("suppressed").
const LogInterval = time.Second

// errorLog logs one middleware's failures through slog.Default() (the
// default logger at the time of logging), at most a line per LogInterval.
type errorLog struct {
	what string           // the limit's kind: "rate" or "in-flight"
	now  func() time.Time // the middleware's clock (Options' clock, resolved)

	mu         sync.Mutex
	logged     bool
	last       time.Time // when the last line was logged
	suppressed int       // lines left out since
}

// log logs msg with attrs, and the count of lines left out before it,
// unless a line was logged less than LogInterval ago: then it counts it.
func (l *errorLog) log(r *http.Request, msg string, attrs ...slog.Attr) {
	now := l.now()
	l.mu.Lock()
	if l.logged && now.Sub(l.last) < LogInterval {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := l.suppressed
	l.logged, l.last, l.suppressed = true, now, 0
	l.mu.Unlock()
	attrs = append(attrs, slog.String("method", r.Method), slog.String("path", r.URL.Path))
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	slog.Default().LogAttrs(r.Context(), slog.LevelError, msg, attrs...)
}

// onError is the default OnError: a problem body (errorProblem), and for a
// 500 or a 503, a line. A 400 or a 413 is the client's doing and is not
// logged. The line never holds the request's key (an API key, a client's
// address): the error does not either.
func (l *errorLog) onError(w http.ResponseWriter, r *http.Request, status int, err error) {
	switch status {
	case http.StatusServiceUnavailable:
		l.log(r, "httplimit: the limiter is unavailable: answered 503", slog.String("limit", l.what), slog.Int("status", status), slog.Any("error", err))
	case http.StatusInternalServerError:
		l.log(r, "httplimit: a mistake in the configuration: answered 500", slog.String("limit", l.what), slog.Int("status", status), slog.Any("error", err))
	}
	errorProblem(w, r, status, err)
}

// onLeaseError is InFlight's default OnLeaseError: a line.
func (l *errorLog) onLeaseError(r *http.Request, err error) {
	l.log(r, "httplimit: a request's lease", slog.String("limit", l.what), slog.Any("error", err))
}
