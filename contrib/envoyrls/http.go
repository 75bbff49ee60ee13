package envoyrls

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// Handler serves envoyproxy/ratelimit's HTTP endpoints for a Server:
//
//	/healthcheck  200 OK with a configuration in force, 500 once draining (Drain)
//	/json         a RateLimitRequest in protobuf JSON (POST), its response
//	              out: 200 OK, 429 OVER_LIMIT; 400 a refused request, 503
//	              Redis unavailable, 500 a bug
//	/rlconfig     the configuration in force, a line per rule, and the last
//	              reload's error if it was refused
//	/metrics      the metrics (Metrics.Handler)
type Handler struct {
	mux      *http.ServeMux
	server   *Server
	source   ConfigSource
	healthy  func(*Config) bool
	draining atomic.Bool
}

// A ConfigSource keeps a Server's configuration (a Reloader, an XDS
// client): Status is when the configuration in force was loaded, and the
// error of the last one offered if it was refused.
type ConfigSource interface {
	Status() (loadedAt, errAt time.Time, err error)
}

// maxJSONBody bounds a /json request's body.
const maxJSONBody = 1 << 20

// NewHandler serves s's endpoints; source (may be nil) tells /rlconfig
// when the configuration was loaded and why the last one offered was
// refused.
func NewHandler(s *Server, source ConfigSource) *Handler {
	switch src := source.(type) {
	case *Reloader:
		if src == nil {
			source = nil
		}
	case *XDS:
		if src == nil {
			source = nil
		}
	}
	h := &Handler{mux: http.NewServeMux(), server: s, source: source, healthy: func(c *Config) bool { return c != nil }}
	h.mux.HandleFunc("/healthcheck", h.health)
	h.mux.HandleFunc("/json", h.json)
	h.mux.HandleFunc("/rlconfig", h.rlconfig)
	h.mux.Handle("/metrics", s.metrics.Handler())
	return h
}

// SetHealthy replaces the rule of /healthcheck's answer while the
// service is not draining: healthy(the configuration in force, nil if
// none) true is 200, false 500. The default is healthy with a
// configuration in force. Call it before serving.
func (h *Handler) SetHealthy(healthy func(*Config) bool) { h.healthy = healthy }

// Drain makes /healthcheck answer 500, so that a load balancer stops
// sending work while the service stops.
func (h *Handler) Drain() { h.draining.Store(true) }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) health(w http.ResponseWriter, _ *http.Request) {
	switch {
	case h.draining.Load():
		http.Error(w, "draining", http.StatusInternalServerError)
	case !h.healthy(h.server.Config()):
		http.Error(w, "no configuration", http.StatusInternalServerError)
	default:
		_, _ = io.WriteString(w, "OK")
	}
}

func (h *Handler) json(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a RateLimitRequest in JSON", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := h.server.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		code := http.StatusBadRequest
		switch status.Code(err) {
		case codes.Unavailable:
			code = http.StatusServiceUnavailable
		case codes.Internal:
			code = http.StatusInternalServerError
		case codes.DeadlineExceeded:
			code = http.StatusGatewayTimeout
		}
		http.Error(w, status.Convert(err).Message(), code)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(out)
}

func (h *Handler) rlconfig(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var b strings.Builder
	cfg := h.server.Config()
	if cfg == nil {
		b.WriteString("no configuration loaded\n")
	} else {
		b.WriteString(cfg.String())
	}
	if h.source != nil {
		loaded, errAt, err := h.source.Status()
		if cfg != nil && !loaded.IsZero() {
			fmt.Fprintf(&b, "\n# loaded %s from %s\n", loaded.UTC().Format(time.RFC3339), strings.Join(cfg.Files(), ", "))
		}
		if err != nil {
			fmt.Fprintf(&b, "# reload refused %s, the configuration above stays in force: %v\n", errAt.UTC().Format(time.RFC3339), err)
		}
	}
	_, _ = io.WriteString(w, b.String())
}
