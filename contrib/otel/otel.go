// Package slidelogotel records slidelog's decisions as OpenTelemetry
// metrics, through slidelog's Hook: the measurements of the Prometheus
// adapter (github.com/slidelog/slidelog/contrib/prometheus), under the same
// attributes, through the OpenTelemetry metrics API. It is a module of its
// own, so that OpenTelemetry never reaches the core's importers.
//
//	hook, err := slidelogotel.New() // the global MeterProvider
//	limiter := slidelog.New(rdb, slidelog.WithName("api"), slidelog.WithHook(hook))
//
// Attributes are bounded: the limiter's name, the operation, the outcome and
// whether a policy or the deny cache answered. Never the key.
package slidelogotel

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/slidelog/slidelog"
)

// ScopeName is the instrumentation scope of the Hook's meter: the package's
// import path, as OpenTelemetry asks of an instrumentation library.
const ScopeName = "github.com/slidelog/slidelog/contrib/otel"

// Hook counts decisions and records their latency. It is safe for
// concurrent use by multiple goroutines.
type Hook struct {
	decisions metric.Int64Counter
	latency   metric.Float64Histogram

	// The attribute sets seen so far, by series: a decision allocates
	// nothing once its series has been recorded. There are few series (a
	// limiter name, three operations, three outcomes, two flags), and no
	// key among them.
	sets sync.Map // series -> *measurement
}

var _ slidelog.Hook = (*Hook)(nil)

// series is what the attributes of one decision are made of.
type series struct {
	name, op, outcome string
	degraded, cached  bool
}

// measurement holds a series' attributes, ready for each instrument.
type measurement struct {
	// Slices, passed on with ..., so that a call does not allocate one.
	decisions []metric.AddOption
	latency   []metric.RecordOption
}

// Option configures New.
type Option func(*config)

type config struct {
	provider metric.MeterProvider
}

// WithMeterProvider sets the MeterProvider the Hook's meter comes from.
// Default: the global one, otel.GetMeterProvider(), read by New (the global
// provider forwards to one installed later with otel.SetMeterProvider).
// Renaming an instrument or changing its buckets is the provider's business:
// an SDK View does it.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.provider = mp }
}

// New creates the instruments, on the meter named ScopeName:
//
//	slidelog.decisions           counter, {decision}: name, op, outcome, degraded, cached
//	slidelog.decision.duration   histogram, seconds:  name, op, outcome
//
// outcome is "allowed", "denied" or "error"; in shadow mode it is the
// decision that would have been enforced. degraded and cached are booleans:
// a policy answered for an unavailable Redis (Observation.Degraded), the
// deny cache answered without Redis (Observation.Cached). The histogram's
// buckets go from 100µs to 250ms, as the Prometheus adapter's do.
func New(opts ...Option) (*Hook, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.provider == nil {
		c.provider = otel.GetMeterProvider()
	}
	meter := c.provider.Meter(ScopeName)
	decisions, err1 := meter.Int64Counter("slidelog.decisions",
		metric.WithDescription("Rate-limit decisions by limiter name, operation and outcome."),
		metric.WithUnit("{decision}"))
	latency, err2 := meter.Float64Histogram("slidelog.decision.duration",
		metric.WithDescription("Time from a call to its decision."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25))
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return &Hook{decisions: decisions, latency: latency}, nil
}

// Decided implements slidelog.Hook. ctx goes to the instruments, so that an
// SDK sampling exemplars links a measurement to the caller's span.
func (h *Hook) Decided(ctx context.Context, o slidelog.Observation) {
	s := series{name: o.Name, op: o.Op, outcome: "denied", degraded: o.Degraded, cached: o.Cached}
	switch {
	case o.Err != nil && !o.Degraded:
		s.outcome = "error"
	case o.Allowed:
		s.outcome = "allowed"
	}
	m := h.measurement(s)
	h.decisions.Add(ctx, 1, m.decisions...)
	h.latency.Record(ctx, o.Latency.Seconds(), m.latency...)
}

// measurement returns the attributes of s, made once.
func (h *Hook) measurement(s series) *measurement {
	if m, ok := h.sets.Load(s); ok {
		return m.(*measurement)
	}
	name, op, outcome := attribute.String("name", s.name), attribute.String("op", s.op), attribute.String("outcome", s.outcome)
	m := &measurement{
		decisions: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(name, op, outcome,
			attribute.Bool("degraded", s.degraded), attribute.Bool("cached", s.cached)))},
		latency: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(name, op, outcome))},
	}
	actual, _ := h.sets.LoadOrStore(s, m)
	return actual.(*measurement)
}
