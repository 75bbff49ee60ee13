package main

import (
	"strings"
	"sync"
)

// The names of a key's logs, as docs/operations.md ("Key layout") gives
// them and the library's keys.go and slot.go compute them (unexported
// there; TestInspectEveryLog checks these against logs the library wrote):
//
//	single-limit log   K = prefix + key
//	AllowAll log       start + window in µs
//	AllowAll index     start + "windows"
//	in-flight log      start + "inflight"
//
// where start is prefix + "{" + K + "}:" for a K without a hash tag or a
// '}'; prefix + "{" + t + "}" + key + ":" for a K with a hash tag t; and
// prefix + "{" + c + "}" + key + ":" otherwise, c the first of the
// shortest strings of letters and digits whose Cluster slot is K's.

// keyLogs are the names of one key's logs.
type keyLogs struct {
	single, start, index, inflight string
}

func logsOf(prefix, key string) keyLogs {
	k := prefix + key
	var start string
	if tag, ok := hashTag(k); ok {
		start = prefix + "{" + tag + "}" + key + ":"
	} else if k != "" && !strings.Contains(k, "}") {
		start = prefix + "{" + k + "}:"
	} else {
		start = prefix + "{" + tagOf(slot(k)) + "}" + key + ":"
	}
	return keyLogs{single: k, start: start, index: start + "windows", inflight: start + "inflight"}
}

// hashTag is the part of key that Redis Cluster hashes when key has one: the
// text between the first '{' and the next '}', when it is not empty.
func hashTag(key string) (string, bool) {
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

// slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, or of the whole key when it has none, modulo 16384.
func slot(key string) int {
	if tag, ok := hashTag(key); ok {
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

// slotTags holds, for every slot, the first of the shortest strings of
// letters and digits (in the order of alphabet) that hashes to it.
var slotTags struct {
	once sync.Once
	tag  [16384]string
}

// tagOf returns the hash tag (no braces) the library chooses for slot s.
func tagOf(s int) string {
	slotTags.once.Do(func() {
		const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		left := len(slotTags.tag)
		var grow func(prefix []byte, depth int)
		grow = func(prefix []byte, depth int) {
			for i := 0; i < len(alphabet) && left > 0; i++ {
				b := append(prefix, alphabet[i])
				if len(b) == depth {
					if k := slot(string(b)); slotTags.tag[k] == "" {
						slotTags.tag[k] = string(b)
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
	})
	return slotTags.tag[s]
}
