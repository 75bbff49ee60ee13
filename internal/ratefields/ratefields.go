// Package ratefields is what httplimit and contrib/grpclimit send and how
// they read the limiter's errors, written once: the IETF rate-limit fields
// of draft-ietf-httpapi-ratelimit-headers-11 (RateLimit-Policy and
// RateLimit, in HTTP headers or gRPC metadata alike), and which errors are
// a bug rather than an outage.
package ratefields

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/slidelog/slidelog"
)

// Policy is RateLimit-Policy's value; name is the policy's name as an
// RFC 8941 string (String). A calendar quota's window (w) is the length of
// its period now (this process's clock: 86 400 for a day, 82 800 on a day
// that loses an hour), a sliding limit's its Window.
func Policy(name string, limit slidelog.Limit) string {
	return fmt.Sprintf("%s;q=%d;w=%d", name, limit.Events, Seconds(window(limit, time.Now()), 1))
}

// window is limit's window at t: its Window, or its period's length.
func window(limit slidelog.Limit, t time.Time) time.Duration {
	if start, end, ok := limit.PeriodAt(t); ok {
		return end.Sub(start)
	}
	return limit.Window
}

// State is RateLimit's value for res; name as for Policy.
func State(name string, res slidelog.Result) string {
	return fmt.Sprintf("%s;r=%d;t=%d", name, res.Remaining, UntilSlot(res))
}

// UntilSlot is RateLimit's t: seconds until a request fits again. Denied:
// RetryAfter, rounded up. Allowed with room left: 0, but for a calendar
// quota, whose reset is known exactly: its period's end (ResetAfter).
// Allowed with no room left: the instant the oldest event leaves is not
// known without another read, so t is the window's reset (ResetAfter), an
// upper bound.
func UntilSlot(res slidelog.Result) int64 {
	switch {
	case !res.Allowed:
		return Seconds(res.RetryAfter, 1)
	case res.Remaining > 0 && !res.Limit.Calendar():
		return 0
	}
	return Seconds(res.ResetAfter, 0)
}

// Seconds rounds d up to whole seconds, and to at least least.
func Seconds(d time.Duration, least int64) int64 {
	return max(int64(math.Ceil(d.Seconds())), least)
}

// ValidName reports whether name can be a policy's name: printable ASCII,
// which an RFC 8941 string holds.
func ValidName(name string) error {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("byte %#02x at %d is not printable ASCII (0x20 to 0x7E), which RFC 8941 strings are made of", c, i)
		}
	}
	return nil
}

// String is s as an RFC 8941 string: quoted, with '"' and '\' escaped
// (and nothing else: ValidName refused every other byte).
func String(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// IsBug reports an error no retry and no recovery of Redis cures, which
// the middleware answers as its own failure (500, codes.Internal), never as
// an outage: the limiter refused its input (the limit and cost were checked
// before, so it and the configuration disagree, e.g. WithMaxEvents), or the
// key's Redis value is of another type (a key clash with another program).
func IsBug(err error) bool {
	for _, e := range []error{slidelog.ErrInvalidLimit, slidelog.ErrInvalidN, slidelog.ErrEmptyKey,
		slidelog.ErrLimitTooLarge, slidelog.ErrWrongType} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
