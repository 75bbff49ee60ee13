package slidelog

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slidelog/slidelog/internal/keylayout"
)

// Where a key's logs live in Redis.
//
// The single-limit log of key is K = prefix+key (Allow, AllowN, Peek). The
// AllowAll logs of key, one per window, and their index (the windows in
// use, so that Reset finds them) sit beside it under one hash tag that
// hashes, in Redis Cluster and in a go-redis Ring alike, as K does:
//
//	K without a hash tag or '}'   prefix + "{" + K + "}:" + window     ("slidelog:{slidelog:acct}:60000000")
//	K with a hash tag t           prefix + "{" + t + "}" + key + ":" + window
//	K with a '}' and no hash tag  prefix + "{" + c + "}" + key + ":" + window
//
// with the index at the same start followed by "windows" instead of a
// window in µs, and c a short string of letters and digits chosen to hash
// to the Cluster slot of K. So every log of a key sits on one Cluster slot
// (and on one Ring shard, but for keys of the third kind), whatever bytes
// the key holds ("}x", "{}", "a{b}c"): AllowAll's script reaches all its
// logs, and Reset removes them all in one atomic script. The start, the
// index and the slot are computed in internal/keylayout, which the CLI's
// inspect command uses too.

// checkPrefix reports why a prefix cannot keep a key's logs on one Cluster
// slot: a '{' that does not open a hash tag ("svc{}:", "svc{:") makes
// Redis hash each whole key, so the logs of one key would scatter.
func checkPrefix(prefix string) error {
	if _, ok := keylayout.HashTag(prefix); strings.Contains(prefix, "{") && !ok {
		return fmt.Errorf("slidelog: WithPrefix(%q): a '{' in a prefix must open a non-empty hash tag (like \"{rl}:\"), or the logs of one key land on different Cluster slots", prefix)
	}
	return nil
}

// allKeys is where AllowAll keeps key's logs: the common start of the
// per-window keys (their window follows) and the index.
func (l *Limiter) allKeys(key string) (base, index string) {
	base = keylayout.Start(l.prefix, key)
	return base, keylayout.Index(base)
}

// windowKey is the AllowAll log of one window.
func windowKey(base string, window time.Duration) string {
	return base + strconv.FormatInt(int64(window/time.Microsecond), 10)
}

// quotaKey is where a calendar quota of the key counts (a sorted set: the
// end of the period it counts, the count, and its last admission's id and
// time), beside the AllowAll logs: "day:" or "month:" and the anchor day,
// then the location's name (internal/keylayout).
func quotaKey(base string, lim Limit) string {
	if lim.period == day {
		return keylayout.Daily(base, lim.loc.String())
	}
	return keylayout.Monthly(base, lim.anchor, lim.loc.String())
}

// periodsKey is the index of a key's calendar quotas (a sorted set: member
// a quota's key, score the end of its period in µs), so that Reset finds
// them; it lives until the last of their periods ends.
func periodsKey(base string) string { return keylayout.Periods(base) }
