#!/usr/bin/env bash
# Prepares .deps/ on a development machine (where scripts/setup.sh installed
# the Debian -dev packages) for a GPU machine that has CUDA, CMake and a
# compiler but none of those packages: GoogleTest's source, nlohmann_json's
# headers and CMake config, and pkgconf. scripts/gpu.sh uses what it finds
# there. .deps/ is not committed (ignored via .git/info/exclude); carry it.
#
#   scripts/gpu-deps.sh        # then copy the tree with .deps/ to the GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
D=.deps
rm -rf "$D"
mkdir -p "$D/prefix/include" "$D/prefix/share/cmake" "$D/bin" "$D/lib"
cp -r /usr/src/googletest "$D/googletest"
cp -r /usr/include/nlohmann "$D/prefix/include/"
cp -r /usr/share/cmake/nlohmann_json "$D/prefix/share/cmake/"
cp /usr/bin/pkgconf "$D/bin/pkg-config"
cp -L /usr/lib/x86_64-linux-gnu/libpkgconf.so.3 "$D/lib/"
grep -qx '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
du -sh "$D"
