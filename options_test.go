package slidelog

import (
	"strings"
	"testing"
	"time"
)

// A configuration mistake panics in New, naming what is wrong.
func TestOptionMistakesPanicInNew(t *testing.T) {
	rdb := newMini(t).rdb
	for _, c := range []struct {
		name string
		opts []Option
		says string
	}{
		{"negative timeout", []Option{WithTimeout(-time.Second)}, "WithTimeout"},
		{"max events 0", []Option{WithMaxEvents(0)}, "WithMaxEvents"},
		{"prefix with an empty tag", []Option{WithPrefix("svc{}:")}, "WithPrefix"},
		{"batching without Pipeline", []Option{WithBatching(8)}, "Pipeline"},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.Contains(msg, c.says) {
					t.Errorf("panic %v, want one naming %s", r, c.says)
				}
			}()
			if c.says == "Pipeline" {
				New(scripterOnly{rdb}, c.opts...)
				return
			}
			New(rdb, c.opts...)
		})
	}
}

// Options that are right build a limiter. Batching is on by default where
// the client can pipeline, off where it cannot (no panic: nobody asked for
// it), and off on request.
func TestOptionsBuild(t *testing.T) {
	rdb := newMini(t).rdb
	if l := New(rdb); !l.plain || l.batch == nil || l.batch.max != defaultBatch || l.batch.merge != mergeAll || l.deny != nil {
		t.Errorf("New(rdb): plain %v batch %+v deny %v", l.plain, l.batch, l.deny)
	}
	if l := New(rdb, WithoutBatching()); l.batch != nil {
		t.Errorf("WithoutBatching: batch %+v", l.batch)
	}
	if l := New(scripterOnly{rdb}); l.batch != nil {
		t.Errorf("a client without Pipeline: batch %+v", l.batch)
	}
	l := New(rdb, WithTimeout(time.Second), WithMaxEvents(10), WithPrefix("{rl}:"), WithBatching(8), WithDenyCache(), WithName("n"))
	if l.plain || l.batch == nil || l.batch.max != 8 || l.batch.merge != mergeAll || l.deny == nil {
		t.Errorf("options not applied: %+v", l)
	}
}
