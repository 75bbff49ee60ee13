package httplimit

import "time"

// SetNow makes the renewals read f instead of time.Now, until restore is
// called: with SetAfterFunc, a test renews on a clock of its own.
func SetNow(f func() time.Time) (restore func()) {
	old := now
	now = f
	return func() { now = old }
}
