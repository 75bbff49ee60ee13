package slidelog

import "github.com/slidelog/slidelog/internal/ids"

// Event ids (internal/ids): 8 bytes, a prefix drawn once per process and a
// counter. Every Limiter of the process takes its ids from one Source
// (ids.Process), so the ids of two Limiters never meet.
const idLen = ids.Len

// idArg is a call's first event id as sent to Redis (ids.Arg).
type idArg = ids.Arg
