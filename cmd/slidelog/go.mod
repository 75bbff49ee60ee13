module github.com/slidelog/slidelog/cmd/slidelog

go 1.24

// The library at a released version (no replace: go install refuses a module
// with one): `go install github.com/slidelog/slidelog/cmd/slidelog@vX` builds
// with exactly that. Local development builds against the working tree
// through the repository's go.work. Releasing (docs/release.md): tag the
// library vX first, then bump this line to vX, then tag cmd/slidelog/vX.
// go-redis: the newest v9 that still declares go 1.24 (v9.23.0 needs 1.26).
require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/google/uuid v1.6.0
	github.com/redis/go-redis/v9 v9.22.0
	github.com/slidelog/slidelog v0.1.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
)
