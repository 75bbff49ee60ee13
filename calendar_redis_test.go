package slidelog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/internal/denycache"
	"github.com/slidelog/slidelog/internal/ids"
	"github.com/slidelog/slidelog/internal/redistest"
)

// calendarAt sets m's clock to the instant s (RFC 3339).
func calendarAt(m *mini, s string) time.Time {
	t := utc(s)
	m.At(t.Sub(epoch))
	return t
}

// periodEnd is the end of lim's period at t.
func periodEnd(t *testing.T, lim slidelog.Limit, at time.Time) time.Time {
	t.Helper()
	_, end, ok := lim.PeriodAt(at)
	if !ok {
		t.Fatalf("%v: no period", lim)
	}
	return end
}

func mustDecide(t *testing.T, r slidelog.Result, err error, allowed bool, remaining int, retry, reset time.Duration) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if r.Allowed != allowed || r.Remaining != remaining || r.RetryAfter != retry || r.ResetAfter != reset {
		t.Fatalf("got allowed %v remaining %d retry %v reset %v, want %v %d %v %v",
			r.Allowed, r.Remaining, r.RetryAfter, r.ResetAfter, allowed, remaining, retry, reset)
	}
}

// TestCalendarTrickyDates decides on Redis at every tricky date: a quota
// counts from its period's start, a denial waits exactly until its end,
// and at the end the count is gone.
func TestCalendarTrickyDates(t *testing.T) {
	berlin, santiago, apia := mustLoad(t, "Europe/Berlin"), mustLoad(t, "America/Santiago"), mustLoad(t, "Pacific/Apia")
	ctx := context.Background()
	for _, c := range []struct {
		limit slidelog.Limit
		at    string
	}{
		{slidelog.Daily(2, berlin), "2027-03-28T10:00:00Z"},          // 23 h
		{slidelog.Daily(2, berlin), "2027-10-31T10:00:00Z"},          // 25 h
		{slidelog.Daily(2, santiago), "2026-09-06T04:00:00Z"},        // no midnight
		{slidelog.Daily(2, santiago), "2026-09-06T03:59:59.999998Z"}, // the day before it
		{slidelog.Daily(2, apia), "2011-12-29T23:00:00Z"},            // the 31st, after the skipped 30th
		{slidelog.Daily(2, apia), "2011-12-30T09:00:00Z"},            // the 29th, ending where the 31st starts
		{slidelog.Monthly(2, 31, time.UTC), "2026-02-28T23:00:00Z"},  // Feb 28 to Mar 31
		{slidelog.Monthly(2, 31, time.UTC), "2026-02-27T23:00:00Z"},  // Jan 31 to Feb 28
		{slidelog.Monthly(2, 30, time.UTC), "2026-02-28T00:00:00Z"},  // Feb 28 to Mar 30
		{slidelog.Monthly(2, 29, time.UTC), "2026-02-27T12:00:00Z"},  // Jan 29 to Feb 28
		{slidelog.Monthly(2, 29, time.UTC), "2028-02-28T12:00:00Z"},  // leap: Jan 29 to Feb 29
		{slidelog.Monthly(2, 31, time.UTC), "2028-02-29T00:00:00Z"},  // leap: Feb 29 to Mar 31
		{slidelog.Monthly(2, 30, time.UTC), "2028-02-29T12:00:00Z"},  // leap: Feb 29 to Mar 30
		{slidelog.Monthly(2, 31, berlin), "2027-04-30T21:59:59Z"},    // Mar 31 to Apr 30, in CEST
		{slidelog.Monthly(2, 1, berlin), "2027-03-31T21:00:00Z"},     // March, 23 h shorter... by one hour
		{slidelog.Monthly(2, 6, santiago), "2026-09-06T04:00:00.5Z"}, // from a day without a midnight
	} {
		m := newMini(t)
		l := slidelog.New(m.Rdb)
		now := calendarAt(m, c.at)
		end := periodEnd(t, c.limit, now)
		left := end.Sub(now)
		r, err := l.Allow(ctx, "k", c.limit)
		mustDecide(t, r, err, true, 1, 0, left)
		r, err = l.AllowN(ctx, "k", c.limit, 1)
		mustDecide(t, r, err, true, 0, 0, left)
		r, err = l.Allow(ctx, "k", c.limit)
		mustDecide(t, r, err, false, 0, left, left)
		if r.Limit != c.limit {
			t.Fatalf("%v: Result.Limit %v", c.limit, r.Limit)
		}
		m.At(end.Add(-time.Microsecond).Sub(epoch))
		r, err = l.Peek(ctx, "k", c.limit)
		mustDecide(t, r, err, false, 0, time.Microsecond, time.Microsecond)
		m.At(end.Sub(epoch))
		r, err = l.Peek(ctx, "k", c.limit)
		mustDecide(t, r, err, true, 2, 0, 0)
		r, err = l.Allow(ctx, "k", c.limit)
		mustDecide(t, r, err, true, 1, 0, periodEnd(t, c.limit, end).Sub(end))
	}
}

// TestCalendarClientClockSkew: however far this process's clock is from
// Redis' TIME, the quota counts Redis' period, exactly.
func TestCalendarClientClockSkew(t *testing.T) {
	ctx := context.Background()
	berlin := mustLoad(t, "Europe/Berlin")
	for _, skew := range []time.Duration{0, time.Hour, -time.Hour, 2 * 365 * 24 * time.Hour, -2 * 365 * 24 * time.Hour, 13 * time.Hour} {
		for _, lim := range []slidelog.Limit{slidelog.Daily(3, berlin), slidelog.Monthly(3, 31, berlin)} {
			m := newMini(t)
			l := slidelog.New(m.Rdb)
			now := calendarAt(m, "2027-03-28T21:30:00Z") // half an hour before Berlin's short day ends
			l.SetClock(func() time.Time { return m.Now().Add(skew) })
			left := periodEnd(t, lim, now).Sub(now)
			r, err := l.Allow(ctx, "k", lim)
			mustDecide(t, r, err, true, 2, 0, left)
			r, err = l.AllowAll(ctx, "k", 2, slidelog.PerSecond(5), lim)
			mustDecide(t, r, err, true, 0, 0, left)
			r, err = l.Allow(ctx, "k", lim)
			mustDecide(t, r, err, false, 0, left, left)
			if !r.Time().Equal(now) {
				t.Fatalf("skew %v: decided at %v", skew, r.Time())
			}
		}
	}
}

// TestCalendarAllowAllAtomic: a request the quota denies records nothing
// in the sliding logs, and one a sliding limit denies counts nothing in
// the quota.
func TestCalendarAllowAllAtomic(t *testing.T) {
	ctx := context.Background()
	m := newMini(t)
	l := slidelog.New(m.Rdb)
	now := calendarAt(m, "2026-02-28T23:00:00Z")
	quota := slidelog.Monthly(3, 31, time.UTC)
	left := periodEnd(t, quota, now).Sub(now) // to Mar 31
	sec := slidelog.PerSecond(2)
	r, err := l.AllowAll(ctx, "k", 2, sec, quota)
	mustDecide(t, r, err, true, 0, 0, left)
	// denied by the sliding limit: the quota keeps its count (1 left)
	r, err = l.AllowAll(ctx, "k", 1, sec, quota)
	mustDecide(t, r, err, false, 0, time.Second, left)
	if r.Limit != sec {
		t.Fatalf("denied by %v", r.Limit)
	}
	m.At(now.Add(time.Second).Sub(epoch))
	left -= time.Second
	// denied by the quota (2 asked, 1 left): nothing in the sliding log
	r, err = l.AllowAll(ctx, "k", 2, sec, quota)
	mustDecide(t, r, err, false, 1, left, left)
	if r.Limit != quota {
		t.Fatalf("denied by %v", r.Limit)
	}
	r, err = l.Peek(ctx, "k", quota)
	mustDecide(t, r, err, true, 1, 0, left)
	base, _ := l.AllKeys("k")
	if n, _ := m.Rdb.ZCard(ctx, slidelog.WindowKey(base, time.Second)).Result(); n != 2 {
		t.Fatalf("the sliding log holds %d events after the quota denied, want the first call's 2", n)
	}
	r, err = l.AllowAll(ctx, "k", 1, sec, quota)
	mustDecide(t, r, err, true, 0, 0, left)
	// two quotas of one period and location are one too many; another zone is another quota
	if _, err := l.AllowAll(ctx, "k", 1, quota, slidelog.Monthly(5, 31, time.UTC)); !errors.Is(err, slidelog.ErrInvalidLimit) {
		t.Fatalf("two equal quotas: %v", err)
	}
	r, err = l.AllowAll(ctx, "k", 1, quota, slidelog.Daily(5, time.UTC), slidelog.Monthly(5, 1, time.UTC))
	mustDecide(t, r, err, false, 0, left, left)
}

// TestCalendarBoundaryInsideOneCall: a call of several decisions whose
// periods were computed before a period's end, run by Redis after it,
// counts each in the new period.
func TestCalendarBoundaryInsideOneCall(t *testing.T) {
	ctx := context.Background()
	m := newMini(t)
	l := slidelog.New(m.Rdb)
	berlin := mustLoad(t, "Europe/Berlin")
	quota := slidelog.Daily(2, berlin)
	before := calendarAt(m, "2027-10-31T22:59:59.999999Z") // the last µs of the 25 h day
	var keys []string
	var args []any
	for range 3 {
		arg := &ids.Arg{}
		arg.Set(ids.Process().Reserve(1))
		k, a := l.AllArgsAt(false, "k", 1, before, arg, quota)
		keys, args = append(keys, k...), append(args, a...)
	}
	// the first in the old day, then the call runs in the new one
	if r, err := l.Allow(ctx, "k", quota); err != nil || r.Remaining != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	end := calendarAt(m, "2027-10-31T23:00:00Z")
	v, err := slidelog.DecideScript.Run(ctx, m.Rdb, keys, args...).Result()
	if err != nil {
		t.Fatal(err)
	}
	replies := v.([]any)
	left := periodEnd(t, quota, end).Sub(end)
	for i, want := range []struct {
		allowed   bool
		remaining int
	}{{true, 1}, {true, 0}, {false, 0}} {
		r, err := slidelog.Decode(replies[i], []slidelog.Limit{quota})
		if err != nil {
			t.Fatal(err)
		}
		retry := time.Duration(0)
		if !want.allowed {
			retry = left
		}
		mustDecide(t, r, err, want.allowed, want.remaining, retry, left)
	}
	// the next day's last µs, with the client's clock two days behind
	calendarAt(m, "2027-11-02T22:59:59.999999Z")
	l.SetClock(func() time.Time { return before })
	for i, want := range []int{1, 0} {
		r, err := l.Allow(ctx, "k", quota)
		if err != nil || !r.Allowed || r.Remaining != want || r.ResetAfter != time.Microsecond {
			t.Fatalf("decision %d: %+v %v", i, r, err)
		}
	}
}

// TestCalendarRetryCountsOnce: a re-sent admission (its id marked) finds
// its own count and is not counted again; a denial's call sent again is
// answered as before.
func TestCalendarRetryCountsOnce(t *testing.T) {
	ctx := context.Background()
	m := newMini(t)
	l := slidelog.New(m.Rdb)
	now := calendarAt(m, "2026-05-01T10:00:00Z")
	quota := slidelog.Daily(5, time.UTC)
	limits := []slidelog.Limit{quota}
	arg := &ids.Arg{}
	arg.Set(ids.Process().Reserve(2))
	keys, args := l.AllArgsAt(true, "k", 2, now, arg, limits...)
	for i := range 3 { // the first write, then two retries (marked)
		v, err := slidelog.DecideScript.Run(ctx, m.Rdb, keys, args...).Result()
		if err != nil {
			t.Fatal(err)
		}
		r, err := slidelog.Decode(v, limits)
		mustDecide(t, r, err, true, 3, 0, 14*time.Hour)
		if i == 0 {
			m.At(now.Add(time.Minute).Sub(epoch)) // a retry later: answered as of the admission's time
		}
		if !r.Time().Equal(now) {
			t.Fatalf("attempt %d answered at %v", i, r.Time())
		}
	}
}

// TestCalendarRefund: a refund gives back to the period the admission was
// counted in, once, and nothing once that period is over.
func TestCalendarRefund(t *testing.T) {
	ctx := context.Background()
	m := newMini(t)
	l := slidelog.New(m.Rdb)
	month := slidelog.Monthly(3, 31, time.UTC)
	now := calendarAt(m, "2026-02-27T12:00:00Z")
	left := periodEnd(t, month, now).Sub(now)
	a, err := l.AllowAll(ctx, "k", 2, slidelog.PerHour(10), month)
	mustDecide(t, a, err, true, 1, 0, left)
	b, err := l.Allow(ctx, "k", month)
	mustDecide(t, b, err, true, 0, 0, left)
	if err := l.Refund(ctx, a.Handle()); err != nil {
		t.Fatal(err)
	}
	if err := l.Refund(ctx, a.Handle()); err != nil { // twice: given once
		t.Fatal(err)
	}
	r, err := l.Peek(ctx, "k", month)
	mustDecide(t, r, err, true, 2, 0, left)
	r, err = l.Peek(ctx, "k", slidelog.PerHour(10))
	if err != nil || r.Remaining != 10 {
		t.Fatalf("the sliding log after the refund: %+v %v", r, err)
	}
	// the next period: b's refund gives nothing to it
	end := periodEnd(t, month, now)
	m.At(end.Sub(epoch))
	c, err := l.Allow(ctx, "k", month)
	mustDecide(t, c, err, true, 2, 0, periodEnd(t, month, end).Sub(end))
	if err := l.Refund(ctx, b.Handle()); err != nil {
		t.Fatal(err)
	}
	r, err = l.Peek(ctx, "k", month)
	mustDecide(t, r, err, true, 2, 0, periodEnd(t, month, end).Sub(end))
	if err := l.Refund(ctx, c.Handle()); err != nil {
		t.Fatal(err)
	}
	r, err = l.Peek(ctx, "k", month)
	mustDecide(t, r, err, true, 3, 0, 0)
	// a take-back of an admission whose reply was lost (its period unknown):
	// given if it is the quota's last admission
	d, err := l.Allow(ctx, "k", month)
	mustDecide(t, d, err, true, 2, 0, periodEnd(t, month, end).Sub(end))
	if err := slidelog.RefundEvents(ctx, m.Rdb, slidelog.LostPeriods(d.Handle())); err != nil {
		t.Fatal(err)
	}
	r, err = l.Peek(ctx, "k", month)
	mustDecide(t, r, err, true, 3, 0, 0)
}

// TestCalendarResetAndExpiry: Reset forgets every quota with the rest; a
// quota's count expires at its period's end, and the periods index with
// the last of its quotas'.
func TestCalendarResetAndExpiry(t *testing.T) {
	ctx := context.Background()
	m := newMini(t)
	l := slidelog.New(m.Rdb)
	now := calendarAt(m, "2026-02-28T12:00:00Z")
	day, month := slidelog.Daily(3, time.UTC), slidelog.Monthly(3, 31, time.UTC)
	for _, call := range []func() (slidelog.Result, error){
		func() (slidelog.Result, error) { return l.Allow(ctx, "k", day) },
		func() (slidelog.Result, error) { return l.AllowAll(ctx, "k", 1, slidelog.PerMinute(3), month) },
		func() (slidelog.Result, error) { return l.Allow(ctx, "k", slidelog.PerSecond(3)) },
	} {
		if r, err := call(); err != nil || !r.Allowed {
			t.Fatalf("%+v %v", r, err)
		}
	}
	base, _ := l.AllKeys("k")
	for key, end := range map[string]time.Time{
		slidelog.QuotaKey(base, day):   utc("2026-03-01T00:00:00Z"),
		slidelog.QuotaKey(base, month): utc("2026-03-31T00:00:00Z"),
		slidelog.PeriodsKey(base):      utc("2026-03-31T00:00:00Z"),
	} {
		at, err := m.Rdb.PExpireTime(ctx, key).Result()
		if err != nil || at != time.Duration(end.UnixMilli())*time.Millisecond {
			t.Errorf("%s expires at %v (%v), want %v", key, at, err, end)
		}
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Fatalf("after Reset: %q", keys)
	}
	r, err := l.Peek(ctx, "k", day)
	mustDecide(t, r, err, true, 3, 0, 0)
	_ = now
}

// TestCalendarDenyCache: a remembered denial of a quota lasts until the
// period's end, and no longer.
func TestCalendarDenyCache(t *testing.T) {
	ctx := context.Background()
	m := newMini(t)
	f := &redistest.Faulty{Client: m.Rdb}
	l := slidelog.New(f, slidelog.WithDenyCache())
	local := utc("2026-05-01T23:59:59Z")
	l.SetDenyCache(denycache.New[slidelog.Limit](func() time.Time { return local }))
	calendarAt(m, "2026-05-01T23:59:59Z")
	quota := slidelog.Daily(1, time.UTC)
	if r, err := l.Allow(ctx, "k", quota); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	r, err := l.Allow(ctx, "k", quota)
	mustDecide(t, r, err, false, 0, time.Second, time.Second)
	calls := f.Calls.Load()
	local = local.Add(time.Second - time.Microsecond)
	r, err = l.Allow(ctx, "k", quota)
	mustDecide(t, r, err, false, 0, time.Microsecond, time.Microsecond)
	if f.Calls.Load() != calls {
		t.Fatal("the cached denial asked Redis")
	}
	local = local.Add(time.Microsecond)
	calendarAt(m, "2026-05-02T00:00:00Z")
	r, err = l.Allow(ctx, "k", quota)
	mustDecide(t, r, err, true, 0, 0, 24*time.Hour)
}

// TestCalendarResetAfterInTheLastHour: an AllowAll's ResetAfter is its
// largest, so in the last hour of a day an hourly limit's outlasts the
// day's quota. TestCalendarRealRedis expected the quota's at any time of
// day, and failed when it ran at 23:00:19 in Berlin.
func TestCalendarResetAfterInTheLastHour(t *testing.T) {
	ctx := context.Background()
	berlin := mustLoad(t, "Europe/Berlin")
	for _, c := range []struct {
		at   string
		want time.Duration
	}{
		{"2026-12-01T22:00:19.73281Z", time.Hour},         // 23:00:19 in Berlin: the hour's
		{"2026-12-01T21:59:59Z", time.Hour + time.Second}, // 22:59:59: the day's
		{"2026-12-01T22:59:59.999999Z", time.Hour},        // a microsecond before midnight
		{"2026-12-01T12:00:00Z", 11 * time.Hour},          // midday: the day's
	} {
		m := newMini(t)
		l := slidelog.New(m.Rdb)
		calendarAt(m, c.at)
		r, err := l.AllowAll(ctx, "k", 2, slidelog.PerHour(10), slidelog.Daily(3, berlin))
		if err != nil || !r.Allowed || r.ResetAfter != c.want {
			t.Errorf("at %s: %+v %v, want ResetAfter %v", c.at, r, err, c.want)
		}
	}
}

// TestCalendarBadInputWritesNothing: bad calendar limits are refused
// before Redis is asked.
func TestCalendarBadInputWritesNothing(t *testing.T) {
	ctx := context.Background()
	m := newMini(t)
	f := &redistest.Faulty{Client: m.Rdb}
	l := slidelog.New(f)
	for _, c := range []struct {
		call func() error
		want error
	}{
		{func() error { _, err := l.Allow(ctx, "k", slidelog.Daily(1, nil)); return err }, slidelog.ErrInvalidLimit},
		{func() error { _, err := l.Allow(ctx, "k", slidelog.Monthly(1, 32, time.UTC)); return err }, slidelog.ErrInvalidLimit},
		{func() error { _, err := l.AllowN(ctx, "k", slidelog.Daily(2, time.UTC), 3); return err }, slidelog.ErrExceedsLimit},
		{func() error { _, err := l.AllowAll(ctx, "k", 1, slidelog.Daily(0, time.UTC)); return err }, slidelog.ErrInvalidLimit},
		{func() error { _, err := l.Acquire(ctx, "k", slidelog.Daily(2, time.UTC)); return err }, slidelog.ErrInvalidLimit},
		{func() error { _, err := l.Allow(ctx, "", slidelog.Daily(2, time.UTC)); return err }, slidelog.ErrEmptyKey},
	} {
		if err := c.call(); !errors.Is(err, c.want) {
			t.Errorf("%v, want %v", err, c.want)
		}
	}
	if f.Calls.Load() != 0 || len(m.Keys()) != 0 {
		t.Errorf("bad input reached Redis (%d calls, keys %v)", f.Calls.Load(), m.Keys())
	}
}

var _ redis.Scripter = (*redistest.Faulty)(nil)

// TestCalendarRealRedis: the script on a real redis-server, whose TIME no
// test sets: a quota counts Redis' period whatever this process's clock
// says (±1 h, ±2 years), atomically with a sliding limit; Refund gives
// back; Reset forgets.
func TestCalendarRealRedis(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	berlin := mustLoad(t, "Europe/Berlin")
	for _, skew := range []time.Duration{0, time.Hour, -time.Hour, 2 * 365 * 24 * time.Hour, -2 * 365 * 24 * time.Hour} {
		l := slidelog.New(rdb, slidelog.WithPrefix(uniqueKey(t)+":"))
		l.SetClock(func() time.Time { return time.Now().Add(skew) })
		for _, quota := range []slidelog.Limit{slidelog.Daily(3, berlin), slidelog.Monthly(3, 31, time.UTC)} {
			r, err := l.AllowAll(ctx, "k", 2, slidelog.PerHour(10), quota)
			if err != nil || !r.Allowed || r.Remaining != 1 {
				t.Fatalf("skew %v, %v: %+v %v", skew, quota, r, err)
			}
			// ResetAfter is the larger of the two: the quota's period end,
			// or, in its last hour, the hour's window of the event just
			// admitted (TestCalendarResetAfterInTheLastHour)
			_, end, _ := quota.PeriodAt(r.Time())
			if want := max(end.Sub(r.Time()), time.Hour); r.ResetAfter != want {
				t.Fatalf("skew %v, %v: ResetAfter %v at %v, want %v (until %v, or the hour)", skew, quota, r.ResetAfter, r.Time(), want, end)
			}
			d, err := l.AllowAll(ctx, "k", 2, slidelog.PerHour(10), quota)
			if err != nil || d.Allowed || d.Limit != quota || d.RetryAfter != end.Sub(d.Time()) {
				t.Fatalf("skew %v, %v: %+v %v", skew, quota, d, err)
			}
			if err := l.Refund(ctx, r.Handle()); err != nil {
				t.Fatal(err)
			}
			p, err := l.Peek(ctx, "k", quota)
			if err != nil || p.Remaining != 3 {
				t.Fatalf("after the refund: %+v %v", p, err)
			}
			if a, err := l.Allow(ctx, "k", quota); err != nil || a.Remaining != 2 {
				t.Fatalf("%+v %v", a, err)
			}
		}
		if err := l.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if keys, _ := rdb.Keys(ctx, l.Prefix()+"*").Result(); len(keys) != 0 {
			t.Fatalf("after Reset: %q", keys)
		}
	}
}
