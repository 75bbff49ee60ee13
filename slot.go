package slidelog

import "strings"

// slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, the part between the first '{' and the next '}' when that part is not
// empty, or else of the whole key, modulo 16384.
func slot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
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
