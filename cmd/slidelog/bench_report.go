package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// matrixCell is one concurrency and key count of the matrix.
type matrixCell struct{ conc, keys int }

// maxSpread is the widest spread over rounds (max ÷ min) of a figure that
// may still be compared: past it, a round-to-round difference is as large
// as the differences between variants the bench is there to show, and the
// report warns, and a verdict resting on the figure is inconclusive.
const maxSpread = 1.25

// spread is a figure over rounds.
type spread struct{ med, min, max float64 }

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	return spread{median(xs), slices.Min(xs), slices.Max(xs)}
}

// ratio is max ÷ min: 1 when every round measured the same; +Inf when
// the least was 0 and the most was not.
func (s spread) ratio() float64 {
	switch {
	case s.max == s.min:
		return 1
	case s.min <= 0:
		return math.Inf(1)
	}
	return s.max / s.min
}

// wide reports whether the rounds differ too much to compare (maxSpread).
func (s spread) wide() bool { return s.ratio() > maxSpread }

// format writes the median and, when the rounds differ, their range:
// "41230 (39800–42100)".
func (s spread) format(f func(float64) string) string {
	if s.min == s.max {
		return f(s.med)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.med), f(s.min), f(s.max))
}

// formatRatio writes a ratio's median and range: "0.95× (0.91–1.00)".
func (s spread) formatRatio() string {
	if s.min == s.max {
		return fmtRatio(s.med)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtRatio(s.med), fmtTwo(s.min), fmtTwo(s.max))
}

func fmtCount(x float64) string { return fmt.Sprintf("%.0f", x) }
func fmtOne(x float64) string   { return fmt.Sprintf("%.1f", x) }
func fmtTwo(x float64) string   { return fmt.Sprintf("%.2f", x) }
func fmtRatio(x float64) string { return fmt.Sprintf("%.2f×", x) }
func fmtDuration(x float64) string {
	return time.Duration(x).Round(time.Microsecond).String()
}

// figures picks f of every sample.
func figures(ss []sample, f func(sample) float64) spread {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	return spreadOf(xs)
}

func perSec(s sample) float64 { return s.perSec }
func p50(s sample) float64    { return float64(s.p50) }

// peers are the variants the targets compare slidelog with, and what each is.
var peers = []struct{ name, what string }{
	{"reference", "a plain sorted-set script"},
	{"redis_rate", "go-redis/redis_rate, GCRA"},
}

// sameConfig are pairs of variants that are one configuration under two
// names: their difference is the machine's noise.
var sameConfig = [][2]string{{"slidelog", "batched"}}

// callers is "1 caller", "16 callers"; keys "1 key", "10000 keys".
func callers(n int) string { return plural(n, "caller") }
func keyCount(n int) string {
	return plural(n, "key")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// reportMatrix prints results as a table of medians with their range over
// rounds, warnings where rounds differ too much to compare (maxSpread) and
// where two names of one configuration differ as much, then the targets'
// verdicts where the variants they compare ran, each saying what it
// compares.
func reportMatrix(out io.Writer, cfg benchConfig, vs []variant, results map[matrixCell]map[string][]sample) {
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Each figure: the median over %s, and (min–max) when the rounds differ.\n\n", plural(cfg.rounds, "round"))
	fmt.Fprintln(out, "| callers | keys | variant | decisions/s | vs slidelog | p50 | p99 | allocs/call | client CPU µs/call | Redis CPU µs/call | Redis command µs/call | errors |")
	fmt.Fprintln(out, "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	var warnings, verdicts []string
	for _, keys := range cfg.keys {
		for _, conc := range cfg.concurrency {
			c := matrixCell{conc, keys}
			where := callers(conc) + ", " + keyCount(keys)
			for _, v := range vs {
				ss := results[c][v.name]
				errs := 0
				for _, s := range ss {
					errs += s.errors
				}
				ratio := "—"
				if base, ok := results[c]["slidelog"]; ok && v.name != "slidelog" {
					if r, ok := pairedRatios(ss, base, perSec); ok {
						ratio = r.formatRatio()
					}
				}
				fmt.Fprintf(out, "| %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
					conc, keys, v.name, figures(ss, perSec).format(fmtCount), ratio,
					figures(ss, p50).format(fmtDuration),
					figures(ss, func(s sample) float64 { return float64(s.p99) }).format(fmtDuration),
					figures(ss, func(s sample) float64 { return s.allocs }).format(fmtOne),
					figures(ss, func(s sample) float64 { return s.clientCPU }).format(fmtOne),
					figures(ss, func(s sample) float64 { return s.redisCPU }).format(fmtOne),
					figures(ss, func(s sample) float64 { return s.usecPerCall }).format(fmtTwo), errs)
				for _, f := range []struct {
					name string
					pick func(sample) float64
					fmt  func(float64) string
				}{{"decisions/s", perSec, fmtCount}, {"p50", p50, fmtDuration}} {
					if s := figures(ss, f.pick); s.wide() {
						warnings = append(warnings, fmt.Sprintf("warning: %s, %s: %s ranged %s–%s over %s (%.2f×, more than %.2f×): too noisy to compare",
							where, v.name, f.name, f.fmt(s.min), f.fmt(s.max), plural(len(ss), "round"), s.ratio(), maxSpread))
					}
				}
			}
			for _, pair := range sameConfig {
				a, aok := results[c][pair[0]]
				b, bok := results[c][pair[1]]
				if !aok || !bok {
					continue
				}
				if round, r := widestPair(a, b, perSec); r > maxSpread {
					warnings = append(warnings, fmt.Sprintf("warning: %s: %s and %s are one configuration, yet their decisions/s differed %.2f× in round %d: differences between variants up to that size are this machine's noise",
						where, pair[0], pair[1], r, round+1))
				}
			}
			verdicts = append(verdicts, cellVerdicts(results[c], conc, keys)...)
		}
	}
	fmt.Fprintln(out)
	if len(warnings) > 0 {
		for _, w := range warnings {
			fmt.Fprintln(out, w)
		}
		fmt.Fprintln(out, "(run again on a quieter machine, or with more --rounds or a longer --duration)")
		fmt.Fprintln(out)
	}
	if len(verdicts) > 0 {
		fmt.Fprintln(out, "Verdicts: slidelog with New(rdb)'s defaults against each peer that ran, as the median over rounds of the ratio within each round (min–max); the targets are docs/performance.md's: at 1 caller at least 0.95× the peer's decisions/s and at most 1.05× its p50 latency, from 16 callers up at least 1.3× its decisions/s. A verdict is inconclusive when a figure it divides is too noisy, or when its rounds fall on both sides of the target.")
		for _, v := range verdicts {
			fmt.Fprintln(out, v)
		}
	}
}

// cellVerdicts are the targets' verdicts at one concurrency and key count:
// none where slidelog or a peer did not run.
func cellVerdicts(cell map[string][]sample, conc, keys int) []string {
	sl, ok := cell["slidelog"]
	if !ok {
		return nil
	}
	var vs []string
	for _, peer := range peers {
		ps, ok := cell[peer.name]
		if !ok {
			continue
		}
		what := fmt.Sprintf("%s, %s: %%s, slidelog ÷ %s (%s)", callers(conc), keyCount(keys), peer.name, peer.what)
		switch {
		case conc == 1:
			vs = append(vs, verdict(fmt.Sprintf(what, "decisions/s"), sl, ps, perSec, 0.95, true),
				verdict(fmt.Sprintf(what, "p50 latency"), sl, ps, p50, 1.05, false))
		case conc >= 16:
			vs = append(vs, verdict(fmt.Sprintf(what, "decisions/s"), sl, ps, perSec, 1.3, true))
		}
	}
	return vs
}

// verdict words one target: what it compares, the ratio of a's figure to
// b's over rounds, the target (at least it when atLeast, else at most),
// and whether it is met.
func verdict(what string, a, b []sample, pick func(sample) float64, target float64, atLeast bool) string {
	r, ok := pairedRatios(a, b, pick)
	if !ok {
		return fmt.Sprintf("%s: no figure to divide (a round measured 0)", what)
	}
	cmp, met := "≤", r.med <= target
	if atLeast {
		cmp, met = "≥", r.med >= target
	}
	word := "not met"
	switch fa, fb := figures(a, pick), figures(b, pick); {
	case fa.wide() || fb.wide():
		word = fmt.Sprintf("inconclusive: the rounds differ too much (spread %.2f× and %.2f×, more than %.2f×)", fa.ratio(), fb.ratio(), maxSpread)
	case r.min < target && r.max > target:
		word = "inconclusive: its rounds fall on both sides of the target"
	case met:
		word = "met"
	}
	return fmt.Sprintf("%s: %s; target %s %.2f×: %s", what, r.formatRatio(), cmp, target, word)
}

// pairedRatios is a's figure over b's within each round, over the rounds
// both ran; false when there is none, or a divisor is 0.
func pairedRatios(a, b []sample, pick func(sample) float64) (spread, bool) {
	n := min(len(a), len(b))
	if n == 0 {
		return spread{}, false
	}
	xs := make([]float64, n)
	for i := range n {
		d := pick(b[i])
		if d == 0 {
			return spread{}, false
		}
		xs[i] = pick(a[i]) / d
	}
	return spreadOf(xs), true
}

// widestPair is the round where a's and b's figures differ most, and by
// how much (the larger over the smaller; +Inf when one is 0).
func widestPair(a, b []sample, pick func(sample) float64) (round int, ratio float64) {
	ratio = 1
	for i := range min(len(a), len(b)) {
		x, y := pick(a[i]), pick(b[i])
		r := spread{min: math.Min(x, y), max: math.Max(x, y)}.ratio()
		if r > ratio {
			round, ratio = i, r
		}
	}
	return round, ratio
}

// median is the middle of xs (the mean of the two middle ones for an even count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// largeRow is one row of benchLarge's table: each figure's median and
// range over the rounds.
func largeRow(events int, path string, ss []sample) string {
	return "| " + strings.Join([]string{fmt.Sprint(events), path,
		figures(ss, perSec).format(fmtCount),
		figures(ss, p50).format(fmtDuration),
		figures(ss, func(s sample) float64 { return float64(s.p99) }).format(fmtDuration),
		figures(ss, func(s sample) float64 { return s.redisCPU }).format(fmtOne),
		figures(ss, func(s sample) float64 { return s.usecPerCall }).format(fmtTwo)}, " | ") + " |"
}
