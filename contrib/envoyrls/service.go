package envoyrls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http/httpguts"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/ratefields"
)

// Headers chooses the response headers the service asks Envoy to add
// (response_headers_to_add).
type Headers int

const (
	// HeadersDraft11: RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers-11), an item per limited
	// descriptor, in the request's order.
	HeadersDraft11 Headers = 1 << iota
	// HeadersLegacy: envoyproxy/ratelimit's RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset (LIMIT_RESPONSE_HEADERS_ENABLED)
	// of the descriptor closest to its limit.
	HeadersLegacy
)

// Options configure a Server.
type Options struct {
	Limiter *slidelog.Limiter // required: its policy answers while Redis is unavailable
	// Prefix starts every key the service decides on, before the
	// limiter's own prefix. Default "rls:".
	Prefix string
	// NearLimitRatio: an admitted hit counts as near_limit past this share
	// of the limit (envoyproxy/ratelimit's NEAR_LIMIT_RATIO). Default 0.8.
	NearLimitRatio float64
	Headers        Headers
	// ShadowMode answers OK whatever the limits say, as envoyproxy/
	// ratelimit's SHADOW_MODE (the statuses still say OVER_LIMIT).
	ShadowMode bool
	// QuotaMode makes every rule a quota_mode one, as envoyproxy/
	// ratelimit's QUOTA_MODE: a request is OVER_LIMIT only when every
	// limited descriptor of it is.
	QuotaMode bool
	// UsageMode makes every rule a usage_mode one: every hits_addend above
	// 0 is usage reported after the fact, recorded whatever the logs hold,
	// and hits_addend 0 a check. For rules that come over xDS (Envoy
	// Gateway, Envoy AI Gateway), whose configuration has no usage_mode,
	// where every request-phase action sends hits_addend 0.
	UsageMode bool
	// LegacyHeaderNames names HeadersLegacy's three headers, as
	// envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
	// LIMIT_RESET_HEADER; an empty name keeps its default
	// (RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset).
	LegacyHeaderNames LegacyHeaderNames
	// RefundTimeout bounds the take-back of a request's admitted
	// descriptors when another of them is over its limit. Default 1s.
	RefundTimeout time.Duration
	Logger        *slog.Logger // default slog.Default()
}

// Server is envoy.service.ratelimit.v3.RateLimitService over a
// *slidelog.Limiter: register it on a gRPC server
// (rlsv3.RegisterRateLimitServiceServer).
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	opts    Options
	cfg     atomic.Pointer[Config]
	metrics *Metrics
}

// New returns a Server deciding with opts.Limiter under cfg (nil: no
// configuration yet; every request fails until SetConfig).
func New(cfg *Config, opts Options) (*Server, error) {
	if opts.Limiter == nil {
		return nil, errors.New("envoyrls: Options.Limiter is nil")
	}
	if opts.Prefix == "" {
		opts.Prefix = "rls:"
	}
	if opts.NearLimitRatio == 0 {
		opts.NearLimitRatio = 0.8
	}
	if opts.NearLimitRatio < 0 || opts.NearLimitRatio > 1 {
		return nil, fmt.Errorf("envoyrls: NearLimitRatio %v: want 0 to 1", opts.NearLimitRatio)
	}
	if opts.RefundTimeout <= 0 {
		opts.RefundTimeout = time.Second
	}
	names := &opts.LegacyHeaderNames
	for _, n := range []struct {
		name *string
		def  string
	}{{&names.Limit, "RateLimit-Limit"}, {&names.Remaining, "RateLimit-Remaining"}, {&names.Reset, "RateLimit-Reset"}} {
		if *n.name == "" {
			*n.name = n.def
		}
		if !validHeaderName(*n.name) {
			return nil, fmt.Errorf("envoyrls: LegacyHeaderNames: %q is not a header name", *n.name)
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, metrics: newMetrics()}
	if cfg != nil {
		s.cfg.Store(cfg)
	}
	return s, nil
}

// SetConfig puts cfg in force for the requests that arrive from now on.
func (s *Server) SetConfig(cfg *Config) { s.cfg.Store(cfg) }

// Config is the configuration in force, or nil.
func (s *Server) Config() *Config { return s.cfg.Load() }

// Metrics are the service's counters.
func (s *Server) Metrics() *Metrics { return s.metrics }

// MaxDescriptors is the most descriptors one request may carry (Envoy
// sends one per rate limit action that applies, a handful); a request with
// more fails, before anything is decided: each descriptor is a decision in
// Redis.
const MaxDescriptors = 256

// maxKeyLen bounds a descriptor's key in Redis (its values are a request's,
// up to Envoy's header limits): a longer one is the prefix, the domain and
// the SHA-256 of the whole key, each value still its own count.
const maxKeyLen = 512

// one is a descriptor of a request on its way.
type one struct {
	m        *match
	c        *counters // its metrics
	override *rlv3.RateLimitDescriptor_RateLimitOverride
	// apart: the override's log is its own (the key's, and its unit), not
	// the configured rule's, whose window differs
	apart    string
	limits   []slidelog.Limit
	units    []rlsv3.RateLimitResponse_RateLimit_Unit
	names    []string
	key      string
	n        int
	shown    int  // the limit its status names (current_limit)
	limited  bool // decided (not unmatched, unlimited or replaced)
	res      slidelog.Result
	admitted bool // recorded events (to take back if the request is over)
	// unrecorded: it fitted, in a request AllowEach denied, so nothing was
	// recorded; its Remaining is counted as if admitted, and its status
	// gives the hits back, as a take-back would
	unrecorded bool
	// charge: a usage_mode rule's hits (hits_addend > 0), usage reported
	// after the fact: recorded whatever the logs hold (Charge), never
	// denied, never taken back
	charge bool
	denied bool // over its limit
	local  bool // denied without Redis: it can never fit
	err    error
}

func serviceError(msg string) error { return status.Error(codes.Unknown, msg) }

// ShouldRateLimit decides req: each descriptor against the rule it matches,
// on Redis. OVER_LIMIT if any (not shadowed) descriptor is over its limit
// (or every quota_mode descriptor is), and then the events admitted for the
// request's other descriptors are taken back before the answer. Redis
// unavailable (with the limiter's FailClosed policy) is UNAVAILABLE.
//
// A usage_mode rule's hits (hits_addend > 0: usage an Envoy action with
// apply_on_stream_done reports after the response) are recorded whatever
// its logs hold (Charge): never denied, never taken back, never making the
// request OVER_LIMIT; a Redis failure fails the call under any policy.
// Its hits_addend 0 (the request phase's check) looks, as on any rule.
//
// A panic while the request is decided (the limiter's Hook's, a Logger's)
// fails the call with INTERNAL, logged with its stack, and the service goes
// on: what a decision recorded before it panicked stays counted.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (resp *rlsv3.RateLimitResponse, err error) {
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, s.grpcError(ctx, s.panicked(p))
		}
		s.metrics.observe(time.Since(start))
	}()
	return s.shouldRateLimit(ctx, req)
}

func (s *Server) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		s.metrics.serviceError.Add(1)
		return nil, serviceError("rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		s.metrics.serviceError.Add(1)
		return nil, serviceError("rate limit descriptor list must not be empty")
	}
	if n := len(req.GetDescriptors()); n > MaxDescriptors {
		s.metrics.serviceError.Add(1)
		return nil, serviceError(fmt.Sprintf("rate limit descriptor list has %d descriptors, more than %d", n, MaxDescriptors))
	}
	cfg := s.cfg.Load()
	if cfg == nil {
		s.metrics.serviceError.Add(1)
		return nil, serviceError(errNoConfig.Error())
	}
	ds := make([]one, len(req.GetDescriptors()))
	replacing := map[string]bool{}
	for i, d := range req.GetDescriptors() {
		o := &ds[i]
		o.n = hitsAddend(req, d)
		if ov := d.GetLimit(); ov != nil {
			if _, known := cfg.domains[req.GetDomain()]; !known {
				s.metrics.domainNotFound(req.GetDomain())
				continue
			}
			unit := rlsv3.RateLimitResponse_RateLimit_Unit(ov.GetUnit())
			w, ok := unitWindow[unit]
			if !ok {
				s.metrics.serviceError.Add(1)
				return nil, serviceError(fmt.Sprintf("descriptor %d: limit override with unit %v", i, ov.GetUnit()))
			}
			lim := slidelog.Limit{Events: int(ov.GetRequestsPerUnit()), Window: w}
			if err := checkOverride(lim); err != nil {
				s.metrics.serviceError.Add(1)
				return nil, serviceError(fmt.Sprintf("descriptor %d: limit override of %d per %v: %v", i, ov.GetRequestsPerUnit(), unit, err))
			}
			o.override = ov
			// An override counts in the configured rule's log when that is
			// one limit of the same window (as envoyproxy/ratelimit's
			// counter of that unit); else in a log of its own per unit: a
			// log decided under two windows keeps only what the shorter
			// leaves, so a shorter override would expire the rule's count.
			m := cfg.match(req.GetDomain(), d)
			if m == nil || len(m.rule.Limits) != 1 || m.rule.Limits[0].Window != w {
				o.apart = "|~" + unit.String()
			}
			// A usage_mode rule's usage stays usage under an override.
			usage := m != nil && m.rule.Usage
			o.m = &match{rule: &Rule{FullKey: descriptorKey(req.GetDomain(), d), Usage: usage}, statsKey: descriptorKey(req.GetDomain(), d)}
			for _, e := range d.GetEntries() {
				o.m.values = append(o.m.values, e.GetValue())
			}
			o.limits = []slidelog.Limit{lim}
			o.c = s.metrics.override(req.GetDomain(), d)
			o.units = []rlsv3.RateLimitResponse_RateLimit_Unit{unit}
			o.names = []string{""}
		} else {
			if _, known := cfg.domains[req.GetDomain()]; !known {
				s.metrics.domainNotFound(req.GetDomain())
			}
			o.m = cfg.match(req.GetDomain(), d)
			if o.m == nil {
				continue
			}
			o.limits, o.units, o.names = o.m.rule.Limits, o.m.rule.Units, o.m.rule.Names
		}
		for _, r := range o.m.rule.Replaces {
			replacing[r] = true
		}
		o.limited = !o.m.rule.Unlimited
	}
	for i := range ds {
		o := &ds[i]
		if !o.limited {
			continue
		}
		for _, n := range o.names {
			if n != "" && replacing[n] {
				o.limited = false
			}
		}
	}
	s.decide(ctx, req, ds)

	resp := &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds))}
	var failed error
	over, quotaTotal, quotaOver := 0, 0, 0
	for i := range ds {
		o := &ds[i]
		switch {
		case o.m != nil && o.m.rule.Unlimited:
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			continue
		case !o.limited:
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
			continue
		case o.err != nil:
			if failed == nil {
				failed = o.err
			}
			continue
		}
		st := s.status(o)
		resp.Statuses[i] = st
		if o.charge && !o.denied {
			continue // usage recorded: OK, whatever the key holds now
		}
		quota := o.m.rule.Quota || s.opts.QuotaMode
		if quota {
			quotaTotal++
		}
		if o.denied && !o.m.rule.Shadow {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			if quota {
				quotaOver++
			} else {
				over++
			}
		}
	}
	code := rlsv3.RateLimitResponse_OK
	if over > 0 || quotaTotal > 0 && quotaTotal == quotaOver {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if code == rlsv3.RateLimitResponse_OVER_LIMIT && s.opts.ShadowMode {
		code = rlsv3.RateLimitResponse_OK
		s.metrics.globalShadow.Add(1)
	}
	if failed != nil || code == rlsv3.RateLimitResponse_OVER_LIMIT {
		s.takeBack(ctx, ds, resp)
	}
	if failed != nil {
		return nil, s.grpcError(ctx, failed)
	}
	resp.OverallCode = code
	resp.ResponseHeadersToAdd = s.headers(ds, resp)
	return resp, nil
}

// hitsAddend is envoyproxy/ratelimit's: the descriptor's own (0 allowed:
// look without recording), else the request's, at least 1. Past MaxInt32
// it is MaxInt32: more than any limit, so OVER_LIMIT all the same.
func hitsAddend(req *rlsv3.RateLimitRequest, d *rlv3.RateLimitDescriptor) int {
	if h := d.GetHitsAddend(); h != nil {
		return int(min(h.GetValue(), math.MaxInt32))
	}
	return int(min(max(1, uint64(req.GetHitsAddend())), math.MaxInt32))
}

// checkOverride reports why a limit override cannot be decided exactly
// (its requests_per_unit past slidelog.MaxEvents), or nil. An override of
// 0 is valid: it denies every hit, as envoyproxy/ratelimit's does.
func checkOverride(lim slidelog.Limit) error {
	if lim.Events == 0 {
		return nil
	}
	if lim.Events > slidelog.MaxEvents {
		return fmt.Errorf("more than %d (slidelog.MaxEvents), the most a window keeps", slidelog.MaxEvents)
	}
	return lim.Validate()
}

// descriptorKey is envoyproxy/ratelimit's name of a descriptor with a
// limit override: domain.key_value.key2_value2.
func descriptorKey(domain string, d *rlv3.RateLimitDescriptor) string {
	var parts []string
	for _, e := range d.GetEntries() {
		p := e.GetKey()
		if e.GetValue() != "" {
			p += "_" + e.GetValue()
		}
		parts = append(parts, p)
	}
	return domain + "." + strings.Join(parts, ".")
}

// redisKey is the descriptor's key: the prefix, the domain, each entry's
// key and value (its pattern under share_threshold), '%', '|' and '='
// escaped so that no two descriptors share a key. Past maxKeyLen, the
// entries are "|#" and the SHA-256 of the whole key in hex: no '=', which
// every entry of a key written out has.
func redisKey(prefix, domain string, d *rlv3.RateLimitDescriptor, values []string) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(escape(domain))
	for i, e := range d.GetEntries() {
		b.WriteString("|" + escape(e.GetKey()) + "=" + escape(values[i]))
	}
	if b.Len() <= maxKeyLen {
		return b.String()
	}
	sum := sha256.Sum256([]byte(b.String()))
	return prefix + escape(domain) + "|#" + hex.EncodeToString(sum[:])
}

var escaper = strings.NewReplacer("%", "%25", "|", "%7C", "=", "%3D")

func escape(s string) string { return escaper.Replace(s) }

// decide asks Redis for every limited descriptor, at once when there are
// several (the limiter batches them).
func (s *Server) decide(ctx context.Context, req *rlsv3.RateLimitRequest, ds []one) {
	var wg sync.WaitGroup
	asked, bad := 0, false
	for i := range ds {
		o := &ds[i]
		if !o.limited {
			continue
		}
		o.key = redisKey(s.opts.Prefix, req.GetDomain(), req.GetDescriptors()[i], o.m.values) + o.apart
		if o.c == nil {
			o.c = s.metrics.rule(req.GetDomain(), o.m.statsKey)
		}
		o.c.total.Add(uint64(o.n))
		o.charge = (o.m.rule.Usage || s.opts.UsageMode) && o.n > 0
		switch fits, err := fit(o.limits, max(o.n, 1), o.charge); {
		case err != nil:
			o.err, bad = err, true
		case fits:
			asked++
		default:
			o.denied, o.local = true, true
		}
	}
	if bad { // nothing is decided for a request the service cannot decide
		return
	}
	if asked > 1 && s.decideEach(ctx, ds) {
		for i := range ds {
			if o := &ds[i]; o.limited && o.err == nil {
				s.count(o)
			}
		}
		return
	}
	for i := range ds {
		o := &ds[i]
		if !o.limited || o.local {
			continue
		}
		if asked == 1 {
			s.decideOne(ctx, o)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					o.res, o.denied, o.admitted, o.err = slidelog.Result{}, false, false, s.panicked(p)
				}
			}()
			s.decideOne(ctx, o)
		}()
	}
	wg.Wait()
	for i := range ds {
		if o := &ds[i]; o.limited && o.err == nil {
			s.count(o)
		}
	}
}

// fit reports whether n events can ever fit every limit (checked as the
// limiter checks them, before anything is asked of Redis): not when a limit
// is 0 (every hit denied) or smaller than n. An error is a limit the
// limiter would refuse, which the configuration's checks let through: a
// bug.
func fit(limits []slidelog.Limit, n int, usage bool) (bool, error) {
	fits := true
	for _, l := range limits {
		if l.Events == 0 {
			fits = false
			continue
		}
		validate := l.ValidateN
		if usage { // usage may be more than the limit (slidelog.Limit.ValidateUsage)
			validate = l.ValidateUsage
		}
		switch err := validate(n); {
		case errors.Is(err, slidelog.ErrExceedsLimit):
			fits = false
		case err != nil:
			return false, err
		}
	}
	return fits, nil
}

func (s *Server) decideOne(ctx context.Context, o *one) {
	l := s.opts.Limiter
	switch {
	case o.charge:
		// Usage reported after the fact: recorded in the logs a check of
		// the rule reads (one limit's, or the AllowAll logs), whatever they
		// hold; the Result is the key's state after it.
		o.res, o.err = l.Charge(ctx, o.key, o.n, o.limits...)
	case len(o.limits) == 1 && o.n == 0:
		o.res, o.err = l.Peek(ctx, o.key, o.limits[0])
		o.denied = o.err == nil && !o.res.Allowed
	case len(o.limits) == 1:
		o.res, o.err = l.AllowN(ctx, o.key, o.limits[0], o.n)
		o.denied = o.err == nil && !o.res.Allowed
		o.admitted = o.err == nil && o.res.Allowed
	case o.n == 0:
		o.res, o.err = l.PeekAll(ctx, o.key, 1, o.limits...)
		o.denied = o.err == nil && !o.res.Allowed
	default:
		o.res, o.err = l.AllowAll(ctx, o.key, o.n, o.limits...)
		o.denied = o.err == nil && !o.res.Allowed
		o.admitted = o.err == nil && o.res.Allowed
	}
}

// decideEach decides the request's descriptors as one AllowEach, when they
// can be: each records hits (no hits_addend of 0), none is a shadow or a
// quota_mode rule's (whose denials do not deny the request) or a
// usage_mode rule's (a charge, never denied), no SHADOW_MODE, and no two
// share a key. On a single server (or every key on
// one Cluster slot) the descriptors are decided in one atomic script, with
// nothing to take back. It reports false when it decided nothing.
func (s *Server) decideEach(ctx context.Context, ds []one) (decided bool) {
	if s.opts.ShadowMode || s.opts.QuotaMode {
		return false
	}
	var asks []slidelog.Ask
	var of []*one
	keys := map[string]bool{}
	for i := range ds {
		o := &ds[i]
		if !o.limited || o.local {
			continue
		}
		if o.n == 0 || o.charge || o.m.rule.Shadow || o.m.rule.Quota || keys[o.key] {
			return false
		}
		keys[o.key] = true
		asks = append(asks, slidelog.Ask{Key: o.key, N: o.n, Limits: o.limits})
		of = append(of, o)
	}
	defer func() {
		if p := recover(); p != nil {
			err := s.panicked(p)
			for _, o := range of {
				o.res, o.denied, o.admitted, o.unrecorded, o.err = slidelog.Result{}, false, false, false, err
			}
			decided = true
		}
	}()
	rs, err := s.opts.Limiter.AllowEach(ctx, asks...)
	if errors.Is(err, slidelog.ErrInvalidLimit) {
		return false // (more limits than one call takes: each on its own)
	}
	for i, o := range of {
		if err != nil {
			o.err = err
			continue
		}
		o.res = rs[i]
		switch {
		case rs[i].Allowed:
			o.admitted = true
		case rs[i].Remaining < o.n:
			o.denied = true
		default:
			o.unrecorded = true
			o.res.Remaining -= o.n
		}
	}
	return true
}

func (s *Server) refund(ctx context.Context, res slidelog.Result) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.RefundTimeout)
	defer cancel()
	if err := s.opts.Limiter.Refund(ctx, res.Handle()); err != nil {
		s.metrics.refundError.Add(1)
		s.opts.Logger.Warn("envoyrls: take-back failed: the events stay counted until they leave their window", "err", err)
	}
}

// takeBack refunds the descriptors that admitted events, the request being
// over (or failed): all at once, before the answer.
func (s *Server) takeBack(ctx context.Context, ds []one, resp *rlsv3.RateLimitResponse) {
	var wg sync.WaitGroup
	for i := range ds {
		o := &ds[i]
		if o.unrecorded {
			if st := resp.Statuses[i]; st != nil {
				st.LimitRemaining += uint32(o.n)
			}
			o.unrecorded = false
		}
		if !o.admitted {
			continue
		}
		o.admitted = false
		if st := resp.Statuses[i]; st != nil {
			st.LimitRemaining += uint32(o.n)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					s.metrics.refundError.Add(1)
					_ = s.panicked(p)
				}
			}()
			s.refund(ctx, o.res)
		}()
	}
	wg.Wait()
}

// count adds o's decision to its rule's counters, as envoyproxy/ratelimit
// counts them: over_limit the hits denied, within_limit those admitted,
// near_limit the admitted ones past NearLimitRatio of the limit, shadow_mode
// the denied hits a shadow rule let through; and charged the hits a
// usage_mode rule recorded as usage.
func (s *Server) count(o *one) {
	c := o.c
	n := uint64(o.n)
	if o.denied {
		c.over.Add(n)
		if o.m.rule.Shadow {
			c.shadow.Add(n)
		}
		return
	}
	if o.charge {
		c.charged.Add(n)
		return
	}
	c.within.Add(n)
	lim := o.res.Limit
	if lim.Events == 0 {
		return
	}
	near := uint64(math.Floor(float64(lim.Events) * s.opts.NearLimitRatio))
	after := uint64(max(lim.Events-o.res.Remaining, 0))
	if o.n == 0 {
		return
	}
	before := after - min(after, n)
	if after > near {
		if before >= near {
			c.near.Add(n)
		} else {
			c.near.Add(after - near)
		}
	}
}

// status is o's DescriptorStatus: its limit, what remains, and until when:
// denied, the exact RetryAfter (when the same hits fit); admitted, the
// ResetAfter (when the window holds none of its events). A charge's is the
// key's state after it: while no event fits, the RetryAfter until one does
// (when a check is admitted again), else the ResetAfter.
func (s *Server) status(o *one) *rlsv3.RateLimitResponse_DescriptorStatus {
	i := 0
	if o.local {
		for j, l := range o.limits {
			if l.Events < max(o.n, 1) {
				i = j
				break
			}
		}
	} else {
		for j, l := range o.limits {
			if l == o.res.Limit {
				i = j
			}
		}
	}
	o.shown = i
	cur := &rlsv3.RateLimitResponse_RateLimit{Name: o.names[i], RequestsPerUnit: uint32(o.limits[i].Events), Unit: o.units[i]}
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: cur}
	switch {
	case o.local && o.limits[i].Calendar():
		// Never fits: until the period's end (on this process's clock: Redis
		// was not asked), as for a window.
		st.DurationUntilReset = durationpb.New(untilEnd(o.limits[i], time.Now()))
		st.LimitRemaining = 0
	case o.local:
		// Never fits: the window's length, as a fixed window would say.
		st.DurationUntilReset = durationpb.New(o.limits[i].Window)
		st.LimitRemaining = 0
	case o.denied, o.charge && !o.res.Allowed:
		st.DurationUntilReset = durationpb.New(o.res.RetryAfter)
		st.LimitRemaining = uint32(max(o.res.Remaining, 0))
	default:
		st.DurationUntilReset = durationpb.New(o.res.ResetAfter)
		st.LimitRemaining = uint32(max(o.res.Remaining, 0))
	}
	return st
}

// headers are the response headers Options.Headers asks for.
func (s *Server) headers(ds []one, resp *rlsv3.RateLimitResponse) []*corev3.HeaderValue {
	if s.opts.Headers == 0 {
		return nil
	}
	var hs []*corev3.HeaderValue
	if s.opts.Headers&HeadersDraft11 != 0 {
		var policies, states []string
		for i := range ds {
			o, st := &ds[i], resp.Statuses[i]
			if !o.limited || st == nil || st.CurrentLimit == nil {
				continue
			}
			name := st.CurrentLimit.Name
			if name == "" {
				name = o.m.statsKey
			}
			if ratefields.ValidName(name) != nil {
				name = "descriptor" + strconv.Itoa(i)
			}
			q := ratefields.String(name)
			lim := o.limits[o.shown]
			policies = append(policies, ratefields.Policy(q, lim))
			t := int64(0)
			switch {
			case st.Code == rlsv3.RateLimitResponse_OVER_LIMIT || st.LimitRemaining == 0:
				t = ratefields.Seconds(st.DurationUntilReset.AsDuration(), 0)
			case lim.Calendar():
				// A quota's reset is known exactly: its period's end, as
				// httplimit says it (ratefields.UntilSlot).
				at := o.res.Time()
				if o.res.Degraded() || at.UnixMicro() == 0 {
					at = time.Now()
				}
				t = ratefields.Seconds(untilEnd(lim, at), 0)
			}
			states = append(states, fmt.Sprintf("%s;r=%d;t=%d", q, st.LimitRemaining, t))
		}
		if len(policies) > 0 {
			hs = append(hs,
				&corev3.HeaderValue{Key: "RateLimit-Policy", Value: strings.Join(policies, ", ")},
				&corev3.HeaderValue{Key: "RateLimit", Value: strings.Join(states, ", ")})
		}
	}
	if s.opts.Headers&HeadersLegacy != 0 {
		var closest *rlsv3.RateLimitResponse_DescriptorStatus
		for _, st := range resp.Statuses {
			if st == nil || st.CurrentLimit == nil {
				continue
			}
			if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
				closest = st
				break
			}
			if closest == nil || st.LimitRemaining < closest.LimitRemaining {
				closest = st
			}
		}
		if closest != nil {
			hs = append(hs,
				&corev3.HeaderValue{Key: s.opts.LegacyHeaderNames.Limit, Value: strconv.FormatUint(uint64(closest.CurrentLimit.RequestsPerUnit), 10)},
				&corev3.HeaderValue{Key: s.opts.LegacyHeaderNames.Remaining, Value: strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
				&corev3.HeaderValue{Key: s.opts.LegacyHeaderNames.Reset, Value: strconv.FormatInt(ratefields.Seconds(closest.DurationUntilReset.AsDuration(), 0), 10)})
		}
	}
	return hs
}

// LegacyHeaderNames are the names of HeadersLegacy's headers.
type LegacyHeaderNames struct {
	Limit, Remaining, Reset string
}

// validHeaderName: s is an HTTP header name (a token, RFC 9110).
func validHeaderName(s string) bool { return httpguts.ValidHeaderFieldName(s) }

// untilEnd is the time from at to the end of the calendar quota's period
// that holds at.
func untilEnd(quota slidelog.Limit, at time.Time) time.Duration {
	if _, end, ok := quota.PeriodAt(at); ok {
		return end.Sub(at)
	}
	return 0
}

// errPanic: a panic while a request was decided.
var errPanic = errors.New("envoyrls: panic")

// panicked logs a recovered panic with its stack and returns it as an
// error wrapping errPanic. A Logger that panics too is not asked twice.
func (s *Server) panicked(p any) error {
	err := fmt.Errorf("%w: %v", errPanic, p)
	func() {
		defer func() { _ = recover() }()
		s.opts.Logger.Error("envoyrls: panic while deciding a request", "err", err, "stack", string(debug.Stack()))
	}()
	return err
}

// grpcError is the status of a decision's error: the caller's own end
// (its deadline, its cancellation), a bug (Internal: a panic, the limiter
// refused its input, or a key of another type), else Redis unavailable.
func (s *Server) grpcError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, errPanic):
		s.metrics.serviceError.Add(1)
		return status.Error(codes.Internal, "rate limit service: "+err.Error())
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case ratefields.IsBug(err):
		s.metrics.serviceError.Add(1)
		s.opts.Logger.Error("envoyrls: decision failed", "err", err)
		return status.Error(codes.Internal, err.Error())
	}
	s.metrics.redisFailed(err)
	return status.Error(codes.Unavailable, "rate limit service: redis unavailable: "+err.Error())
}
