#!/usr/bin/env bash
# Builds containerd 2.x (containerd, containerd-shim-runc-v2, ctr) from its Go
# module into a cache outside the clone, for the e2e real nodes
# (test/e2e/cluster.sh, CXLKV_E2E_REAL_NODES). Sourced (function
# containerd_build) or run alone:
#
#   test/e2e/containerd-build.sh [version]   # prints the bin directory on success
#
# Why a build: Debian 12's containerd is 1.6, which has no CDI support; 2.x
# applies CDI specs by default, which is what the DRA plugin's prepared claims
# rely on. runc is Debian's (scripts/setup.sh installs it).
# Cache: $CXLKV_CACHE/containerd/<version>/bin (CXLKV_CACHE as for
# k8s-build.sh), keyed by version; one builder at a time (flock).
# Build tags leave out the btrfs, devmapper and zfs snapshotters (their cgo
# headers are not installed; the nodes use overlayfs).
# Cold: about 6 min on 2 busy cores (GOFLAGS -p=2, nice); warm: 0 s.

CONTAINERD_DEFAULT_VERSION=v2.4.2

containerd_cache_dir() { echo "${CXLKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cxlkv}/containerd/$1"; }

containerd_build() {  # [version]; echoes the bin dir
  local v=${1:-$CONTAINERD_DEFAULT_VERSION}
  [[ $v =~ ^v2\.[0-9]+\.[0-9]+$ ]] || { echo "containerd-build: want a 2.x version like v2.4.2, got $v" >&2; return 2; }
  local root; root=$(containerd_cache_dir "$v")
  mkdir -p "$root/bin"
  (
    flock 9
    if [ -f "$root/bin/.complete" ]; then echo "$root/bin"; exit 0; fi
    local t0=$SECONDS m=github.com/containerd/containerd/v2
    echo "containerd-build: building containerd $v (containerd, shim, ctr) into $root/bin" >&2
    if ! (cd /tmp && PATH=/usr/local/go/bin:$PATH GOTOOLCHAIN=local GOBIN="$root/bin" \
          GOFLAGS="-buildvcs=false -p=2" nice -n 10 go install \
          -tags "no_btrfs no_devmapper no_zfs" -ldflags "-s -w -X $m/version.Version=$v" \
          "$m/cmd/containerd@$v" "$m/cmd/containerd-shim-runc-v2@$v" "$m/cmd/ctr@$v") \
          >"$root/build.log" 2>&1; then
      tail -20 "$root/build.log" >&2
      echo "containerd-build: containerd $v failed (log: $root/build.log)" >&2
      exit 1
    fi
    touch "$root/bin/.complete"
    echo "containerd-build: containerd $v ready in $((SECONDS - t0))s" >&2
    echo "$root/bin"
  ) 9>"$root/.build.lock"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  containerd_build "${1:-${CONTAINERD_VERSION:-$CONTAINERD_DEFAULT_VERSION}}"
fi
