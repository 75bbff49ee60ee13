package slidelog

import (
	"strings"
	"sync"
)

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

// slotTags holds, for every slot, the shortest string of letters and digits
// (the first in order) that hashes to it: a hash tag that puts a key in a
// chosen slot, whatever bytes the rest of the key holds. Filled on first
// use (about a millisecond: every string of up to 3 characters).
var slotTags struct {
	once sync.Once
	tag  [16384]string
}

// tagOf returns a hash tag (no braces) whose slot is s.
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
