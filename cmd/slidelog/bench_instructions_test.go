//go:build measure

// Needs valgrind: run with go test -tags measure (scripts/test.sh does).

package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/slidelog/slidelog/internal/redistest"
)

// bench --instructions on a redis-server under callgrind: every variant gets
// a count, and one PING costs Redis fewer instructions than one decision.
func TestBenchInstructions(t *testing.T) {
	redistest.Skip(t)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"bench", "--instructions", "--calls", "400",
		"--concurrency", "4", "--keys", "1", "--variants", "ping,slidelog"}, &out, &errOut)
	got := out.String()
	if code != 0 {
		t.Fatalf("exit %d (valgrind is installed by scripts/test.sh):\n%s%s", code, got, errOut.String())
	}
	per := map[string]float64{}
	for _, line := range strings.Split(got, "\n") {
		f := strings.Split(line, "|")
		if len(f) == 6 && strings.TrimSpace(f[1]) == "1" {
			per[strings.TrimSpace(f[2])], _ = strconv.ParseFloat(strings.TrimSpace(f[3]), 64)
		}
	}
	if per["ping"] <= 0 || per["slidelog"] <= per["ping"] {
		t.Errorf("instructions per decision %v, want ping > 0 and slidelog > ping, from:\n%s", per, got)
	}
}
