// Package keylayout names the Redis keys where slidelog keeps a key's logs,
// and computes the Redis Cluster slot they share. It is written once, for
// the library (limiter.go) and for the CLI's inspect command alike, so that
// inspect reads exactly the keys the library writes.
//
// The single-limit log of key is K = prefix + key (Allow, AllowN, Peek).
// The other logs of key (the AllowAll logs, one per window, their index,
// the in-flight log, the calendar quotas) share one start that hashes, in
// Redis Cluster and in a go-redis Ring alike, as K does:
//
//	K without a hash tag or '}'   prefix + "{" + K + "}:"      ("slidelog:{slidelog:acct}:")
//	K with a hash tag t           prefix + "{" + t + "}" + key + ":"
//	K with a '}' and no hash tag  prefix + "{" + c + "}" + key + ":"
//
// with c the first of the shortest strings of letters and digits whose
// Cluster slot is K's (TagOf). Then:
//
//	AllowAll log     start + window in µs
//	AllowAll index   start + "windows"
//	in-flight log    start + "inflight"
//	daily quota      start + "day:" + zone
//	monthly quota    start + "month:" + anchor day + ":" + zone
//	quotas' index    start + "periods"
//
// So every log of a key sits on one Cluster slot (and on one Ring shard,
// but for keys of the third kind), whatever bytes the key holds ("}x",
// "{}", "a{b}c"). docs/operations.md ("Key layout") gives the same table.
package keylayout

import (
	"strconv"
	"strings"
	"sync"
)

// Single is the name of key's single-limit log: prefix + key.
func Single(prefix, key string) string { return prefix + key }

// Start is the common start of the names of key's other logs (its AllowAll
// logs, their index, its in-flight log and its calendar quotas), on the
// Cluster slot of Single(prefix, key): see the package comment.
func Start(prefix, key string) string {
	k := prefix + key
	if tag, ok := HashTag(k); ok {
		return prefix + "{" + tag + "}" + key + ":"
	}
	if k != "" && !strings.Contains(k, "}") {
		return prefix + "{" + k + "}:"
	}
	return prefix + "{" + TagOf(Slot(k)) + "}" + key + ":"
}

// Index is the name of the index of a key's AllowAll logs (the windows in
// use, so that Reset finds them), given the key's Start.
func Index(start string) string { return start + "windows" }

// Inflight is the name of a key's in-flight log (AcquireN's slots held),
// given the key's Start.
func Inflight(start string) string { return start + "inflight" }

// Periods is the name of the index of a key's calendar quotas (member a
// quota's name, score the end of its period in µs), given the key's Start.
func Periods(start string) string { return start + "periods" }

// Daily is the name of a key's quota per day in zone (a location's name:
// "Europe/Berlin"), given the key's Start.
func Daily(start, zone string) string { return start + "day:" + zone }

// Monthly is the name of a key's quota per billing month from day anchor in
// zone, given the key's Start.
func Monthly(start string, anchor int, zone string) string {
	return start + "month:" + strconv.Itoa(anchor) + ":" + zone
}

// Quota is what the name of a calendar quota of the key of the given Start
// says: period "day" or "month", the anchor day of a month (0 for a day)
// and the zone; ok is false for a name that is no quota's.
func Quota(start, name string) (period string, anchor int, zone string, ok bool) {
	rest, found := strings.CutPrefix(name, start)
	if !found {
		return "", 0, "", false
	}
	if zone, found := strings.CutPrefix(rest, "day:"); found && zone != "" {
		return "day", 0, zone, true
	}
	rest, found = strings.CutPrefix(rest, "month:")
	if !found {
		return "", 0, "", false
	}
	a, zone, found := strings.Cut(rest, ":")
	anchor, err := strconv.Atoi(a)
	if !found || err != nil || zone == "" || strconv.Itoa(anchor) != a {
		return "", 0, "", false
	}
	return "month", anchor, zone, true
}

// HashTag is the part of key that Redis Cluster hashes when key has one:
// the text between the first '{' and the next '}', when it is not empty.
func HashTag(key string) (string, bool) {
	s := strings.IndexByte(key, '{')
	if s < 0 {
		return "", false
	}
	e := strings.IndexByte(key[s+1:], '}')
	if e <= 0 {
		return "", false
	}
	return key[s+1 : s+1+e], true
}

// Slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, or of the whole key when it has none, modulo 16384.
func Slot(key string) int {
	if tag, ok := HashTag(key); ok {
		key = tag
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crc16tab[byte(crc>>8)^key[i]]
	}
	return int(crc) % 16384
}

// crc16tab is the CRC16 (XMODEM, polynomial 0x1021) of every byte.
var crc16tab = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// slotTags holds, for every slot, the shortest string of letters and digits
// (the first in order) that hashes to it: a hash tag that puts a key in a
// chosen slot, whatever bytes the rest of the key holds. Computed on first
// use (about a millisecond: every string of up to 3 characters).
var slotTags = sync.OnceValue(func() *[16384]string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	var tag [16384]string
	left := len(tag)
	var grow func(prefix []byte, depth int)
	grow = func(prefix []byte, depth int) {
		for i := 0; i < len(alphabet) && left > 0; i++ {
			b := append(prefix, alphabet[i])
			if len(b) == depth {
				if k := Slot(string(b)); tag[k] == "" {
					tag[k] = string(b)
					left--
				}
				continue
			}
			grow(b, depth)
		}
	}
	for depth := 1; left > 0; depth++ {
		grow(make([]byte, 0, depth), depth)
	}
	return &tag
})

// TagOf returns a hash tag (no braces) whose slot is s: the first, in the
// order of digits, upper-case and then lower-case letters, of the shortest
// such strings.
func TagOf(s int) string { return slotTags()[s] }
