// Package resulttime lets slidelog/local set the unexported decision time of
// a slidelog.Result without widening slidelog's public API and without an
// allocation: slidelog records the field's offset here when it initializes.
package resulttime

import "unsafe"

// Offset is the offset of Result.at (int64 microseconds) in slidelog.Result.
var Offset uintptr

// Set stores at into the Result that r points to.
func Set(r unsafe.Pointer, at int64) {
	*(*int64)(unsafe.Add(r, Offset)) = at
}
