#!/usr/bin/env bash
# Stage: the image's Dockerfile (deployments/images/Dockerfile) run step by
# step in debootstrap rootfs trees (deployments/images/rootfs-build.py: no
# image builder runs here, Debian's packages are reachable), then each
# entrypoint started once in the final tree, as the named bats tests of
# test/e2e/images.bats (its setup_file builds the tree):
#   - every binary's shared libraries resolve (ldd: nothing "not found");
#   - each binary runs as the image's user (uid 65532) and prints --help;
#   - cxlkv-hostd starts as root (what the chart runs it as), serves its API
#     on 127.0.0.1 and answers GET /cxlkv/v1/regions;
#   - cxlkv-dra-controller, as uid 65532, gets past flag parsing and stops
#     with a clear error when it has no cluster to talk to.
# Behind --full (CXLKV_FULL=1): the cold run debootstraps Debian and builds
# the binaries inside the tree (on 2 busy cores: debootstrap 120 s once;
# build-stage apt 133 s, compile 1225 s, runtime apt 19 s, checks 11 s:
# about 23 min).
# Default run: skipped, 0 s. CXLKV_IMAGE_TREE=<tree made by rootfs-build.py>
# checks that tree instead of building one.
set -uo pipefail
source "$(dirname "$0")/../lib/stage.sh"
source "$(dirname "$0")/../lib/bats.sh"
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0
if [ "$CXLKV_FULL" != 1 ]; then
  echo "images: debootstrap + build inside the rootfs is behind --full; skipping"
  skipped=1; cxlkv_bats_close images; exit 0
fi
if [ "$(id -u)" != 0 ]; then echo "images: needs root (chroot); skipping"; skipped=1; cxlkv_bats_close images; exit 0; fi
if [ -n "${CXLKV_IMAGE_TREE:-}" ] && { [ ! -d "$CXLKV_IMAGE_TREE" ] || [ ! -f "$CXLKV_IMAGE_TREE.json" ]; }; then
  echo "images: CXLKV_IMAGE_TREE=$CXLKV_IMAGE_TREE is not a tree rootfs-build.py made (no $CXLKV_IMAGE_TREE.json)"
  failed=1; cxlkv_bats_close images; exit 1
fi
cxlkv_bats images test/e2e/images.bats
cxlkv_bats_close images
