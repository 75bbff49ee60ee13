package slidelog

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ScriptSources are the sources of the scripts the library runs, by file
// name, for the tests of package slidelog_test (script_commands_test.go).
var ScriptSources = map[string]string{
	"clock.lua":   clockLua,
	"log.lua":     logLua,
	"compact.lua": compactLua,
	"ids.lua":     idsLua,
	"script.lua":  scriptLua,
	"reset.lua":   resetSrc,
	"refund.lua":  refundLua,
	"renew.lua":   renewLua,
}

// CompactAbove makes every limit over events a compact log's for the rest
// of t (0: every log but an in-flight one is compact; a huge value: none),
// so that the shared tables run on both stores. Below 128, a log also
// becomes compact past events live events, not past a listpack's 128 (the
// script is rebuilt so). Not for parallel tests.
func CompactAbove(t testing.TB, events int) {
	old := compactAbove
	SetCompactAbove(events)
	t.Cleanup(func() { SetCompactAbove(old) })
}

// SetCompactAbove sets the threshold without restoring it: a trace that
// changes it between its steps (instances that disagree about it).
func SetCompactAbove(events int) {
	compactAbove = events
	setConvertPast(min(events, 128))
}

// ConvertPast makes a log the client keeps compactly (a limit over
// compactAbove) compact past events live events for the rest of t, not
// past a listpack's 128: 0, a compact log from its first admission.
func ConvertPast(t testing.TB, events int) {
	setConvertPast(events)
	t.Cleanup(func() { setConvertPast(min(compactAbove, 128)) })
}

func setConvertPast(events int) {
	src := strings.Replace(decideSrc, "local convertPast = 128", fmt.Sprintf("local convertPast = %d", events), 1)
	if src == decideSrc && events != 128 {
		panic("embed.go no longer joins 'local convertPast = 128': update setConvertPast")
	}
	decideScript = redis.NewScript(src)
}
