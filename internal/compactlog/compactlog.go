// Package compactlog reads the compact exact log (compact.lua at the
// module's root): a Redis string holding a header, a table of the last
// admissions and refunds, and a ring of 7-byte event times. slidelog's
// tests and `slidelog inspect` read a log's events with it; the library
// itself only runs the scripts.
package compactlog

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/slidelog/slidelog/internal/blocklog"
)

// The layout (compact.lua's header comment).
const (
	Magic   = "slc1"
	Header  = 296 // bytes before the ring
	Slot    = 7   // bytes per event
	Entries = 16  // the table's entries
)

// Log is a compact log as read from its string.
type Log struct {
	Capacity int64   // its slots
	Total    int64   // the events ever recorded in it
	First    int64   // an index at or below its first live event
	Newest   int64   // its newest event's time, µs
	Oldest   int64   // the time of event First (when First < Total), µs
	Events   []int64 // the times of the events from max(First, Total-Capacity), oldest first, µs
	Table    []Entry // its last admissions and refunds, the newest first
}

// Entry is an admission (Kind 'a') or a refund ('r') the log remembers:
// the id of its first event and the time of its events.
type Entry struct {
	ID   [8]byte
	Time int64
	Kind byte
}

// Is reports whether b is a compact log's string (by its first bytes).
func Is(b []byte) bool { return bytes.HasPrefix(b, []byte(Magic)) }

func num(b []byte) int64 {
	var v int64
	for _, c := range b[:Slot] {
		v = v<<8 | int64(c)
	}
	return v
}

// Parse reads a compact log's whole string.
func Parse(b []byte) (Log, error) {
	if !Is(b) || len(b) < Header {
		return Log{}, errors.New("compactlog: not a compact log")
	}
	l := Log{Capacity: num(b[4:]), Total: num(b[11:]), First: num(b[18:]), Newest: num(b[25:]), Oldest: num(b[32:])}
	if want := Header + Slot*l.Capacity; int64(len(b)) != want {
		return Log{}, fmt.Errorf("compactlog: %d bytes, want %d for %d slots", len(b), want, l.Capacity)
	}
	if l.First > l.Total || l.First < l.Total-l.Capacity {
		return Log{}, fmt.Errorf("compactlog: first live index %d outside the last %d of %d events", l.First, l.Capacity, l.Total)
	}
	cur := int(b[39]) % Entries
	for i := 0; i < Entries; i++ {
		e := (cur - 1 - i + 2*Entries) % Entries
		o := 40 + 16*e
		if b[o+15] == 0 {
			continue
		}
		var en Entry
		copy(en.ID[:], b[o:o+8])
		en.Time, en.Kind = num(b[o+8:]), b[o+15]
		l.Table = append(l.Table, en)
	}
	from := max(l.First, l.Total-l.Capacity)
	for i := from; i < l.Total; i++ {
		p := Header + Slot*(i%l.Capacity)
		l.Events = append(l.Events, num(b[p:]))
	}
	return l, nil
}

// Live is how many of the log's events are in the window (cutoff, ∞): an
// event at or below cutoff has left it.
func (l Log) Live(cutoff int64) int {
	n := 0
	for _, t := range l.Events {
		if t > cutoff {
			n++
		}
	}
	return n
}

// Times is the event times (µs) a compact log in either format holds from
// its first live index on, oldest first: a log of slots' events (Parse),
// or a block log's entries (blocklog.Parse), each entry's time once per
// unit of its weight.
func Times(b []byte) ([]int64, error) {
	if !blocklog.Is(b) {
		lg, err := Parse(b)
		return lg.Events, err
	}
	lg, err := blocklog.Parse(b)
	if err != nil {
		return nil, err
	}
	var ts []int64
	for _, e := range lg.Held() {
		for range e.Weight {
			ts = append(ts, e.Time)
		}
	}
	return ts, nil
}
