// Package denycache is the exact deny cache (WithDenyCache): the last
// denial of one event Redis gave a key, answered locally while it holds.
// L is the limit a denial was given under (the root's Limit): a request
// under another limit is never answered from it.
package denycache

import (
	"hash/maphash"
	"sync"
	"time"
)

// Answer is what a denial says, as the Limiter answers it: the events that
// could still be admitted (none, for a denial of one event), when the same
// request fits and when the window empties, and the server time of the
// decision (µs).
type Answer struct {
	Remaining  int
	RetryAfter time.Duration
	ResetAfter time.Duration
	At         int64
}

// Cache remembers, per key, the last denial Redis gave and until when
// it holds, so that a flood of requests for a full window is answered
// without asking Redis again.
//
// It is exact, not a guess, and so it keeps only denials of one event: Redis
// denied one event at its time t because the window was full until
// t+RetryAfter; a full window admits nothing, of any size, from any
// instance, before then, and nothing but a removal (Reset, or a refund)
// frees it early. The request was sent at local time sent, no later than t,
// so until sent+RetryAfter Redis would deny the same request too, with the
// same Remaining (0). Its reply arrived at local time received, no earlier
// than t, so a cached answer's server time is at least t plus the time
// passed since received: that is its Time (never ahead of Redis' clock), and
// its RetryAfter and ResetAfter are shortened by the same time, so that they
// still end at the instants Redis named. A denial of n > 1 events proves less: a window with room for fewer
// than n may admit smaller requests meanwhile, which moves the answer for n
// later, and a larger request waits for a later event than the one Redis
// named; those are always asked of Redis. The local clock only measures the
// elapsed time since sent (Go's monotonic clock): clocks of different
// machines never meet.
type Cache[L comparable] struct {
	now    func() time.Time // the clock New was given (the Limiter's: time.Now)
	seed   maphash.Seed
	shards [64]shard[L]
}

type shard[L comparable] struct {
	mu      sync.Mutex
	epoch   uint64 // counts forgets: a denial sent before one is not recorded
	m       map[string]denial[L]
	flights map[string]*Flight[L] // the Redis call in flight for a key, if any
	sweep   int                   // the size at which the shard next drops its expired denials
}

// Flight is one Redis call for a key that the cache could not answer.
// Calls of one event for the same key, under the same limit, that miss the
// cache meanwhile wait for it instead of asking Redis too: if Redis denies
// the first, the denial covers them (the cache answers them); if it admits,
// each asks Redis itself. When a remembered denial
// expires under a flood, an instance thus sends one call, not one per
// waiting goroutine.
type Flight[L comparable] struct {
	limit   L
	done    chan struct{}
	waiters int // callers waiting for it (under the shard's lock)
}

// denial is Redis' answer to a request for one event sent at sent, whose
// reply arrived at received.
type denial[L comparable] struct {
	limit    L
	sent     time.Time
	received time.Time
	res      Answer
}

// sweepAt is the least size at which a shard drops its expired denials;
// after a sweep, the next waits for twice what was left, so that sweeping
// costs O(1) per record however many denials are live.
const sweepAt = 4096

func New[L comparable](now func() time.Time) *Cache[L] {
	d := &Cache[L]{now: now, seed: maphash.MakeSeed()}
	for i := range d.shards {
		d.shards[i].m = map[string]denial[L]{}
		d.shards[i].flights = map[string]*Flight[L]{}
		d.shards[i].sweep = sweepAt
	}
	return d
}

func (d *Cache[L]) shard(key string) *shard[L] {
	return &d.shards[maphash.String(d.seed, key)%uint64(len(d.shards))]
}

// Lookup answers a request locally if a remembered denial still covers it.
// stale reports a denial that covered it until now: the moment when every
// waiting caller would ask Redis at once, so they share one call (Join).
func (d *Cache[L]) Lookup(key string, limit L, n int, now time.Time) (r Answer, ok, stale bool) {
	s := d.shard(key)
	s.mu.Lock()
	e, found := s.m[key]
	s.mu.Unlock()
	if !found || e.limit != limit || n != 1 {
		return Answer{}, false, false
	}
	// Whole microseconds since the request was sent, rounded up: the
	// server's clock has moved at most this far since its denial.
	elapsed := (now.Sub(e.sent) + time.Microsecond - 1).Truncate(time.Microsecond)
	if elapsed >= e.res.RetryAfter {
		return Answer{}, false, true
	}
	// Whole microseconds since the reply arrived, rounded down: the
	// server's clock has moved at least this far since its denial.
	since := max(now.Sub(e.received), 0).Truncate(time.Microsecond)
	r = e.res
	r.RetryAfter -= since
	r.ResetAfter = max(r.ResetAfter-since, r.RetryAfter)
	r.At += since.Microseconds() // the earliest server time this instant can be
	return r, true, false
}

// Record remembers a denial of one event, sent at sent and whose reply
// arrived now (the cache's clock), and forgets the key's denial after any
// other answer.
//
// epoch is the shard's epoch when the request was sent (At): a Reset or a
// Refund since (Forget) may have freed the window after Redis answered, so
// such a denial is not remembered.
func (d *Cache[L]) Record(key string, limit L, n int, sent time.Time, epoch uint64, allowed bool, r Answer) {
	received := d.now()
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if allowed || r.RetryAfter <= 0 || n != 1 || s.epoch != epoch {
		delete(s.m, key)
		return
	}
	if len(s.m) >= s.sweep {
		now := received
		for k, e := range s.m {
			if !now.Before(e.sent.Add(e.res.RetryAfter)) {
				delete(s.m, k)
			}
		}
		s.sweep = max(sweepAt, 2*len(s.m))
	}
	s.m[key] = denial[L]{limit: limit, sent: sent, received: received, res: r}
}

// Forget drops the key's denial (Reset, Refund).
func (d *Cache[L]) Forget(key string) {
	s := d.shard(key)
	s.mu.Lock()
	delete(s.m, key)
	s.epoch++
	s.mu.Unlock()
}

// At is the shard's epoch for key now, for Record.
func (d *Cache[L]) At(key string) uint64 {
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// Join returns the flight to wait for (leader false), or starts one that
// the caller leads (leader true) and must land. Only calls of one event
// share flights.
func (d *Cache[L]) Join(key string, limit L, n int) (f *Flight[L], leader bool) {
	if n != 1 {
		return nil, false
	}
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.flights[key]; f != nil {
		if f.limit == limit {
			f.waiters++
			return f, false
		}
		return nil, false // in flight, but its answer would not cover this call
	}
	f = &Flight[L]{limit: limit, done: make(chan struct{})}
	s.flights[key] = f
	return f, true
}

// Land ends a flight: its answer is recorded, its waiters go on.
func (d *Cache[L]) Land(key string, f *Flight[L]) {
	s := d.shard(key)
	s.mu.Lock()
	if s.flights[key] == f {
		delete(s.flights, key)
	}
	s.mu.Unlock()
	close(f.done)
}

// Now is the cache's clock.
func (d *Cache[L]) Now() time.Time { return d.now() }

// Done is closed once the flight has landed.
func (f *Flight[L]) Done() <-chan struct{} { return f.done }

// Waiters is how many callers wait for the flight of key now.
func (d *Cache[L]) Waiters(key string) int {
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.flights[key]; f != nil {
		return f.waiters
	}
	return 0
}
