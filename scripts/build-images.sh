#!/usr/bin/env bash
# Builds the Redis and Valkey images the integration tests start, from
# Debian's packages only (no image registry is needed):
#   slidelog/redis:6.0    Debian bullseye's redis-server (6.0)
#   slidelog/redis:7.0    Debian bookworm's redis-server (7.0)
#   slidelog/redis:8.0    Debian trixie's redis-server   (8.0)
#   slidelog/valkey:8.1   Debian trixie's valkey-server  (8.1)
# Each is a debootstrap --variant=minbase of its suite with the server
# installed in a chroot, imported with `docker import`. An image that exists
# already is kept (FORCE=1 rebuilds). Needs root, debootstrap and docker.
set -euo pipefail
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=${IMAGE_WORK:-/var/tmp/slidelog-images}
mkdir -p "$work"

have() { [ "${FORCE:-0}" != 1 ] && docker image inspect "$1" >/dev/null 2>&1; }

# rootfs SUITE PACKAGES...: a minbase root with the packages, cached in $work.
rootfs() {
  local suite=$1; shift
  local dir=$work/$suite
  if [ ! -f "$dir/.done" ]; then
    rm -rf "$dir"
    echo "--- debootstrap $suite"
    debootstrap --variant=minbase "$suite" "$dir" "$mirror" >"$work/$suite.log" 2>&1 ||
      { tail -20 "$work/$suite.log"; exit 1; }
    echo "--- apt-get install $* ($suite)"
    # apt's chatter (debconf, invoke-rc.d, no /dev/pts) goes to the suite's
    # log, shown only when the install fails
    chroot "$dir" /bin/sh -c "export DEBIAN_FRONTEND=noninteractive
      echo 'exit 101' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      apt-get install -y -qq --no-install-recommends $* && apt-get clean" >>"$work/$suite.log" 2>&1 ||
      { tail -20 "$work/$suite.log"; exit 1; }
    rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*
    touch "$dir/.done"
  fi
}

# image NAME SUITE BINARY: import the suite's root as an image that runs
# BINARY the way the official images do (CMD ["redis-server"], PATH set), so
# tests pass the same arguments to either.
image() {
  local name=$1 suite=$2 bin=$3
  if have "$name"; then
    echo "--- $name: present"
    return
  fi
  echo "--- docker import $name"
  tar -C "$work/$suite" --exclude=./.done -c . |
    docker import \
      -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      -c "CMD [\"$bin\", \"--protected-mode\", \"no\"]" \
      -c 'EXPOSE 6379' \
      - "$name" >/dev/null
  docker run --rm "$name" "$bin" --version
}

rootfs bullseye redis-server
image slidelog/redis:6.0 bullseye redis-server
rootfs bookworm redis-server
image slidelog/redis:7.0 bookworm redis-server
rootfs trixie redis-server valkey-server
image slidelog/redis:8.0 trixie redis-server
image slidelog/valkey:8.1 trixie valkey-server
