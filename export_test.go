package slidelog

import "testing"

// ScriptSources are the sources of the scripts the library runs, by file
// name, for the tests of package slidelog_test (script_commands_test.go).
var ScriptSources = map[string]string{
	"clock.lua":   clockLua,
	"compact.lua": compactLua,
	"script.lua":  scriptLua,
	"reset.lua":   resetSrc,
	"refund.lua":  refundLua,
	"renew.lua":   renewLua,
}

// CompactAbove makes every limit over events a compact log's for the rest
// of t (0: every log but an in-flight one is compact; a huge value: none),
// so that the shared tables run on both stores. Not for parallel tests.
func CompactAbove(t testing.TB, events int) {
	old := compactAbove
	compactAbove = events
	t.Cleanup(func() { compactAbove = old })
}

// SetCompactAbove sets the threshold without restoring it: a trace that
// changes it between its steps (instances that disagree about it).
func SetCompactAbove(events int) { compactAbove = events }
