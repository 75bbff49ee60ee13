package slidelog_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/optiontest"
	"github.com/slidelog/slidelog/internal/redistest"
)

// attackStores: the stores a Settle meets (a fill converts a log of a
// limit over 128 to a block or a slot log).
func attackStores() []settleStore {
	return []settleStore{
		{name: "sorted set", limits: []slidelog.Limit{slidelog.PerHour(100)}},
		{name: "block log", limits: []slidelog.Limit{slidelog.PerHour(1000)}, fill: 200},
		{name: "slot log", opts: []slidelog.Option{slidelog.Option(optiontest.SlotLog())}, limits: []slidelog.Limit{slidelog.PerHour(1000)}, fill: 200},
		{name: "daily quota", limits: []slidelog.Limit{slidelog.Daily(100, time.UTC)}},
		{name: "allowall block+quota", limits: []slidelog.Limit{slidelog.PerHour(1000), slidelog.Daily(5000, time.UTC)}, fill: 200},
	}
}

// clocked is a client of srv whose scripts read a clock the test sets.
func clocked(t *testing.T, srv string) (*redis.Client, func(d time.Duration)) {
	if srv == "miniredis" {
		m := newMini(t)
		return m.Rdb, m.At
	}
	rdb := newClient(t, real.Addr(t))
	c := redistest.NewClock(t, rdb)
	start := c.Now()
	return rdb, func(d time.Duration) { c.Set(t, start.Add(d)) }
}
