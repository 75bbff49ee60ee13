package slidelog

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The one reply format of script.lua, read in one place: a decision's
// reply (decode; replyAdmits, for what only needs to know whether it
// admitted), and a decision's own error inside a shared call's reply.

// decode reads script.lua's reply to one decision under limits, "allowed
// at count kth newest" with a count-kth-newest triple per limit, and does
// the arithmetic on Redis' timestamps here, exactly, in integers: the
// Result's fields as the contract defines them, and for several limits,
// AllowAll's rules (Limit: the one that denied latest, or the one with the
// fewest Remaining; Remaining the least, RetryAfter and ResetAfter the
// most).
func decode(v any, limits []Limit) (Result, error) {
	if at, ok := needsPeriod(v); ok {
		return Result{}, fmt.Errorf("slidelog: Redis' time %v is still outside the calendar periods sent after %d tries", time.UnixMicro(at).UTC(), maxPeriodTries)
	}
	s, ok := v.(string)
	head := [2]int64{}
	for i := 0; ok && i < len(head); i++ {
		head[i], s, ok = field(s)
	}
	if !ok || head[0] < 0 || head[0] > 1 {
		return Result{}, fmt.Errorf("slidelog: script replied %v, want \"allowed at\" and a count, kth and newest per limit", v)
	}
	allowed, at := head[0] == 1, head[1]
	r := Result{Allowed: allowed, Remaining: math.MaxInt, at: at}
	which := 0
	for i, lim := range limits {
		var f [3]int64
		for j := 0; ok && j < len(f); j++ {
			f[j], s, ok = field(s)
		}
		if !ok {
			return Result{}, fmt.Errorf("slidelog: script replied %v, want a count, kth and newest for each of %d limits", v, len(limits))
		}
		count, kth, newest := f[0], f[1], f[2]
		window := lim.micros()
		remaining := int(max(int64(lim.Events)-count, 0))
		if allowed && remaining < r.Remaining {
			which = i
		}
		r.Remaining = min(r.Remaining, remaining)
		if retry := time.Duration(kth+window-at) * time.Microsecond; !allowed && kth != 0 && retry > r.RetryAfter {
			which, r.RetryAfter = i, retry
		}
		if reset := time.Duration(newest+window-at) * time.Microsecond; newest != 0 && reset > r.ResetAfter { // 0: an empty log
			r.ResetAfter = reset
		}
	}
	if s != "" {
		return Result{}, fmt.Errorf("slidelog: script replied %v, more than %d limits", v, len(limits))
	}
	r.Limit = limits[which]
	return r, nil
}

// isFailed reports whether v, one decision's reply in a shared call, is the
// error of that decision alone (script.lua: "-" and Redis' error text, as
// WRONGTYPE on a key of another type): the call went on for the others.
func isFailed(v any) bool {
	s, ok := v.(string)
	return ok && s != "" && s[0] == '-'
}

// replyError is the error of one decision in a shared call: Redis' error
// reply, as if the decision had been a call of its own (a redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks it as an error reply of Redis (redis.Error).
func (replyError) RedisError() {}

// field reads the first space-separated integer of s, and the rest.
func field(s string) (int64, string, bool) {
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

// replyAdmits reports whether v, script.lua's reply to one decision, admits.
func replyAdmits(v any) bool {
	s, ok := v.(string)
	return ok && strings.HasPrefix(s, "1 ")
}

// needsPeriod reads script.lua's answer that Redis' TIME, at (µs), is
// outside every calendar period the call sent: "?" and the time.
func needsPeriod(v any) (at int64, ok bool) {
	s, isString := v.(string)
	if !isString || len(s) < 2 || s[0] != '?' {
		return 0, false
	}
	at, err := strconv.ParseInt(s[1:], 10, 64)
	return at, err == nil
}

// setEnds names, in h, the end of the period each calendar quota among
// limits counted its admission in: the newest of the quota's triple in v
// (an admission's reply: script.lua).
func (h *Handle) setEnds(v any, limits []Limit) {
	if h.quotas == nil {
		return
	}
	s, _ := v.(string)
	_, s, _ = field(s) // allowed
	_, s, _ = field(s) // at
	q := 0
	for _, lim := range limits {
		var newest int64
		for j := 0; j < 3; j++ {
			newest, s, _ = field(s)
		}
		if lim.Calendar() && q < len(*h.quotas) {
			(*h.quotas)[q].end = newest
			q++
		}
	}
}

// timedBy is h with the time its events were recorded at, read from v, its
// admission's reply (when v is one): a compact log keeps no ids, and a
// refund takes back events of that time.
func (h Handle) timedBy(v any) Handle {
	s, _ := v.(string)
	if _, rest, ok := field(s); ok {
		if at, _, ok := field(rest); ok {
			h.at = at
		}
	}
	return h
}
