// Package reply reads the one reply format of the decision script
// (script.lua), in one place: a decision's reply ("allowed at" and a
// count, kth and newest per limit: Decode; Admits, for what only needs to
// know whether it admitted), a decision's own error inside a shared
// call's reply (IsFailed, Error), and the script's request for the
// calendar periods of Redis' time (NeedsPeriod).
package reply

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrNotALog: a decision's reply holds a score that is no event time of
// slidelog's (a whole microsecond below 2^53, as a decision records): the
// key is a sorted set another program wrote. Such a reply is a denial's or
// a look's, which wrote nothing.
var ErrNotALog = errors.New("a sorted set that is no log of slidelog's (a score that is no whole microsecond)")

// Decision is a decision's reply under its limits, its fields computed as
// the contract defines a Result's: Which is the index of the limit that
// decided (the one that denied latest or, admitted, the one with the
// fewest Remaining); At is Redis' time of the decision (µs).
type Decision struct {
	Allowed    bool
	At         int64
	Remaining  int
	RetryAfter time.Duration
	ResetAfter time.Duration
	Which      int
}

// Decode reads script.lua's reply v to one decision under limits, "allowed
// at count kth newest" with a count-kth-newest triple per limit (size
// gives a limit's events and its window in µs, 0 for a calendar quota),
// and does the arithmetic on Redis' timestamps here, exactly, in
// integers; for several limits, AllowAll's rules (Remaining the least,
// RetryAfter and ResetAfter the most).
func Decode[L any](v any, limits []L, size func(L) (events int, window int64)) (Decision, error) {
	s, ok := v.(string)
	head := [2]int64{}
	for i := 0; ok && i < len(head); i++ {
		head[i], s, ok = Field(s)
	}
	if !ok || head[0] < 0 || head[0] > 1 {
		return Decision{}, fmt.Errorf("slidelog: script replied %v, want \"allowed at\" and a count, kth and newest per limit", v)
	}
	allowed, at := head[0] == 1, head[1]
	r := Decision{Allowed: allowed, Remaining: math.MaxInt, At: at}
	for i, lim := range limits {
		var f [3]int64
		triple := s
		for j := 0; ok && j < len(f); j++ {
			f[j], s, ok = Field(s)
		}
		if !ok && foreign(triple) {
			return Decision{}, fmt.Errorf("%w (limit %d replied %q)", ErrNotALog, i+1, triple)
		}
		if !ok {
			return Decision{}, fmt.Errorf("slidelog: script replied %v, want a count, kth and newest for each of %d limits", v, len(limits))
		}
		count, kth, newest := f[0], f[1], f[2]
		events, window := size(lim)
		remaining := int(max(int64(events)-count, 0))
		if allowed && remaining < r.Remaining {
			r.Which = i
		}
		r.Remaining = min(r.Remaining, remaining)
		if retry := time.Duration(kth+window-at) * time.Microsecond; !allowed && kth != 0 && retry > r.RetryAfter {
			r.Which, r.RetryAfter = i, retry
		}
		if reset := time.Duration(newest+window-at) * time.Microsecond; newest != 0 && reset > r.ResetAfter { // 0: an empty log
			r.ResetAfter = reset
		}
	}
	if s == "!" { // a charge recorded nowhere (Dropped)
		s = ""
	}
	if s != "" {
		return Decision{}, fmt.Errorf("slidelog: script replied %v, more than %d limits", v, len(limits))
	}
	return r, nil
}

// foreign reports whether triple starts with a count and then two fields
// of which one is a number but no whole microsecond below 2^53 (a
// score another program wrote: 1.5, 1e+300), which Redis printed.
func foreign(triple string) bool {
	f := strings.SplitN(triple, " ", 4)
	if len(f) < 3 {
		return false
	}
	if _, err := strconv.ParseInt(f[0], 10, 64); err != nil {
		return false
	}
	for _, score := range f[1:3] {
		if _, ok := integer(score); ok {
			continue
		}
		if _, err := strconv.ParseFloat(score, 64); err != nil && !errors.Is(err, strconv.ErrRange) {
			return false
		}
		return true
	}
	return false
}

// Dropped reports whether v is the reply of a charge recorded nowhere,
// past the most a log counts (it ends " !"): its Handle refunds nothing.
func Dropped(v any) bool {
	s, ok := v.(string)
	return ok && strings.HasSuffix(s, " !")
}

// Newest is the newest of each limit's triple in v, an admission's reply
// (0 where v is none).
func Newest(v any, limits int) []int64 {
	s, _ := v.(string)
	_, s, _ = Field(s) // allowed
	_, s, _ = Field(s) // at
	newest := make([]int64, limits)
	for i := range newest {
		for j := 0; j < 3; j++ {
			newest[i], s, _ = Field(s)
		}
	}
	return newest
}

// At is the time of the decision v replied (µs), when v is a decision's
// reply.
func At(v any) (int64, bool) {
	s, _ := v.(string)
	if _, rest, ok := Field(s); ok {
		if at, _, ok := Field(rest); ok {
			return at, true
		}
	}
	return 0, false
}

// IsFailed reports whether v, one decision's reply in a shared call, is the
// error of that decision alone (script.lua: "-" and Redis' error text, as
// WRONGTYPE on a key of another type): the call went on for the others.
func IsFailed(v any) bool {
	s, ok := v.(string)
	return ok && s != "" && s[0] == '-'
}

// Error is the error of one decision in a shared call: Redis' error
// reply, as if the decision had been a call of its own (a redis.Error).
type Error string

func (e Error) Error() string { return string(e) }

// RedisError marks it as an error reply of Redis (redis.Error).
func (Error) RedisError() {}

// Field reads the first space-separated integer of s, and the rest.
func Field(s string) (int64, string, bool) {
	if s == "" {
		return 0, "", false
	}
	f, rest, found := strings.Cut(s, " ")
	n, ok := integer(f)
	return n, rest, ok && (!found || rest != "")
}

// integer reads a decimal integer, or a score as a server printed it: Redis
// 7.0 prints every digit (%.17g), others may print the shortest form that
// reads back to the same double ("1.7672688e+15"); a score is an integer
// below 2^53, so the double is exact.
func integer(s string) (int64, bool) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// Admits reports whether v, script.lua's reply to one decision, admits:
// for an AllowEach (a table of its asks' replies), whether every ask is.
func Admits(v any) bool {
	if group, ok := v.([]any); ok {
		for _, a := range group {
			if !Admits(a) {
				return false
			}
		}
		return len(group) > 0
	}
	s, ok := v.(string)
	return ok && strings.HasPrefix(s, "1 ")
}

// NeedsPeriod reads script.lua's answer that Redis' TIME, at (µs), is
// outside every calendar period the call sent: "?" and the time.
func NeedsPeriod(v any) (at int64, ok bool) {
	s, isString := v.(string)
	if !isString || len(s) < 2 || s[0] != '?' {
		return 0, false
	}
	at, err := strconv.ParseInt(s[1:], 10, 64)
	return at, err == nil
}
