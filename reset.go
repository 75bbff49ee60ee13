package slidelog

import "context"

// Reset forgets every event of key: its single-limit log, every AllowAll
// log and every calendar quota's count, in one atomic script (on a
// Cluster too: they share a slot). The key's in-flight slots (AcquireN) are not events of a rate: a Reset
// leaves them held, to be released or to end with their lease. A
// decision that runs after Reset sees none of them; one that ran before is
// not undone.
//
// With WithDenyCache, this instance forgets its remembered denial for the
// key; other instances go on denying until theirs expire (at most the
// RetryAfter they were given).
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	if l.deny != nil {
		l.deny.Forget(key)
	}
	base, index := l.allKeys(key)
	return wrap(ctx, "reset", resetScript.Run(ctx, l.rdb, []string{l.prefix + key, index, periodsKey(base)}, base).Err())
}
