package compactlog

import (
	"bytes"
	"strings"
	"testing"
)

// build makes a compact log's string: its header, its table (entries
// written at the slots given, cur the next to write) and its ring.
func build(capacity, total, first, newest, oldest int64, cur byte, table map[int]Entry, ring []int64) []byte {
	seven := func(v int64) []byte {
		b := make([]byte, Slot)
		for i := Slot - 1; i >= 0; i-- {
			b[i] = byte(v)
			v >>= 8
		}
		return b
	}
	var b bytes.Buffer
	b.WriteString(Magic)
	for _, v := range []int64{capacity, total, first, newest, oldest} {
		b.Write(seven(v))
	}
	b.WriteByte(cur)
	for i := range Entries {
		e, ok := table[i]
		if !ok {
			b.Write(make([]byte, 16))
			continue
		}
		b.Write(e.ID[:])
		b.Write(seven(e.Time))
		b.WriteByte(e.Kind)
	}
	for _, t := range ring {
		b.Write(seven(t))
	}
	return b.Bytes()
}

func TestParseAWrappedRing(t *testing.T) {
	// 3 slots, 5 events recorded (times 10..14 µs, event i in slot i mod
	// 3): the ring holds events 2, 3, 4; the first live one is event 3
	a := Entry{ID: [8]byte{'a'}, Time: 13, Kind: 'a'}
	r := Entry{ID: [8]byte{'r'}, Time: 14, Kind: 'r'}
	b := build(3, 5, 3, 14, 13, 2, map[int]Entry{0: a, 1: r}, []int64{13, 14, 12})
	if len(b) != Header+3*Slot {
		t.Fatalf("built %d bytes", len(b))
	}
	l, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if l.Capacity != 3 || l.Total != 5 || l.First != 3 || l.Newest != 14 || l.Oldest != 13 {
		t.Errorf("header: %+v", l)
	}
	if len(l.Events) != 2 || l.Events[0] != 13 || l.Events[1] != 14 {
		t.Errorf("events from the first live one: %v, want [13 14]", l.Events)
	}
	// the table, newest first: the entry before cur (1), then 0
	if len(l.Table) != 2 || l.Table[0] != r || l.Table[1] != a {
		t.Errorf("table: %+v", l.Table)
	}
	if n := l.Live(13); n != 1 {
		t.Errorf("Live(13) = %d, want 1 (an event at the cutoff has left)", n)
	}
}

func TestParseRefuses(t *testing.T) {
	good := build(2, 1, 0, 10, 10, 1, nil, []int64{10, 0})
	for name, b := range map[string][]byte{
		"another magic": append([]byte("slc0"), good[4:]...),
		"cut short":     good[:len(good)-1],
		"too long":      append(append([]byte{}, good...), 0),
		"only a header": good[:Header-1],
		"first > total": build(2, 1, 2, 10, 10, 1, nil, []int64{10, 0}),
		"first too old": build(2, 5, 2, 10, 10, 1, nil, []int64{10, 0}),
	} {
		if _, err := Parse(b); err == nil || !strings.HasPrefix(err.Error(), "compactlog: ") {
			t.Errorf("%s: %v, want an error", name, err)
		}
	}
	if _, err := Parse(good); err != nil {
		t.Errorf("the log the others are made from: %v", err)
	}
	if Is([]byte("slb1...")) || !Is(good) {
		t.Error("Is tells a compact log by its magic")
	}
}
