package slidelog_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/conformance"
	"github.com/slidelog/slidelog/internal/model"
	"github.com/slidelog/slidelog/internal/optiontest"
	"github.com/slidelog/slidelog/internal/redistest"
)

// miniSubject is the Redis limiter on a miniredis whose clock the test sets.
func miniSubject(t *testing.T, opts ...slidelog.Option) conformance.Subject {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return conformance.Subject{
		Limiter: slidelog.New(rdb, opts...),
		SetTime: func(d time.Duration) { m.SetTime(conformance.Epoch.Add(d)) },
	}
}

// The shared tables: the worked example of the docs, the window's
// edges, exact RetryAfter, Reset, AllowAll. slidelog/local runs the same.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Subject { return miniSubject(t) })
	t.Run("MaxLimits", func(t *testing.T) {
		conformance.RunMaxLimits(t, func(t *testing.T) conformance.Subject { return miniSubject(t) })
	})
}

// Batched, the limiter decides exactly as unbatched.
func TestConformanceBatched(t *testing.T) {
	batched := func(t *testing.T) conformance.Subject { return miniSubject(t, slidelog.WithBatching(8)) }
	conformance.Run(t, batched)
	conformance.RunModel(t, batched, 3, 300)
}

// Random traces against the model: thousands of steps, every field.
func TestConformanceModel(t *testing.T) {
	if testing.Short() {
		t.Skip("a long random trace: run without -short")
	}
	conformance.RunModel(t, func(t *testing.T) conformance.Subject { return miniSubject(t) }, 20, 500)
}

// FuzzModel replays fuzzer-chosen traces on miniredis against the model.
// Each 4 bytes are one step: key and peek, events and n, window, time advance.
func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 3, 10, 0, 0, 3, 10, 255, 1, 2, 5, 3})
	f.Add([]byte{0, 0x21, 1, 254, 0, 0x21, 1, 253, 0, 0x21, 1, 0})
	f.Add([]byte{2, 0x23, 9, 0, 2, 0x23, 9, 0, 2, 0x23, 9, 253, 2, 0x23, 9, 254, 2, 0x23, 9, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4*200 {
			data = data[:4*200]
		}
		var trace []model.Step
		windows := map[string]time.Duration{} // a key keeps its first window
		for i := 0; i+4 <= len(data); i += 4 {
			b := data[i : i+4]
			s := model.Step{
				Key:    string('a' + rune(b[0]%3)),
				Events: 1 + int(b[1]&0x0f)%8,
				Window: time.Duration(1+int(b[2])*7) * time.Microsecond,
				Peek:   b[0]&0x80 != 0,
			}
			if w, ok := windows[s.Key]; ok {
				s.Window = w
			}
			windows[s.Key] = s.Window
			s.N = 1 + int(b[1]>>4)%s.Events
			if s.Peek {
				s.N = 1
			}
			switch b[3] {
			case 255:
				s.Advance = s.Window
			case 254:
				s.Advance = s.Window - time.Microsecond
			case 253:
				s.Advance = -1
			default:
				s.Advance = time.Duration(b[3]) * 5 * time.Microsecond
			}
			trace = append(trace, s)
		}
		conformance.Replay(t, miniSubject(t), trace)
	})
}

// Every table and trace again with every log compact (compact.lua): the
// two stores decide alike.
func TestConformanceCompact(t *testing.T) {
	if testing.Short() {
		t.Skip("a long random trace: run without -short")
	}
	compact := slidelog.Option(optiontest.CompactAbove(0))
	conformance.Run(t, func(t *testing.T) conformance.Subject { return miniSubject(t, compact) })
	t.Run("MaxLimits", func(t *testing.T) {
		conformance.RunMaxLimits(t, func(t *testing.T) conformance.Subject { return miniSubject(t, compact) })
	})
	t.Run("batched", func(t *testing.T) {
		batched := func(t *testing.T) conformance.Subject { return miniSubject(t, compact, slidelog.WithBatching(8)) }
		conformance.Run(t, batched)
		conformance.RunModel(t, batched, 3, 300)
	})
	t.Run("model", func(t *testing.T) {
		conformance.RunModel(t, func(t *testing.T) conformance.Subject { return miniSubject(t, compact) }, 20, 500)
	})
}

// Every table and trace again with every log a compact log of a slot per
// event (compact.lua), the format before the block log, which a decision
// still reads: it decides as the other stores do.
func TestConformanceSlotLog(t *testing.T) {
	slots := []slidelog.Option{slidelog.Option(optiontest.CompactAbove(0)), slidelog.Option(optiontest.SlotLog())}
	subject := func(more ...slidelog.Option) func(t *testing.T) conformance.Subject {
		return func(t *testing.T) conformance.Subject { return miniSubject(t, append(slots, more...)...) }
	}
	conformance.Run(t, subject())
	t.Run("MaxLimits", func(t *testing.T) { conformance.RunMaxLimits(t, subject()) })
	t.Run("batched", func(t *testing.T) {
		conformance.Run(t, subject(slidelog.WithBatching(8)))
		conformance.RunModel(t, subject(slidelog.WithBatching(8)), 3, 300)
	})
	t.Run("model", func(t *testing.T) {
		seeds, steps := 20, 500
		if testing.Short() {
			seeds, steps = 3, 300
		}
		conformance.RunModel(t, subject(), seeds, steps)
	})
}

// The block log's boundaries (conformance.BlockBoundaries), on miniredis
// and on real servers whose scripts read a clock the test sets
// (redistest.Clock): every decision is the model's, at the microsecond it
// was made.
func TestBlockLogBoundaries(t *testing.T) {
	steps, seeds := 5000, 4
	if testing.Short() {
		steps, seeds = 1500, 1
	}
	run := func(t *testing.T, rdb *redis.Client, seed uint64, advance func(time.Duration)) {
		prefix := uniqueKey(t) + ":"
		l := slidelog.New(rdb, slidelog.Option(optiontest.CompactAbove(0)), slidelog.WithPrefix(prefix))
		conformance.BlockBoundaries(t, l, rdb, prefix, seed, steps, advance)
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("miniredis/", seed), func(t *testing.T) {
			m := miniredis.RunT(t)
			rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			at := conformance.Epoch
			m.SetTime(at)
			run(t, rdb, seed, func(d time.Duration) { at = at.Add(d); m.SetTime(at) })
		})
		for name, rdb := range attackAddrs(t) {
			t.Run(fmt.Sprint(name, "/", seed), func(t *testing.T) {
				clk := redistest.NewClock(t, rdb)
				run(t, rdb, seed, func(d time.Duration) { clk.Advance(t, d) })
			})
		}
	}
}
