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
			// The targets, where the variants they compare ran.
			sl, ok := med["slidelog"]
			if !ok {
				continue
			}
			if ref, ok := med["reference"]; ok {
				verdicts = append(verdicts, fmt.Sprintf("%d callers, %d keys: slidelog/reference throughput %.2f× (target ≥ 0.95), Redis command µs per decision %.2f vs %.2f",
					conc, keys, sl/ref, med["slidelog.usec"], med["reference.usec"]))
			}
			if rr, ok := med["redis_rate"]; ok {
				verdicts = append(verdicts, fmt.Sprintf("%d callers, %d keys: slidelog/redis_rate throughput %.2f× (target ≥ 1.0)", conc, keys, sl/rr))
			}
			if p, ok := med["ping"]; ok && conc == 1 {
				verdicts = append(verdicts, fmt.Sprintf("%d caller, %d keys: slidelog/PING throughput %.2f× (target ≥ 0.75)", conc, keys, sl/p))
			}
			if b, ok := med["batched"]; ok && conc >= 64 {
				verdicts = append(verdicts, fmt.Sprintf("%d callers, %d keys: batched/slidelog throughput %.2f× (target ≥ 2), p99 %.2f× (target ≤ 2)",
					conc, keys, b/sl, med["batched.p99"]/med["slidelog.p99"]))
			}
		}
	}
	fmt.Fprintln(out)
	for _, v := range verdicts {
		fmt.Fprintln(out, v)
	}
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
