module github.com/slidelog/slidelog/contrib/prometheus

go 1.24

// The library at a released version (no replace: it would be ignored by the
// adapter's importers): `go get github.com/slidelog/slidelog/contrib/prometheus@vX`
// resolves exactly that. Local development builds against the working tree
// through the repository's go.work. Releasing (docs/release.md): tag the
// library vX first, then bump this line to vX, then tag contrib/prometheus/vX.
// client_golang v1.23.2: the newest whose go line (1.23) keeps the adapter's
// importers on Go 1.24 (v1.24 needs 1.25, v1.25 needs 1.26).
require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/prometheus/client_golang v1.23.2
	github.com/redis/go-redis/v9 v9.5.5
	github.com/slidelog/slidelog v0.1.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.66.1 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/sys v0.35.0 // indirect
	google.golang.org/protobuf v1.36.8 // indirect
)
