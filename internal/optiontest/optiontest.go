// Package optiontest gives slidelog's tests the settings no public option
// sets, as values of slidelog.Option's type: a test converts them,
// slidelog.Option(optiontest.CompactAbove(0)). Only tests import it.
package optiontest

import (
	"github.com/slidelog/slidelog/internal/config"
	"github.com/slidelog/slidelog/internal/ids"
)

// CompactAbove keeps every log of a limit over events compactly (0: every
// log but an in-flight one; a huge value: none), and below 128 makes a
// sorted set of such a limit compact past events live events, not past a
// listpack's 128.
func CompactAbove(events int) func(*config.Config) {
	return func(c *config.Config) {
		c.CompactAbove = events
		c.ConvertPast = min(events, config.DefaultConvertPast)
	}
}

// ConvertPast makes a sorted set of a limit kept compactly compact past
// events live events, not past a listpack's 128: 0, a compact log from its
// first admission. Give it after CompactAbove, which sets it too.
func ConvertPast(events int) func(*config.Config) {
	return func(c *config.Config) { c.ConvertPast = events }
}

// BlockLog makes the logs a sorted set of a limit kept compactly becomes
// block logs (blocklog.lua), the default.
func BlockLog() func(*config.Config) {
	return func(c *config.Config) { c.BlockLog = true }
}

// SlotLog makes the logs a sorted set of a limit kept compactly becomes
// compact logs of a slot per event (compact.lua), not block logs: the
// format of keys written before the block log, which a decision reads and
// an admission converts (docs/semantics.md).
func SlotLog() func(*config.Config) {
	return func(c *config.Config) { c.BlockLog = false }
}

// MaxLive makes a log's live events stop at max (the decision script's
// maxLive), not at 2^47: usage recorded past it is dropped.
func MaxLive(max int) func(*config.Config) {
	return func(c *config.Config) { c.MaxLive = max }
}

// IDs makes the limiter take its event ids from s.
func IDs(s *ids.Source) func(*config.Config) {
	return func(c *config.Config) { c.IDs = s }
}
