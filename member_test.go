package slidelog

import (
	"context"
	"testing"
)

// The script derives member i from the counter and carries across bytes and
// past 2^40 the way the client's reserve does.
func TestScriptIDCarry(t *testing.T) {
	m := newMini(t)
	l := New(m.rdb)
	ctx := context.Background()
	saved := ids.next.Load()
	defer ids.next.Store(saved)
	ids.next.Store(counterMask - 1) // 2 ids before the wrap
	if _, err := l.AllowN(ctx, "k", PerMinute(10), 4); err != nil {
		t.Fatal(err)
	}
	members, _ := m.ZMembers("slidelog:k")
	want := map[string]bool{}
	for _, c := range []uint64{counterMask - 1, counterMask, 0, 1} {
		id := idAt(ids.prefix, c)
		want[string(id[:])] = true
	}
	for _, mem := range members {
		if !want[mem] {
			t.Errorf("unexpected member %x", mem)
		}
		delete(want, mem)
	}
	if len(want) != 0 {
		t.Errorf("members missing: %d", len(want))
	}
	// The next reservation continues after the wrap.
	if id := ids.reserve(1); id[3] != 0 || id[7] != 2 {
		t.Errorf("next id after wrap %x, want counter 2", id)
	}
}
