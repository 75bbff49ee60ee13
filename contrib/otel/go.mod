module github.com/slidelog/slidelog/contrib/otel

go 1.24

// The library at a released version (no replace: it would be ignored by the
// adapter's importers): `go get github.com/slidelog/slidelog/contrib/otel@vX`
// resolves exactly that. Local development builds against the working tree
// through the repository's go.work. Releasing (docs/release.md): tag the
// library vX first, then bump this line to vX, then tag contrib/otel/vX.
// OpenTelemetry v1.21.0: the first with a stable metrics SDK (the manual
// reader of the tests), whose API already has the histogram's bucket advice;
// the lowest, so that the adapter never raises an importer's OpenTelemetry.
// Its go line (1.20) keeps importers on Go 1.24: v1.39.0 and later say
// "go 1.24.0" or newer, which would raise an importer's "go 1.24". The SDK
// (sdk/metric, sdk) is imported by the tests alone: an importer's build never
// includes it, nor its advisories on resource detection (GO-2026-4394, fixed
// in v1.40.0; the BSD one in v1.43.0, which needs Go 1.25).
require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/redis/go-redis/v9 v9.5.5
	github.com/slidelog/slidelog v0.1.0
	go.opentelemetry.io/otel v1.21.0
	go.opentelemetry.io/otel/metric v1.21.0
	go.opentelemetry.io/otel/sdk/metric v1.21.0
)

require (
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/go-logr/logr v1.3.0 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.opentelemetry.io/otel/sdk v1.21.0 // indirect
	go.opentelemetry.io/otel/trace v1.21.0 // indirect
	golang.org/x/sys v0.14.0 // indirect
)
