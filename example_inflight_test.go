package slidelog_test

import (
	"context"
	"fmt"
	"time"

	"github.com/slidelog/slidelog"
)

// At most 2 exports of a tenant run at once, across every instance. A
// holder releases its slot when done; one that dies frees it 30 s after it
// took it.
func ExampleLimiter_Acquire() {
	mr, rdb := server()
	defer mr.Close()
	limiter := slidelog.New(rdb)
	ctx := context.Background()
	exports := slidelog.InFlight(2, 30*time.Second)

	export := func(tenant string) {
		lease, err := limiter.Acquire(ctx, "export:"+tenant, exports)
		if err != nil {
			fmt.Println("redis failed:", err)
			return
		}
		if !lease.Allowed {
			fmt.Printf("busy: a slot frees within %v\n", lease.RetryAfter)
			return
		}
		// Release even if the caller's context ends: the slot must come back.
		defer func() { _ = lease.Release(context.WithoutCancel(ctx)) }()
		fmt.Printf("exporting, %d slot(s) left\n", lease.Remaining)
	}

	// Two exports that hold their slots (they never release: they died).
	for range 2 {
		if _, err := limiter.Acquire(ctx, "export:acme", exports); err != nil {
			panic(err)
		}
	}
	export("acme")  // both slots are held
	export("other") // another tenant has slots of its own

	mr.SetTime(noon.Add(30 * time.Second)) // the dead holders' leases end
	export("acme")
	export("acme") // the export before released its slot
	// Output:
	// busy: a slot frees within 30s
	// exporting, 1 slot(s) left
	// exporting, 1 slot(s) left
	// exporting, 1 slot(s) left
}

// A holder that may outlive its lease renews it while it works: a renewal
// moves its slot to now, so the slot frees a lease after the last renewal,
// never while the holder is alive.
func ExampleLease_Renew() {
	mr, rdb := server()
	defer mr.Close()
	limiter := slidelog.New(rdb)
	ctx := context.Background()
	jobs := slidelog.InFlight(1, time.Minute)

	lease, err := limiter.Acquire(ctx, "job:nightly", jobs)
	if err != nil || !lease.Allowed {
		panic(fmt.Sprint(lease.Allowed, err))
	}
	for i := 1; i <= 3; i++ { // the job runs on, and renews every 50 s
		mr.SetTime(noon.Add(time.Duration(i) * 50 * time.Second))
		if lease, err = lease.Renew(ctx); err != nil {
			fmt.Println("lost the slot:", err)
			return
		}
	}
	other, _ := limiter.Acquire(ctx, "job:nightly", jobs)
	fmt.Printf("renewed at %v; another run: allowed=%v, retry in %v\n",
		lease.Time().Sub(noon), other.Allowed, other.RetryAfter)

	mr.SetTime(noon.Add(10 * time.Minute)) // the holder stopped renewing: its lease ran out
	_, err = lease.Renew(ctx)
	fmt.Println(err)
	// Output:
	// renewed at 2m30s; another run: allowed=false, retry in 1m0s
	// slidelog: lease not held: its lease ran out, or it was released
}
