package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// samples are rounds of one variant, decisions/s and p50 (µs) given.
func samples(perSec []float64, p50us ...float64) []sample {
	ss := make([]sample, len(perSec))
	for i, x := range perSec {
		ss[i] = sample{perSec: x, p50: 100 * time.Microsecond, p99: time.Millisecond, allocs: 10, usecPerCall: 5}
		if i < len(p50us) {
			ss[i].p50 = time.Duration(p50us[i] * float64(time.Microsecond))
		}
	}
	return ss
}

func report(cfg benchConfig, names []string, results map[matrixCell]map[string][]sample) string {
	var vs []variant
	for _, n := range names {
		vs = append(vs, variant{name: n})
	}
	var out bytes.Buffer
	reportMatrix(&out, cfg, vs, results)
	return out.String()
}

// Every figure is the median with its range over rounds; a verdict says
// what it divides by what, at which concurrency and key count, the
// target, and whether it is met.
func TestReportSpreadsAndVerdicts(t *testing.T) {
	cfg := benchConfig{rounds: 3, concurrency: []int{1, 16}, keys: []int{10000}}
	results := map[matrixCell]map[string][]sample{
		{1, 10000}: {
			"slidelog":  samples([]float64{1000, 1050, 1100}, 100, 100, 100),
			"reference": samples([]float64{1000, 1000, 1000}, 90, 90, 90),
		},
		{16, 10000}: {
			"slidelog":  samples([]float64{7300, 7400, 7500}),
			"reference": samples([]float64{10000, 10000, 10000}),
		},
	}
	got := report(cfg, []string{"slidelog", "reference"}, results)
	for _, want := range []string{
		"Each figure: the median over 3 rounds, and (min–max) when the rounds differ.",
		"| 1 | 10000 | slidelog | 1050 (1000–1100) | — | 100µs |",
		"| 1 | 10000 | reference | 1000 | 0.95× (0.91–1.00) | 90µs |",
		"| 16 | 10000 | slidelog | 7400 (7300–7500) |",
		"Verdicts: slidelog with New(rdb)'s defaults against each peer",
		"1 caller, 10000 keys: decisions/s, slidelog ÷ reference (a plain sorted-set script): 1.05× (1.00–1.10); target ≥ 0.95×: met",
		"1 caller, 10000 keys: p50 latency, slidelog ÷ reference (a plain sorted-set script): 1.11×; target ≤ 1.05×: not met",
		"16 callers, 10000 keys: decisions/s, slidelog ÷ reference (a plain sorted-set script): 0.74× (0.73–0.75); target ≥ 1.30×: not met",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "warning") || strings.Contains(got, "redis_rate") {
		t.Errorf("a warning, or a verdict on a peer that did not run:\n%s", got)
	}
}

// Rounds that differ more than maxSpread are a warning naming the figure
// and its range, and the verdicts resting on them are inconclusive; two
// names of one configuration that differ as much in a round are a warning
// too; and so is a ratio whose rounds fall on both sides of the target.
func TestReportWarnsOfNoise(t *testing.T) {
	cfg := benchConfig{rounds: 3, concurrency: []int{16, 64}, keys: []int{1}}
	results := map[matrixCell]map[string][]sample{
		{16, 1}: {
			"slidelog":   samples([]float64{10000, 22800, 20000}),
			"batched":    samples([]float64{20000, 10000, 20000}),
			"redis_rate": samples([]float64{10000, 10000, 10000}),
		},
		{64, 1}: {
			"slidelog":   samples([]float64{12000, 14000, 12500}),
			"batched":    samples([]float64{12000, 12500, 12500}),
			"redis_rate": samples([]float64{10000, 10000, 10000}),
		},
	}
	got := report(cfg, []string{"slidelog", "batched", "redis_rate"}, results)
	for _, want := range []string{
		"warning: 16 callers, 1 key, slidelog: decisions/s ranged 10000–22800 over 3 rounds (2.28×, more than 1.25×): too noisy to compare",
		"warning: 16 callers, 1 key, batched: decisions/s ranged 10000–20000 over 3 rounds (2.00×, more than 1.25×)",
		"warning: 16 callers, 1 key: slidelog and batched are one configuration, yet their decisions/s differed 2.28× in round 2",
		"(run again on a quieter machine, or with more --rounds or a longer --duration)",
		"16 callers, 1 key: decisions/s, slidelog ÷ redis_rate (go-redis/redis_rate, GCRA): 2.00× (1.00–2.28); target ≥ 1.30×: inconclusive: the rounds differ too much (spread 2.28× and 1.00×, more than 1.25×)",
		"64 callers, 1 key: decisions/s, slidelog ÷ redis_rate (go-redis/redis_rate, GCRA): 1.25× (1.20–1.40); target ≥ 1.30×: inconclusive: its rounds fall on both sides of the target",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "warning: 64 callers"); n != 0 {
		t.Errorf("%d warnings at 64 callers, whose rounds are within 1.25×:\n%s", n, got)
	}
}

// The spread's arithmetic: one round, equal rounds, a round of 0.
func TestSpread(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want string
		wide bool
	}{
		{[]float64{5}, "5", false},
		{[]float64{5, 5, 5}, "5", false},
		{[]float64{4, 5, 5}, "5 (4–5)", false},
		{[]float64{4, 5, 6}, "5 (4–6)", true},
		{[]float64{0, 5, 6}, "5 (0–6)", true},
		{[]float64{3, 1}, "2 (1–3)", true},
	} {
		s := spreadOf(c.xs)
		if got := s.format(fmtCount); got != c.want || s.wide() != c.wide {
			t.Errorf("%v: %q wide %v, want %q wide %v", c.xs, got, s.wide(), c.want, c.wide)
		}
	}
	if got := largeRow(10, "denied", samples([]float64{100, 200})); got != "| 10 | denied | 150 (100–200) | 100µs | 1ms | 0.0 | 5.00 |" {
		t.Errorf("largeRow: %q", got)
	}
}
