package slidelog

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

// The package's test helpers (servers_test.go), for its external tests.
var (
	RealRedis = realRedis
	UniqueKey = uniqueKey
	NewClient = newClient
	LogLen    = logLen
	// a step of a model trace, and whether a Result is the model's
	RunStep      = runStep
	SameDecision = sameDecision
)

// Unavailable reports whether err is an error of a Redis that cannot
// decide (the errors a Policy answers).
var Unavailable = unavailable
