package slidelog_test

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/keylayout"
	"github.com/slidelog/slidelog/internal/minitest"
)

// Every log of a key, whatever the key's bytes, is on the slot of its
// single-limit log, so that AllowAll and Reset work on a Cluster.
func TestLogsShareASlot(t *testing.T) {
	keys := []string{"acct", "}", "}mallory", "{}", "{}x", "a{b}c", "{x}", "x{", "{", "a}b{c", "\x00{\xff}", ""}
	for _, prefix := range []string{"slidelog:", "", "a}b:", "{rl}:", "svc{x}:"} {
		l := New(minitest.New(t).Rdb, WithPrefix(prefix))
		for _, key := range keys {
			want := keylayout.Slot(prefix + key)
			base, index := l.AllKeys(key)
			for _, k := range []string{index, WindowKey(base, 1), WindowKey(base, 1<<62)} {
				if got := keylayout.Slot(k); got != want {
					t.Errorf("prefix %q key %q: %q on slot %d, want %d", prefix, key, k, got, want)
				}
			}
		}
	}
}

// A prefix that would scatter a key's logs over slots is refused at New.
func TestPrefixRefused(t *testing.T) {
	rdb := minitest.New(t).Rdb
	for _, prefix := range []string{"svc{}:", "svc{:", "{", "a{}{b}:"} {
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("WithPrefix(%q): New did not panic", prefix)
				} else if got := fmt.Sprint(r); !strings.HasPrefix(got, "slidelog: New: WithPrefix(") || strings.Count(got, "slidelog:") != 1 {
					t.Errorf("WithPrefix(%q): New panicked %q; want it to name the option once, after one \"slidelog: New: \"", prefix, got)
				}
			}()
			New(rdb, WithPrefix(prefix))
		}()
	}
}
