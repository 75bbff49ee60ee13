package grpclimit

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/slidelog/slidelog"
)

// The fields are formatted by httplimit's rules, to the byte: policy,
// state, untilSlot, seconds, validName and sfString are its unexported
// helpers of the same names, and change with them.

// The response header metadata keys of the rate-limit fields (gRPC
// metadata keys are lowercase): draft-ietf-httpapi-ratelimit-headers-11's
// RateLimit-Policy and RateLimit.
const (
	policyField = "ratelimit-policy"
	stateField  = "ratelimit"
)

// policy is ratelimit-policy's value; name is Options.Name as a string
// field.
func policy(name string, limit slidelog.Limit) string {
	return fmt.Sprintf("%s;q=%d;w=%d", name, limit.Events, seconds(limit.Window, 1))
}

// state is ratelimit's value for res.
func state(name string, res slidelog.Result) string {
	return fmt.Sprintf("%s;r=%d;t=%d", name, res.Remaining, untilSlot(res))
}

// untilSlot is ratelimit's t: seconds until a call fits again. Denied:
// RetryAfter, rounded up. Allowed with room left: 0. Allowed with no room
// left: the instant the oldest event leaves is not known without another
// read, so t is the window's reset (ResetAfter), an upper bound.
func untilSlot(res slidelog.Result) int64 {
	switch {
	case !res.Allowed:
		return seconds(res.RetryAfter, 1)
	case res.Remaining > 0:
		return 0
	}
	return seconds(res.ResetAfter, 0)
}

// seconds rounds d up to whole seconds, and to at least least.
func seconds(d time.Duration, least int64) int64 {
	return max(int64(math.Ceil(d.Seconds())), least)
}

// validName: printable ASCII, which an RFC 8941 string holds.
func validName(name string) error {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("byte %#02x at %d is not printable ASCII (0x20 to 0x7E), which RFC 8941 strings are made of", c, i)
		}
	}
	return nil
}

// sfString is s as an RFC 8941 string: quoted, with '"' and '\' escaped
// (and nothing else: validName refused every other byte).
func sfString(s string) string {
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
