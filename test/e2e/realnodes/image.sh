#!/usr/bin/env bash
# The real nodes' two images as OCI archives for `ctr images import`, cached:
#
#   test/e2e/realnodes/image.sh <build/bin dir>   # prints two lines: NAME=ARCHIVE
#
#   docker.io/cxlkv/cxlkv-dra:<chart appVersion>  deployments/images/Dockerfile's
#       runtime stage run as written in a debootstrap tree
#       (deployments/images/rootfs-build.py), its build stage given as the
#       host's own build (--prebuilt build=...: /out/ holds the four binaries
#       of <build/bin dir>, stripped as the Dockerfile strips them; the host is
#       the same Debian release with the same -dev packages). Compiling inside
#       the tree is the images stage's job (--full, about 23 min cold).
#   cxlkv.local/e2e/pause:1  the pod sandbox: test/e2e/realnodes/pause.c, static.
#
# Cache: $CXLKV_CACHE/realnodes/images/<key>.tar, the key a hash of the
# inputs (binaries, Dockerfile, the two scripts); older archives are removed.
# Root only (rootfs-build.py chroots). Cold: debootstrap once per machine
# (about 2 min), then about 1 min (the runtime stage's apt-get, the layer);
# warm: a hash of the binaries, about 2 s.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
BIN=${1:?usage: image.sh <build/bin dir>}
CACHE=${CXLKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cxlkv}/realnodes/images
mkdir -p "$CACHE"
BINS=(cxlkv-dra-controller cxlkv-dra-kubeletplugin cxlkv-hostd cxlkv)
for b in "${BINS[@]}"; do [ -x "$BIN/$b" ] || { echo "image.sh: $BIN/$b missing (build it first)" >&2; exit 1; }; done
APP=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$ROOT/deployments/helm/cxlkv/Chart.yaml")
[ -n "$APP" ] || { echo "image.sh: no appVersion in the chart" >&2; exit 1; }
CXLKV_REF=docker.io/cxlkv/cxlkv-dra:$APP
PAUSE_REF=cxlkv.local/e2e/pause:1

(
  flock 9
  key=$( (cat "${BINS[@]/#/$BIN/}" "$ROOT/deployments/images/Dockerfile" "$ROOT/deployments/images/rootfs-build.py" \
          "$HERE/oci-image.py"; echo "$CXLKV_REF") | sha256sum | cut -c1-16)
  pkey=$( (cat "$HERE/pause.c" "$HERE/oci-image.py"; echo "$PAUSE_REF") | sha256sum | cut -c1-16)
  if [ ! -f "$CACHE/cxlkv-$key.tar" ]; then
    t0=$SECONDS
    W=$(mktemp -d "$CACHE/work.XXXXXX")
    trap 'rm -rf "$W"' EXIT
    mkdir -p "$W/build/out"
    for b in "${BINS[@]}"; do strip --strip-debug -o "$W/build/out/$b" "$BIN/$b"; done
    python3 "$ROOT/deployments/images/rootfs-build.py" --prebuilt build="$W/build" --out "$W/tree" >&2
    python3 "$HERE/oci-image.py" --tree "$W/tree" --summary "$W/tree.json" --name "$CXLKV_REF" \
      --out "$CACHE/cxlkv-$key.tar.tmp" >&2
    rm -f "$CACHE"/cxlkv-*.tar
    mv "$CACHE/cxlkv-$key.tar.tmp" "$CACHE/cxlkv-$key.tar"
    rm -rf "$W"; trap - EXIT
    echo "image.sh: $CXLKV_REF built in $((SECONDS - t0)) s" >&2
  fi
  if [ ! -f "$CACHE/pause-$pkey.tar" ]; then
    P=$(mktemp -d "$CACHE/pause.XXXXXX")
    gcc -O2 -static -s -o "$P/pause" "$HERE/pause.c"
    python3 "$HERE/oci-image.py" --tree "$P" --name "$PAUSE_REF" --entrypoint '["/pause"]' --user 65535:65535 \
      --out "$CACHE/pause-$pkey.tar.tmp" >&2
    rm -f "$CACHE"/pause-*.tar
    mv "$CACHE/pause-$pkey.tar.tmp" "$CACHE/pause-$pkey.tar"
    rm -rf "$P"
  fi
  echo "$CXLKV_REF=$CACHE/cxlkv-$key.tar"
  echo "$PAUSE_REF=$CACHE/pause-$pkey.tar"
) 9>"$CACHE/.lock"
