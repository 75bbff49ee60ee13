package slidelog

import (
	"fmt"
	"strings"
	"testing"

	"github.com/slidelog/slidelog/internal/config"
)

// The default threshold is the one the shared script joins, and another
// threshold replaces exactly that line (scripts/luaops.lua reads decideSrc
// as it is written in embed.go).
func TestDecideSourceThreshold(t *testing.T) {
	if !strings.HasPrefix(thresholdsLua, fmt.Sprintf("local convertPast = %d ", config.DefaultConvertPast)) {
		t.Fatalf("thresholdsLua %q does not give config.DefaultConvertPast (%d)", thresholdsLua, config.DefaultConvertPast)
	}
	got := decideSource(5)
	if got == decideSrc || !strings.Contains(got, "\nlocal convertPast = 5 ") || strings.Contains(got, thresholdsLua) {
		t.Fatalf("decideSource(5) does not give convertPast 5 in place of the default's line")
	}
	if strings.Contains(scriptLua, "> 128") {
		t.Fatalf("script.lua compares with the literal 128 instead of convertPast")
	}
}
