package httplimit

import "time"

// Timer is what a request's renewals are planned with.
type Timer = timer

// SetAfterFunc makes the renewals use f instead of time.AfterFunc, until
// restore is called: a test then renews when it likes.
func SetAfterFunc(f func(d time.Duration, fn func()) Timer) (restore func()) {
	old := afterFunc
	afterFunc = f
	return func() { afterFunc = old }
}

// SetLogNow makes the default OnError's rate of lines read f instead of
// time.Now, until restore is called.
func SetLogNow(f func() time.Time) (restore func()) {
	old := logNow
	logNow = f
	return func() { logNow = old }
}
