package ratefields

import (
	"context"
	"sync"

	"github.com/slidelog/slidelog"
)

// Admission is what a middleware's Settle (httplimit's, grpclimit's) needs
// of a request or call it admitted: its Handles (one, or one per rule that
// applied) under their policy names, settled once.
type Admission struct {
	// Settler settles the Handles; nil when nothing can be settled (the
	// Limiter is no slidelog.Settler, or a policy admitted without
	// recording: FailOpen, shadow mode).
	Settler slidelog.Settler

	names   []string
	handles []slidelog.Handle
	mu      sync.Mutex
	settled bool
}

// NewAdmission is the admission of results under limiter, each under its
// policy name (an RFC 8941 string).
func NewAdmission(limiter any, names []string, results []slidelog.Result) *Admission {
	a := &Admission{names: names, handles: make([]slidelog.Handle, len(results))}
	a.Settler, _ = limiter.(slidelog.Settler)
	for i, res := range results {
		a.handles[i] = res.Handle()
		if a.handles[i] == (slidelog.Handle{}) {
			a.Settler = nil // a degraded admission recorded nothing
		}
	}
	return a
}

// Settle settles every Handle to actual, each tried, on a context without
// ctx's cancellation (what was used stays used when the client left):
// each one's RateLimit item after it, the Results, and the first error.
// Once settled, it does nothing and returns no item and no error. a.Settler
// must not be nil.
func (a *Admission) Settle(ctx context.Context, actual int) (items []string, results []slidelog.Result, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.settled {
		return nil, nil, nil
	}
	ctx = context.WithoutCancel(ctx)
	items, results = make([]string, len(a.handles)), make([]slidelog.Result, len(a.handles))
	for i, h := range a.handles {
		res, e := a.Settler.Settle(ctx, h, actual)
		if e != nil && err == nil {
			err = e
		}
		results[i], items[i] = res, State(a.names[i], res)
	}
	if err != nil {
		return nil, nil, err
	}
	a.settled = true
	return items, results, nil
}
