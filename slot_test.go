package slidelog

import (
	"fmt"
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

// Every log of a key, whatever the key's bytes, is on the slot of its
// single-limit log, so that AllowAll and Reset work on a Cluster.
func TestLogsShareASlot(t *testing.T) {
	keys := []string{"acct", "}", "}mallory", "{}", "{}x", "a{b}c", "{x}", "x{", "{", "a}b{c", "\x00{\xff}", ""}
	for _, prefix := range []string{"slidelog:", "", "a}b:", "{rl}:", "svc{x}:"} {
		l := New(newMini(t).rdb, WithPrefix(prefix))
		for _, key := range keys {
			want := slot(prefix + key)
			base, index := l.allKeys(key)
			for _, k := range []string{index, windowKey(base, 1), windowKey(base, 1<<62)} {
				if got := slot(k); got != want {
					t.Errorf("prefix %q key %q: %q on slot %d, want %d", prefix, key, k, got, want)
				}
			}
		}
	}
}

// A prefix that would scatter a key's logs over slots is refused at New.
func TestPrefixRefused(t *testing.T) {
	rdb := newMini(t).rdb
	for _, prefix := range []string{"svc{}:", "svc{:", "{", "a{}{b}:"} {
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("WithPrefix(%q): New did not panic", prefix)
				} else if got := fmt.Sprint(r); got == "" {
					t.Errorf("WithPrefix(%q): empty panic", prefix)
				}
			}()
			New(rdb, WithPrefix(prefix))
		}()
	}
}
