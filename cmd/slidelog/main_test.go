package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestDemoEmbedded(t *testing.T) {
	var out, errs bytes.Buffer
	code := run(context.Background(), []string{"demo", "--instances", "3", "--events", "7",
		"--window", "200ms", "--duration", "1s", "--load", "4"}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errs.String())
	}
	got := out.String()
	if !strings.Contains(got, "ok: the limit held in every window") {
		t.Fatalf("no verdict:\n%s", got)
	}
	m := regexp.MustCompile(`most events in any 200ms window: (\d+) \(limit 7\)`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("no summary:\n%s", got)
	}
	// At 4x load the limit is reached, and never passed.
	if most, _ := strconv.Atoi(m[1]); most != 7 {
		t.Errorf("most events in a window = %d, want exactly 7:\n%s", most, got)
	}
	if lines := strings.Count(got, "\nwindow "); lines < 4 {
		t.Errorf("%d window lines, want about 5:\n%s", lines, got)
	}
}

func TestUsage(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: slidelog COMMAND"},
		{[]string{"help"}, 0, "demo"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"demo", "--events", "0"}, 1, "invalid limit"},
		{[]string{"demo", "--window", "2s", "--duration", "1s"}, 1, "at least one --window"},
		{[]string{"demo", "--redis", "mysql://x"}, 1, "--redis"},
	} {
		var out, errs bytes.Buffer
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		code := run(ctx, c.args, &out, &errs)
		cancel()
		if code != c.code || !strings.Contains(out.String()+errs.String(), c.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d and %q", c.args, code, out.String()+errs.String(), c.code, c.want)
		}
	}
}
