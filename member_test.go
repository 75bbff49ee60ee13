package slidelog_test

import (
	"context"
	"testing"

	. "github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/ids"
	"github.com/slidelog/slidelog/internal/minitest"
	"github.com/slidelog/slidelog/internal/optiontest"
)

// The script derives member i from the counter and carries across bytes and
// past 2^40 the way the client's reserve does.
func TestScriptIDCarry(t *testing.T) {
	m := minitest.New(t)
	src := ids.NewAt(ids.Process().Prefix(), ids.CounterMask-1) // 2 ids before the wrap
	l := New(m.Rdb, Option(optiontest.IDs(src)))
	ctx := context.Background()
	if _, err := l.AllowN(ctx, "k", PerMinute(10), 4); err != nil {
		t.Fatal(err)
	}
	members, _ := m.ZMembers("slidelog:k")
	want := map[string]bool{}
	for _, c := range []uint64{ids.CounterMask - 1, ids.CounterMask, 0, 1} {
		id := ids.At(src.Prefix(), c)
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
}
