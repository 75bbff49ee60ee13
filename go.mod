module github.com/slidelog/slidelog

// The lowest Go and the lowest go-redis the library works with, so that
// importing slidelog never raises an importer's go line or go-redis version
// further (a plain "go 1.24", not "go 1.24.0": an importer's "go 1.24" stays
// as it is). go-redis v9.5.5: script arguments may be pointers (v9.3.0+) and
// the fix for out-of-order replies when CLIENT SETINFO times out
// (CVE-2025-29923, fixed in v9.5.5) is in. Checked by scripts/go-versions.sh
// (tests on Go 1.24 and 1.25) and scripts/release-check.sh (an importer on
// Go 1.24), both run by .ci/run.
go 1.24

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/google/uuid v1.6.0
	github.com/redis/go-redis/v9 v9.5.5
)

require (
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
)
