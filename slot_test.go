package slidelog

import (
	"testing"
)

// The slots CLUSTER KEYSLOT gave on Redis 7.0 for these keys.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789": 12739, "foo": 12182, "somekey": 11058, "foo{hash_tag}": 2515,
		"slidelog:{user}42": 5474, "a{}b": 13694, "{}": 15257, "x{": 3596,
		"slidelog:hot": 1393, "{a}{b}": 15495,
	} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// Every slot has a tag, and the tag hashes to it.
func TestTagOf(t *testing.T) {
	for s := range 16384 {
		tag := tagOf(s)
		if tag == "" || len(tag) > 3 || slot("{"+tag+"}") != s {
			t.Fatalf("tagOf(%d) = %q (slot %d)", s, tag, slot("{"+tag+"}"))
		}
	}
}
