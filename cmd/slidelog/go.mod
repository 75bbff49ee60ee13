module github.com/slidelog/slidelog/cmd/slidelog

// "go 1.24.0", not "go 1.24": the rls command needs gRPC (v1.79.3, the
// first with the fix for GO-2026-4762, as contrib/grpclimit) and
// go-control-plane's envoy module (v1.37.0, the newest that keeps Go 1.24),
// which say so: the same language and the same oldest Go.
go 1.24.0

// The library at a released version (no replace: go install refuses a module
// with one): `go install github.com/slidelog/slidelog/cmd/slidelog@vX` builds
// with exactly that. Local development builds against the working tree
// through the repository's go.work. Releasing (docs/release.md): tag the
// library vX first, then bump this line to vX, then tag cmd/slidelog/vX.
// contrib/envoyrls (the rls command) at the same version, tagged before the CLI.
// go-redis: the newest v9 that still declares go 1.24 (v9.23.0 needs 1.26).
require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/envoyproxy/go-control-plane v0.14.0
	github.com/envoyproxy/go-control-plane/envoy v1.37.0
	github.com/envoyproxy/go-control-plane/ratelimit v0.1.0
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/google/uuid v1.6.0
	github.com/redis/go-redis/v9 v9.22.0
	github.com/slidelog/slidelog v0.1.0
	github.com/slidelog/slidelog/contrib/envoyrls v0.1.0
	google.golang.org/grpc v1.79.3
)

require (
	cel.dev/expr v0.25.1 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/cncf/xds/go v0.0.0-20251210132809-ee656c7534f5 // indirect
	github.com/envoyproxy/protoc-gen-validate v1.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	github.com/prometheus/client_golang v1.23.2 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.66.1 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/net v0.48.0
	golang.org/x/sys v0.39.0 // indirect
	golang.org/x/text v0.32.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20251202230838-ff82c1b0f217 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251202230838-ff82c1b0f217 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
)
