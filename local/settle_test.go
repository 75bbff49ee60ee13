package local_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/local"
)

// Many goroutines admit, settle and charge one key at once: it holds
// exactly what every admission finally cost; a Handle copied and settled
// from several goroutines settles once.
func TestSettleConcurrent(t *testing.T) {
	l := local.New()
	ctx := context.Background()
	lim := slidelog.PerHour(1_000_000)
	const workers, each = 16, 200
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				a, err := l.AllowN(ctx, "k", lim, 50)
				if err == nil && !a.Allowed {
					err = errors.New("denied")
				}
				if err == nil {
					_, err = l.Settle(ctx, a.Handle(), 20+(w+i)%61)
				}
				if err == nil {
					_, err = l.Charge(ctx, "k", 3, lim)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// one Handle, settled from every goroutine at once: once
	shared, err := l.AllowN(ctx, "k", lim, 100)
	if err != nil || !shared.Allowed {
		t.Fatal(shared, err)
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Settle(ctx, shared.Handle(), w); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := 0
	for w := range workers {
		for i := range each {
			want += 20 + (w+i)%61 + 3
		}
	}
	r, err := l.Peek(ctx, "k", lim)
	if err != nil {
		t.Fatal(err)
	}
	// the shared admission was settled once, to one of 0..workers-1
	if used := lim.Events - r.Remaining - want; used < 0 || used >= workers {
		t.Fatalf("after %d settles and charges: %d remaining; want %d less one settle of the shared admission to 0..%d", workers*each, r.Remaining, lim.Events-want, workers-1)
	}
}

// Settle's bad input, and a Handle of another limiter.
func TestSettleBadInput(t *testing.T) {
	c := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := local.New(local.WithClock(func() time.Time { return c }))
	ctx := context.Background()
	lim := slidelog.PerMinute(10)
	a, err := l.AllowN(ctx, "k", lim, 2)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		err  error
		want error
	}{
		"below 0":            {func() error { _, err := l.Settle(ctx, a.Handle(), -1); return err }(), slidelog.ErrInvalidN},
		"over the limit":     {func() error { _, err := l.Settle(ctx, a.Handle(), 11); return err }(), slidelog.ErrExceedsLimit},
		"the zero Handle":    {func() error { _, err := l.Settle(ctx, slidelog.Handle{}, 1); return err }(), slidelog.ErrInvalidN},
		"another limiter's":  {func() error { _, err := local.New().Settle(ctx, a.Handle(), 1); return err }(), slidelog.ErrInvalidN},
		"a Charge of 0":      {func() error { _, err := l.Charge(ctx, "k", 0, lim); return err }(), slidelog.ErrInvalidN},
		"a Charge of none":   {func() error { _, err := l.Charge(ctx, "k", 1); return err }(), slidelog.ErrInvalidLimit},
		"a Charge of no key": {func() error { _, err := l.Charge(ctx, "", 1, lim); return err }(), slidelog.ErrEmptyKey},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v; want %v", name, c.err, c.want)
		}
	}
	if r, err := l.Peek(ctx, "k", lim); err != nil || r.Remaining != 8 {
		t.Fatalf("after the refusals: %+v, %v; want 8 left (nothing written)", r, err)
	}
}
