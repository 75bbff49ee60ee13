package slidelog

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Where a key's logs live in Redis.
//
// The single-limit log of key is prefix+key (Allow, AllowN, Peek). The
// AllowAll logs of key, one per window, and their index (the windows in
// use, so that Reset finds them) are
//
//	prefix + "{" + tag + "}" + key + ":" + window in µs
//	prefix + "{" + tag + "}" + key + ":windows"
//
// where tag is a short string of letters and digits chosen so that these
// keys hash to the same Redis Cluster slot as prefix+key. So every log of a
// key sits on one slot, whatever bytes the key holds ("}x", "{}", "a{b}c"):
// AllowAll's script reaches all its logs, and Reset removes them all in one
// atomic script, on a single server and on a Cluster alike.

// checkPrefix reports why a prefix cannot keep a key's logs on one Cluster
// slot: a '{' that does not open a hash tag ("svc{}:", "svc{:") makes
// Redis hash each whole key, so the logs of one key would scatter.
func checkPrefix(prefix string) error {
	if _, ok := hashTag(prefix); strings.Contains(prefix, "{") && !ok {
		return fmt.Errorf("slidelog: WithPrefix(%q): a '{' in a prefix must open a non-empty hash tag (like \"{rl}:\"), or the logs of one key land on different Cluster slots", prefix)
	}
	return nil
}

// allKeys is where AllowAll keeps key's logs: the common start of the
// per-window keys (their window follows) and the index.
func (l *Limiter) allKeys(key string) (base, index string) {
	base = l.prefix + "{" + tagOf(slot(l.prefix+key)) + "}" + key + ":"
	return base, base + "windows"
}

// windowKey is the AllowAll log of one window.
func windowKey(base string, window time.Duration) string {
	return base + strconv.FormatInt(int64(window/time.Microsecond), 10)
}
