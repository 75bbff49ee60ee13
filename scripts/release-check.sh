#!/usr/bin/env bash
# Release check: the modules, as a user gets them once tagged
# (docs/release.md), import and install on the oldest supported Go.
#
#  1. Takes a git archive of HEAD (committed files only: commit first).
#  2. Reads the release version V: the version of the library that
#     cmd/slidelog, contrib/envoyrls, contrib/prometheus, contrib/otel and
#     contrib/grpclimit require, and of contrib/envoyrls that cmd/slidelog
#     requires (they must
#     agree, be a release version and have no replace directive). With an
#     argument (scripts/release-check.sh v0.2.0), V is that version and their
#     require lines are first bumped to it, as the release does.
#  3. Serves the library at V from a file-based module proxy
#     (GOPROXY=file://..., zips made by scripts/modproxy with
#     golang.org/x/mod/zip). Then does the release's second step on the CLI
#     and the adapters: go mod tidy against that library, which may add its
#     go.sum lines but must leave go.mod as committed. Serves them at V too.
#  4. In a scratch module outside the clone whose go.mod says "go 1.24", on
#     Go 1.24 (GOTOOLCHAIN=go1.24.0, no switching to a newer Go):
#     - go get github.com/slidelog/slidelog@V, build a program importing
#       slidelog, httplimit and local; the go line must still say "go 1.24"
#       and no toolchain line may appear;
#     - go get github.com/slidelog/slidelog/contrib/prometheus@V, build with
#       it, same go line check;
#     - go get github.com/slidelog/slidelog/contrib/otel@V, build with it,
#       same go line check;
#     - go get github.com/slidelog/slidelog/contrib/grpclimit@V, build with
#       it: the one module whose go line is "go 1.24.0" (gRPC v1.79.3, the
#       first with the fix for GO-2026-4762, says so), so the importer's
#       "go 1.24" must become exactly "go 1.24.0", still on Go 1.24.0 and
#       with no toolchain line; it runs last, after the checks that the
#       other modules keep "go 1.24";
#     - go get github.com/slidelog/slidelog/contrib/envoyrls@V, build with
#       it: "go 1.24.0" too (gRPC, and go-control-plane's envoy v1.37.0);
#     - go install github.com/slidelog/slidelog/cmd/slidelog@V (refused if
#       its go.mod had a replace) and run slidelog --help.
#
# The served modules go to a private module cache that is removed at the end
# (they must never reach your module cache: a real V will be different);
# other modules come from your module cache when it has them, else from your
# GOPROXY, and are checked against the checksum database as usual
# (GONOSUMDB=github.com/slidelog only for the served ones). Go 1.24 is
# fetched once through the module proxy and kept in your module cache.
# Everything else lives in one temporary directory, removed on exit.
# Needs: git, go, network for what your module cache lacks.
# SLIDELOG_RELEASE_GO chooses the Go release (default go1.24.0).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
root=github.com/slidelog/slidelog
go_release=${SLIDELOG_RELEASE_GO:-go1.24.0}

work=$(mktemp -d "${TMPDIR:-/tmp}/slidelog-release-check.XXXXXX")
cleanup() {
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "release check failed: $*" >&2
  exit 1
}

if [ -n "$(git status --porcelain --untracked-files=no -- '*.go' '*go.mod' '*go.sum' 2>/dev/null)" ]; then
  echo "note: uncommitted changes to Go files are not checked (this checks HEAD, $(git rev-parse --short HEAD))"
fi

echo "--- git archive HEAD ($(git rev-parse --short HEAD))"
src=$work/src
mkdir -p "$src"
git archive --format=tar HEAD | tar -x -C "$src"
stamp=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)

# The modules released with the library, at its version. contrib/envoyrls
# comes before cmd/slidelog, which requires it: it is served first.
released="contrib/envoyrls cmd/slidelog contrib/prometheus contrib/otel contrib/grpclimit"

# required DIR: the version of the library DIR/go.mod requires.
required() {
  sed -nE 's#^(require[[:space:]]+)?[[:space:]]*github\.com/slidelog/slidelog[[:space:]]+(v[^[:space:]]+).*#\2#p' "$src/$1/go.mod"
}
version=$(required cmd/slidelog)
[ -n "$version" ] || fail "cmd/slidelog/go.mod does not require $root"
for m in $released; do
  [ "$(required "$m")" = "$version" ] ||
    fail "cmd/slidelog requires $root $version, $m '$(required "$m")': release them together"
done
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  fail "cmd/slidelog requires $root $version: not a release version (vMAJOR.MINOR.PATCH)"
envoyrls=$(sed -nE 's#^(require[[:space:]]+)?[[:space:]]*github\.com/slidelog/slidelog/contrib/envoyrls[[:space:]]+(v[^[:space:]]+).*#\2#p' "$src/cmd/slidelog/go.mod")
[ "$envoyrls" = "$version" ] ||
  fail "cmd/slidelog requires $root $version, $root/contrib/envoyrls '$envoyrls': release them together"
for m in $released; do
  if grep -qE '^[[:space:]]*replace([[:space:]]|\()' "$src/$m/go.mod"; then
    fail "$m/go.mod has a replace directive (go install refuses it; importers ignore it)"
  fi
done
if [ $# -gt 0 ]; then
  [[ $1 =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "$1: not a release version (vMAJOR.MINOR.PATCH)"
fi
if [ $# -gt 0 ] && [ "$1" != "$version" ]; then
  for m in $released; do
    (cd "$src/$m" && GOWORK=off go mod edit -require="$root@$1")
  done
  (cd "$src/cmd/slidelog" && GOWORK=off go mod edit -require="$root/contrib/envoyrls@$1")
  echo "release version $1 ($released require $version: bumped to $1 here, as the release does)"
  version=$1
else
  echo "release version $version (what $released require)"
fi

# The user's settings, read before this script changes them.
user_proxy=$(go env GOPROXY)
user_cache=$(go env GOMODCACHE)
# The Go release the importer is built with, fetched into the user's module
# cache once; run directly with GOTOOLCHAIN=local, so that a module needing
# a newer Go fails instead of switching.
goroot=$(cd "$work" && GOWORK=off GOTOOLCHAIN=$go_release go env GOROOT)
gobin=$goroot/bin/go

proxy=$work/proxy
export GOWORK=off GOTOOLCHAIN=local GOFLAGS=-modcacherw
export GOMODCACHE=$work/modcache
export GOPROXY="file://$proxy,file://$user_cache/cache/download,$user_proxy"
export GONOSUMDB=github.com/slidelog GOPRIVATE= GONOPROXY=
mkdir -p "$proxy" "$work/bin"
"$gobin" version

echo "--- module proxy: $root@$version"
(cd "$src/scripts/modproxy" && "$gobin" build -o "$work/modproxy" .)
"$work/modproxy" -out "$proxy" -version "$version" -time "$stamp" "$src"

echo "--- module proxy: the CLI and the adapters at $version, go mod tidy against the library at $version"
for m in $released; do
  cp "$src/$m/go.mod" "$work/go.mod.before"
  (cd "$src/$m" && "$gobin" mod tidy)
  if ! diff -u "$work/go.mod.before" "$src/$m/go.mod"; then
    fail "$m/go.mod changes with go mod tidy against $root@$version (above): tidy it (docs/release.md)"
  fi
  "$work/modproxy" -out "$proxy" -version "$version" -time "$stamp" "$src/$m"
done

# goline DIR: the go and toolchain lines of DIR/go.mod, to compare.
goline() { grep -E '^(go|toolchain)[[:space:]]' "$1/go.mod" | tr '\n' ' '; }

imp=$work/importer
mkdir -p "$imp"
cd "$imp"
printf 'module example.com/importer\n\ngo 1.24\n' >go.mod
before=$(goline "$imp")

# importer MODULE WANT [LIST...]: go get MODULE at the release version into
# the importer, whose new source file is on standard input; tidy, vet, build
# and run it. Its go.mod must then read WANT (go and toolchain lines), and
# go list -m shows MODULE and LIST.
step=0
importer() {
  local m=$1 want=$2
  shift 2
  step=$((step + 1))
  echo "--- importer (go.mod: $(goline "$imp")) on $("$gobin" env GOVERSION): go get $m@$version"
  "$gobin" get "$m@$version"
  cat >"step$step.go"
  "$gobin" mod tidy
  "$gobin" vet ./...
  "$gobin" build -o "$work/bin/importer" .
  "$work/bin/importer"
  local after
  after=$(goline "$imp")
  [ "$after" = "$want" ] ||
    fail "$m at $version changed the importer's go.mod from '$before' to '$after', not to '$want'"
  echo "importer go.mod: $after"
  "$gobin" list -m "$m" "$@"
}

importer "$root" "$before" github.com/redis/go-redis/v9 <<'GO'
// An importer of the library: a service on Go 1.24.
package main

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/httplimit"
	"github.com/slidelog/slidelog/local"
)

var (
	_ = httplimit.New
	_ = local.New
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	_ = slidelog.New(rdb, slidelog.WithPrefix("importer:"))
	fmt.Println("importer: slidelog, httplimit and local linked;", slidelog.PerSecond(10).Events, "events a second")
}
GO

importer "$root/contrib/prometheus" "$before" github.com/prometheus/client_golang <<'GO'
package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slidelog/slidelog"
	slidelogprom "github.com/slidelog/slidelog/contrib/prometheus"
)

func init() {
	hook, err := slidelogprom.New(prometheus.NewRegistry())
	if err != nil {
		panic(err)
	}
	_ = slidelog.WithHook(hook)
}
GO

importer "$root/contrib/otel" "$before" go.opentelemetry.io/otel/metric <<'GO'
package main

import (
	"github.com/slidelog/slidelog"
	slidelogotel "github.com/slidelog/slidelog/contrib/otel"
)

func init() {
	hook, err := slidelogotel.New()
	if err != nil {
		panic(err)
	}
	_ = slidelog.WithHook(hook)
}
GO

# The gRPC middleware last: it raises the importer's go line, as every gRPC
# release with the fix for GO-2026-4762 (v1.79.3) does ("go 1.24.0", the
# same language and the same oldest Go, with no toolchain line), and nothing
# else may.
importer "$root/contrib/grpclimit" "go 1.24.0 " google.golang.org/grpc <<'GO'
package main

import (
	"google.golang.org/grpc"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/grpclimit"
	"github.com/slidelog/slidelog/local"
)

func init() {
	limit := grpclimit.Options{Limiter: local.New(), Limit: slidelog.PerSecond(10), Name: "importer"}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limit)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limit)),
	)
	srv.Stop()
	_ = grpclimit.UnaryClientInterceptor(grpclimit.ClientOptions{Waiter: local.New(), Limit: slidelog.PerSecond(10), Key: "partner"})
}
GO

importer "$root/contrib/envoyrls" "go 1.24.0 " github.com/envoyproxy/go-control-plane/envoy <<'GO'
package main

import (
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/slidelog/slidelog"
	"github.com/slidelog/slidelog/contrib/envoyrls"
)

func init() {
	cfg, err := envoyrls.ParseConfig(envoyrls.File{Name: "importer.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")})
	if err != nil {
		panic(err)
	}
	srv, err := envoyrls.New(cfg, envoyrls.Options{Limiter: slidelog.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}))})
	if err != nil {
		panic(err)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	gs.Stop()
}
GO

echo "--- go install $root/cmd/slidelog@$version"
cd "$work"
GOBIN=$work/bin "$gobin" install "$root/cmd/slidelog@$version"
"$gobin" version -m "$work/bin/slidelog" | grep -E "go1\.|slidelog|go-redis"
help=$("$work/bin/slidelog" --help) || fail "slidelog --help exited with status $?"
[ -n "$help" ] || fail "slidelog --help printed nothing on standard output"
printf '%s\n' "$help" | head -5
echo "release check ok: $root, contrib/prometheus, contrib/otel, contrib/grpclimit, contrib/envoyrls and cmd/slidelog at $version import and install on $("$gobin" env GOVERSION)"
