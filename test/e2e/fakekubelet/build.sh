#!/usr/bin/env bash
# Builds cxlkv-fakekubelet (kubelet's plugin manager and DRA manager from
# k8s.io/kubernetes, plus the reference CDI library) into the Kubernetes
# build cache, beside the control-plane binaries of test/e2e/k8s-build.sh:
#
#   test/e2e/fakekubelet/build.sh     # prints the binary's path on success
#
# Keyed by a hash of this module's sources, which is also in the binary's
# name: worktrees with different sources share the cache without rebuilding
# over each other's binary (the three newest are kept). The Go build cache
# makes a rebuild after the Kubernetes build take seconds (cold: about 2 min
# on 2 cores).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../k8s-build.sh"
v=v1.37.2  # the release go.mod pins
root=$(k8s_cache_dir "$v")
mkdir -p "$root/bin"
sum=$(cat "$here"/*.go "$here"/go.mod "$here"/go.sum | sha256sum | cut -c1-16)
out=$root/bin/cxlkv-fakekubelet-$sum
(
  flock 9
  if [ ! -x "$out" ]; then
    echo "fakekubelet: building $out" >&2
    (cd "$here" && _k8s_go_build "$root/build-fakekubelet.log" -ldflags "-s -w" -o "$out.tmp" .) || {
      echo "fakekubelet: build failed (log: $root/build-fakekubelet.log)" >&2; exit 1; }
    mv "$out.tmp" "$out"
    # shellcheck disable=SC2012
    ls -t "$root"/bin/cxlkv-fakekubelet-* | tail -n +4 | xargs -r rm -f
  fi
  touch "$out"
) 9>"$root/.fakekubelet.lock"
echo "$out"
