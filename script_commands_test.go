package slidelog_test

import (
	"regexp"
	"testing"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/check"
)

// The commands check.Run verifies (check.Commands) are exactly those the
// scripts call, and the two that run them: a command added to a script is
// a command the check must verify.
func TestCheckVerifiesTheScriptsCommands(t *testing.T) {
	called := map[string]bool{"EVALSHA": true, "EVAL": true} // how go-redis runs every script
	re := regexp.MustCompile(`\b(?:call|read|pcall)\('([A-Z]+)'`)
	for name, src := range slidelog.ScriptSources {
		found := re.FindAllStringSubmatch(src, -1)
		if len(found) == 0 {
			t.Errorf("%s calls no command the pattern finds: the test no longer reads it", name)
		}
		for _, m := range found {
			called[m[1]] = true
		}
	}
	verified := map[string]bool{}
	for _, c := range check.Commands() {
		verified[c] = true
	}
	for cmd := range called {
		if !verified[cmd] {
			t.Errorf("the scripts call %s, which check.Run does not verify (check.Commands)", cmd)
		}
	}
	for cmd := range verified {
		if !called[cmd] {
			t.Errorf("check.Run verifies %s, which no script calls", cmd)
		}
	}
}
