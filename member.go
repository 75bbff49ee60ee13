package slidelog

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/google/uuid"
)

// An event's id (its member in the sorted set) is 8 bytes: a 3-byte prefix
// drawn at random once per process, then a 5-byte big-endian counter that
// starts at a random value. Ids are unique within a process until the
// counter wraps (2^40 events), and two processes collide only if their
// random prefixes and counter ranges meet on one key within one window.
//
// Eight bytes is what keeps a stored event at about 21-24 bytes of Redis
// memory while the key stays a listpack; a 36-character UUID costs about 55.
const (
	idLen       = 8
	idPrefixLen = 3
	counterMask = 1<<40 - 1
)

// idSource hands out blocks of consecutive event ids.
type idSource struct {
	prefix [idPrefixLen]byte
	next   atomic.Uint64
}

// ids is shared by every Limiter of the process.
var ids = newIDSource()

func newIDSource() *idSource {
	r := uuid.New() // 122 random bits from crypto/rand
	s := &idSource{}
	copy(s.prefix[:], r[:idPrefixLen])
	s.next.Store(binary.BigEndian.Uint64(r[8:]) & counterMask)
	return s
}

// reserve returns the id of the first of n consecutive events; the script
// derives the others (prefix, counter+i mod 2^40).
func (s *idSource) reserve(n int) [idLen]byte {
	return idAt(s.prefix, s.next.Add(uint64(n))-uint64(n))
}

// idAt is the id with the prefix and the counter c (mod 2^40): the one
// encoding the client, Refund and the script's derivation agree on.
func idAt(prefix [idPrefixLen]byte, c uint64) (id [idLen]byte) {
	c &= counterMask
	copy(id[:], prefix[:])
	id[3] = byte(c >> 32)
	binary.BigEndian.PutUint32(id[4:], uint32(c))
	return id
}

// idArg is a call's first event id as sent to Redis. go-redis writes a
// command's arguments anew for every attempt (a retry after a timeout, a
// Cluster redirect, the EVAL after NOSCRIPT), so the second write on marks
// the id with a ninth byte: the script then knows the call may have run
// before and looks for its own events; a first attempt never pays for it.
// That go-redis behaviour is pinned by TestGoRedisWritesArgumentsPerAttempt
// (on every go-redis the module allows: see go.mod). Were a retry ever
// unmarked, ZADD NX would still record its events once, but an admitted
// call retried into a window it had just filled would be answered denied.
type idArg struct {
	b      [idLen + 1]byte // the id, then 'r'
	writes atomic.Int32
}

func (a *idArg) set(id [idLen]byte) {
	copy(a.b[:], id[:])
	a.b[idLen] = 'r'
}

// MarshalBinary implements encoding.BinaryMarshaler for go-redis.
func (a *idArg) MarshalBinary() ([]byte, error) {
	if a.writes.Add(1) == 1 {
		return a.b[:idLen], nil
	}
	return a.b[:], nil
}
