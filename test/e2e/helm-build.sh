#!/usr/bin/env bash
# Builds Helm from its Go module into the same cache root as the Kubernetes
# build (k8s-build.sh): Helm is not a Debian package, and its release
# binaries cannot be downloaded here, so it is compiled once and reused.
#
#   test/e2e/helm-build.sh [version]    # prints the path of the helm binary
#
# Cache: $CXLKV_CACHE/helm/<version>/bin/helm (CXLKV_CACHE defaults to
# ${XDG_CACHE_HOME:-$HOME/.cache}/cxlkv, as for k8s-build.sh), keyed by
# version. A flock serialises two clones building at once (the second waits
# and reuses the first one's binary). The version's module must be one
# the Go module proxy serves; v3.22.0 is built against k8s.io/client-go
# v0.37.0, the same minor release as the test control plane.

HELM_DEFAULT_VERSION=v3.22.0

helm_cache_dir() { echo "${CXLKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cxlkv}/helm/$1"; }

_helm_go() { PATH=/usr/local/go/bin:$PATH GOTOOLCHAIN=local GOFLAGS=-buildvcs=false nice -n 10 go "$@"; }

helm_build() {  # <version>; echoes the helm binary's path
  local v=${1:-$HELM_DEFAULT_VERSION}
  [[ $v =~ ^v3\.([0-9]+)\.([0-9]+)$ ]] || {
    echo "helm-build: bad version $v (want v3.MINOR.PATCH)" >&2; return 2; }
  local root; root=$(helm_cache_dir "$v")
  mkdir -p "$root/bin"
  (
    flock 9
    _helm_build_locked "$v" "$root"
  ) 9>"$root/.build.lock"
}

_helm_build_locked() {  # <version> <cache root>
  local v=$1 root=$2 bin=$2/bin
  if [ -x "$bin/helm" ] && [ -f "$bin/.complete" ]; then
    echo "$bin/helm"; return 0
  fi
  local t0=$SECONDS
  rm -f "$bin/.complete" "$bin/helm"
  echo "helm-build: building Helm $v from its Go module into $bin" >&2
  # The version string `helm version` prints comes from ldflags, as Helm's
  # own Makefile sets it; the lint rules' Kubernetes version is the
  # client-go minor release Helm was built against (0.37 -> 1.37).
  local p=helm.sh/helm/v3
  local ld="-s -w -X $p/internal/version.version=$v -X $p/internal/version.gitTreeState=clean"
  ld+=" -X $p/internal/version.gitCommit=module-$v"
  ld+=" -X $p/pkg/lint/rules.k8sVersionMajor=1 -X $p/pkg/lint/rules.k8sVersionMinor=37"
  ld+=" -X $p/pkg/chartutil.k8sVersionMajor=1 -X $p/pkg/chartutil.k8sVersionMinor=37"
  # `go install module@version` builds outside any workspace, honouring the
  # module's own go.mod and go.sum (checked against the checksum database).
  if ! GOBIN="$bin" _helm_go install -ldflags "$ld" "$p/cmd/helm@$v" >"$root/build.log" 2>&1; then
    tail -30 "$root/build.log" >&2
    echo "helm-build: Helm $v build failed (log: $root/build.log)" >&2
    return 1
  fi
  "$bin/helm" version --short >/dev/null || { echo "helm-build: built helm does not run" >&2; return 1; }
  touch "$bin/.complete"
  echo "helm-build: Helm $v ready in $((SECONDS - t0))s" >&2
  echo "$bin/helm"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  helm_build "${1:-${HELM_VERSION:-$HELM_DEFAULT_VERSION}}"
fi
