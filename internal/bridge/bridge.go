// Package bridge lets slidelog/local keep its own admissions in a
// slidelog.Handle, whose fields are the root package's: the root package
// sets these at init, with its own types (this package cannot name them).
package bridge

var (
	// Attach is a func(r slidelog.Result, a any) slidelog.Result: r, whose
	// Handle names the admission a (a pointer of slidelog/local's).
	Attach any
	// Attached is a func(h slidelog.Handle) any: the admission Attach put
	// in h, or nil.
	Attached any
)
