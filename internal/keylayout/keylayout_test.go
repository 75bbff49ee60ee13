package keylayout

import "testing"

// The slots CLUSTER KEYSLOT gave on Redis 7.0 for these keys.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789": 12739, "foo": 12182, "somekey": 11058, "foo{hash_tag}": 2515,
		"slidelog:{user}42": 5474, "a{}b": 13694, "{}": 15257, "x{": 3596,
		"slidelog:hot": 1393, "{a}{b}": 15495,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// Every slot has a tag, and the tag hashes to it.
func TestTagOf(t *testing.T) {
	for s := range 16384 {
		tag := TagOf(s)
		if tag == "" || len(tag) > 3 || Slot("{"+tag+"}") != s {
			t.Fatalf("TagOf(%d) = %q (slot %d)", s, tag, Slot("{"+tag+"}"))
		}
	}
}

// The names docs/operations.md ("Key layout") gives, one of each kind of K.
func TestLayoutNames(t *testing.T) {
	for _, c := range []struct{ prefix, key, start string }{
		{"slidelog:", "acct", "slidelog:{slidelog:acct}:"},
		{"slidelog:", "user:{42}", "slidelog:{42}user:{42}:"},
		{"slidelog:", "}x", "slidelog:{0JI}}x:"},
		{"{rl}:", "acct", "{rl}:{rl}acct:"},
	} {
		start := Start(c.prefix, c.key)
		if start != c.start || Single(c.prefix, c.key) != c.prefix+c.key ||
			Index(start) != c.start+"windows" || Inflight(start) != c.start+"inflight" {
			t.Errorf("prefix %q key %q: start %q, want %q", c.prefix, c.key, start, c.start)
		}
	}
}
