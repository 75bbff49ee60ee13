package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"testing"

	"github.com/slidelog/slidelog/internal/redistest"
)

// The replicas variant: bench starts a replica of its server, and every
// admission of the variant is acknowledged by it (no errors), side by side
// with the plain limiter; --instructions refuses the variant (its server
// has no replica).
func TestBenchReplicas(t *testing.T) {
	redistest.Skip(t)
	var out bytes.Buffer
	code := run(context.Background(), []string{"bench", "--rounds", "1", "--duration", "200ms",
		"--concurrency", "4", "--keys", "1000", "--variants", "slidelog,replicas"}, &out, io.Discard)
	got := out.String()
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, got)
	}
	for _, variant := range []string{"slidelog", "replicas"} {
		row := regexp.MustCompile(`\| 4 \| 1000 \| ` + variant + ` \|.* \| 0 \|\n`)
		if !row.MatchString(got) {
			t.Errorf("no row of %s with 0 errors in:\n%s", variant, got)
		}
	}
	if code := run(context.Background(), []string{"bench", "--instructions", "--variants", "replicas"}, io.Discard, io.Discard); code != 2 {
		t.Errorf("--instructions with the replicas variant: exit %d, want 2", code)
	}
}
