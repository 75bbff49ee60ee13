package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// matrixCell is one concurrency and key count of the matrix.
type matrixCell struct{ conc, keys int }

// reportMatrix prints the medians of results as a table, then the targets'
// verdicts where the variants they compare ran.
func reportMatrix(out io.Writer, cfg benchConfig, vs []variant, results map[matrixCell]map[string][]sample) {
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| callers | keys | variant | decisions/s | vs slidelog | p50 | p99 | allocs/call | client CPU µs/call | Redis CPU µs/call | Redis command µs/call | errors |")
	fmt.Fprintln(out, "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	var verdicts []string
	for _, keys := range cfg.keys {
		for _, conc := range cfg.concurrency {
			c := matrixCell{conc, keys}
			med := map[string]float64{}
			for _, v := range vs {
				ss := results[c][v.name]
				pick := func(f func(sample) float64) float64 {
					xs := make([]float64, len(ss))
					for i, s := range ss {
						xs[i] = f(s)
					}
					return median(xs)
				}
				med[v.name] = pick(func(s sample) float64 { return s.perSec })
				med[v.name+".usec"] = pick(func(s sample) float64 { return s.usecPerCall })
				med[v.name+".p99"] = pick(func(s sample) float64 { return float64(s.p99) })
				med[v.name+".p50"] = pick(func(s sample) float64 { return float64(s.p50) })
				errs := 0
				for _, s := range ss {
					errs += s.errors
				}
				ratio := "—"
				if base, ok := med["slidelog"]; ok && base > 0 {
					ratio = fmt.Sprintf("%.2f×", med[v.name]/base)
				}
				fmt.Fprintf(out, "| %d | %d | %s | %.0f | %s | %v | %v | %.1f | %.1f | %.1f | %.2f | %d |\n",
					conc, keys, v.name, med[v.name], ratio,
					time.Duration(pick(func(s sample) float64 { return float64(s.p50) })).Round(time.Microsecond),
					time.Duration(med[v.name+".p99"]).Round(time.Microsecond),
					pick(func(s sample) float64 { return s.allocs }),
					pick(func(s sample) float64 { return s.clientCPU }),
					pick(func(s sample) float64 { return s.redisCPU }),
					med[v.name+".usec"], errs)
			}
			// The targets for New(rdb) with no options, where the variants
			// they compare ran: at 1 caller, at least 0.95x each peer's
			// throughput and a p50 no worse than 1.05x; from 16 callers up,
			// at least 1.3x each peer's throughput.
			sl, ok := med["slidelog"]
			if !ok {
				continue
			}
			for _, peer := range []string{"reference", "redis_rate"} {
				pt, ok := med[peer]
				if !ok {
					continue
				}
				if conc == 1 {
					p50 := med["slidelog.p50"] / med[peer+".p50"]
					verdicts = append(verdicts, fmt.Sprintf("%d caller, %d keys: slidelog/%s throughput %.2f× (target ≥ 0.95: %s), p50 %.2f× (target ≤ 1.05: %s)",
						conc, keys, peer, sl/pt, met(sl/pt >= 0.95), p50, met(p50 <= 1.05)))
				} else if conc >= 16 {
					verdicts = append(verdicts, fmt.Sprintf("%d callers, %d keys: slidelog/%s throughput %.2f× (target ≥ 1.3: %s)",
						conc, keys, peer, sl/pt, met(sl/pt >= 1.3)))
				}
			}
		}
	}
	fmt.Fprintln(out)
	for _, v := range verdicts {
		fmt.Fprintln(out, v)
	}
}

// met words a verdict.
func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
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
