package slidelog_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/config"
	"github.com/slidelog/slidelog/internal/ids"
)

// The default threshold is the one the shared script joins, and another
// threshold replaces exactly that line (scripts/luaops.lua reads decideSrc
// as it is written in embed.go).
func TestDecideSourceThreshold(t *testing.T) {
	if !strings.HasPrefix(slidelog.ThresholdsLua, fmt.Sprintf("local convertPast = %d ", config.DefaultConvertPast)) {
		t.Fatalf("thresholdsLua %q does not give config.DefaultConvertPast (%d)", slidelog.ThresholdsLua, config.DefaultConvertPast)
	}
	got := slidelog.DecideSource(5, false, 1000)
	if got == slidelog.DecideSrc || !strings.Contains(got, "\nlocal convertPast = 5 ") || strings.Contains(got, slidelog.ThresholdsLua) {
		t.Fatalf("decideSource(5) does not give convertPast 5 in place of the default's line")
	}
	if !strings.Contains(got, "\nlocal maxCount, maxLive, maxSpan = 4503599627370496, 1000, 1024 ") || strings.Contains(got, slidelog.CountLua) {
		t.Fatalf("decideSource(..., 1000) does not give maxLive 1000 in place of the default's line")
	}
	if !strings.HasPrefix(slidelog.CountLua, fmt.Sprintf("local maxCount, maxLive, maxSpan = %d, %d, %d ", config.MaxCount, config.DefaultMaxLive, ids.MaxSpan)) {
		t.Fatalf("countLua %q does not give config.MaxCount and config.DefaultMaxLive", slidelog.CountLua)
	}
	if strings.Contains(slidelog.ScriptSources["script.lua"], "> 128") {
		t.Fatalf("script.lua compares with the literal 128 instead of convertPast")
	}
}

// need.lua holds each shared file once, in its place, and inline refuses a
// name it was not given and a file it did not place.
func TestNeedHoldsTheSharedFiles(t *testing.T) {
	for name, text := range map[string]string{"log.lua": slidelog.ScriptSources["log.lua"], "compact.lua": slidelog.ScriptSources["compact.lua"], "blocklog.lua": slidelog.BlocklogLua, "ids.lua": slidelog.ScriptSources["ids.lua"]} {
		if strings.Count(slidelog.PartsSrc, text) != 1 {
			t.Errorf("partsSrc holds %s %d times, want once", name, strings.Count(slidelog.PartsSrc, text))
		}
	}
	if strings.Contains(slidelog.PartsSrc, "--[[") {
		t.Errorf("partsSrc still names a file to join: %q", slidelog.PartsSrc)
	}
	for _, c := range []struct {
		src   string
		files map[string]string
	}{
		{"--[[a.lua]]\n--[[b.lua]]\n", map[string]string{"a.lua": "a"}},
		{"--[[a.lua]]\n", map[string]string{"a.lua": "a", "b.lua": "b"}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("inline(%q, %v) did not panic", c.src, c.files)
				}
			}()
			slidelog.Inline(c.src, c.files)
		}()
	}
	// a file in its place; a line that only ends like a name (a Lua long
	// string's end), or a long comment of words, is no name
	src := "x\n  --[[a.lua]]\ny = [[b.lua]]\nb.lua]]\n--[[ a comment ]]\n"
	want := "x\nA\ny = [[b.lua]]\nb.lua]]\n--[[ a comment ]]\n"
	if got := slidelog.Inline(src, map[string]string{"a.lua": "A\n"}); got != want {
		t.Errorf("inline = %q, want %q", got, want)
	}
}
