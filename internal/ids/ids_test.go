package ids

import "testing"

// Reserve hands out consecutive blocks and carries across bytes and past
// 2^40 the way the script's derivation does (ids.lua: prefix, counter+i
// mod 2^40); the root's tests hold the script to the same ids.
func TestReserveCarries(t *testing.T) {
	s := NewAt([PrefixLen]byte{1, 2, 3}, CounterMask-1) // 2 ids before the wrap
	if id := s.Reserve(4); id != At(s.Prefix(), CounterMask-1) {
		t.Fatalf("first id %x", id)
	}
	if id := s.Reserve(1); id != [Len]byte{1, 2, 3, 0, 0, 0, 0, 2} {
		t.Errorf("next id after the wrap %x, want counter 2", id)
	}
	if id := At([PrefixLen]byte{9, 9, 9}, 1<<32+5); id != [Len]byte{9, 9, 9, 1, 0, 0, 0, 5} {
		t.Errorf("At carries into byte 3: %x", id)
	}
}

// An Arg is the id on its first write and the id marked 'r' after.
func TestArgMarksRetries(t *testing.T) {
	var a Arg
	a.Set(At([PrefixLen]byte{1, 2, 3}, 7))
	first, _ := a.MarshalBinary()
	second, _ := a.MarshalBinary()
	if len(first) != Len || len(second) != Len+1 || second[Len] != 'r' || string(second[:Len]) != string(first) || a.Writes() != 2 {
		t.Errorf("writes %x then %x (%d)", first, second, a.Writes())
	}
}

// Sources draw their prefixes at random: three in a row never all match.
func TestSourcesDiffer(t *testing.T) {
	a, b, c := New().Prefix(), New().Prefix(), New().Prefix()
	if a == b && b == c {
		t.Error("random prefixes repeat")
	}
}

// An admission takes Span(n) ids: n, at most MaxSpan, so the counter moves
// on by at most MaxSpan whatever n is (n may be a quota's 2^50).
func TestReserveTakesASpan(t *testing.T) {
	s := NewAt([PrefixLen]byte{1, 2, 3}, 100)
	for _, c := range []struct{ n, next int }{{1, 101}, {128, 229}, {1 << 40, 229 + MaxSpan}, {1 << 50, 229 + 2*MaxSpan}} {
		s.Reserve(c.n)
		if got := s.Reserve(0); got != At(s.Prefix(), uint64(c.next)) {
			t.Fatalf("after Reserve(%d): next id %x, want counter %d", c.n, got, c.next)
		}
	}
}
