module github.com/slidelog/slidelog/contrib/grpclimit

// "go 1.24.0", not the "go 1.24" of the library and the other modules: the
// same language and the same oldest Go (1.24.0), but an importer whose
// go.mod says "go 1.24" finds it raised to "go 1.24.0". gRPC v1.79.3 says
// so, and it is the lowest gRPC this module accepts: it is the first with
// the fix for GO-2026-4762 (CVE-2026-33186): before it, a call whose :path
// lacked its leading slash reached interceptors under a name that no
// per-method rule matches, and a method named in Options.Methods would be
// decided as if it were not (unlimited, or under Options.Limit). The
// newest gRPC that keeps "go 1.24" (v1.75.1, "go 1.23.0") lacks that fix,
// and every gRPC from v1.76.0 says "go 1.24.0" anyway, so an importer on a
// current gRPC already has this line. v1.81.0 and later need Go 1.25.
// genproto's googleapis/rpc (RetryInfo) and protobuf: the versions gRPC
// v1.79.3 requires.
// The library at a released version (no replace: it would be ignored by
// the module's importers): `go get github.com/slidelog/slidelog/contrib/grpclimit@vX`
// resolves exactly that. Local development builds against the working tree
// through the repository's go.work. Releasing (docs/release.md): tag the
// library vX first, then bump this line to vX, then tag contrib/grpclimit/vX.
go 1.24.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/redis/go-redis/v9 v9.5.5
	github.com/slidelog/slidelog v0.1.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251202230838-ff82c1b0f217
	google.golang.org/grpc v1.79.3
	google.golang.org/protobuf v1.36.10
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	golang.org/x/net v0.48.0 // indirect
	golang.org/x/sys v0.39.0 // indirect
	golang.org/x/text v0.32.0 // indirect
)
