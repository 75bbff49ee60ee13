// Package slidelogprom exports slidelog's decisions as Prometheus metrics,
// through slidelog's Hook. It is a module of its own, so that the
// Prometheus client never reaches the core's importers.
//
//	hook, err := slidelogprom.New(prometheus.DefaultRegisterer)
//	limiter := slidelog.New(rdb, slidelog.WithName("api"), slidelog.WithHook(hook))
//
// Labels are bounded: the limiter's name, the operation, the outcome and
// whether a policy or the deny cache answered. Never the key.
package slidelogprom

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slidelog/slidelog"
)

// Hook counts decisions and observes their latency.
type Hook struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
}

var _ slidelog.Hook = (*Hook)(nil)

// New registers the metrics with reg:
//
//	slidelog_decisions_total{name, op, outcome, degraded, cached}
//	slidelog_decision_duration_seconds{name, op, outcome}
//
// outcome is "allowed", "denied" or "error"; in shadow mode it is the
// decision that would have been enforced.
func New(reg prometheus.Registerer) (*Hook, error) {
	h := &Hook{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slidelog_decisions_total",
			Help: "Rate-limit decisions by limiter name, operation and outcome.",
		}, []string{"name", "op", "outcome", "degraded", "cached"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slidelog_decision_duration_seconds",
			Help:    "Time from a call to its decision.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"name", "op", "outcome"}),
	}
	for _, c := range []prometheus.Collector{h.decisions, h.latency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Decided implements slidelog.Hook.
func (h *Hook) Decided(_ context.Context, o slidelog.Observation) {
	outcome := "denied"
	switch {
	case o.Err != nil && !o.Degraded:
		outcome = "error"
	case o.Allowed:
		outcome = "allowed"
	}
	h.decisions.WithLabelValues(o.Name, o.Op, outcome, strconv.FormatBool(o.Degraded), strconv.FormatBool(o.Cached)).Inc()
	h.latency.WithLabelValues(o.Name, o.Op, outcome).Observe(o.Latency.Seconds())
}
