#!/usr/bin/env bash
# Stage: the image's Dockerfile (deployments/images/Dockerfile) run step by
# step in debootstrap rootfs trees (deployments/images/rootfs-build.py: no
# image builder runs here, Debian's packages are reachable), then each
# entrypoint started once in the final tree:
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
cd "$CXLKV_ROOT"
passed=0; failed=0; skipped=0
ok() { echo "images: ok: $*"; passed=$((passed + 1)); }
bad() { echo "images: FAILED: $*"; failed=$((failed + 1)); }
HPID=""
finish() {
  [ -n "$HPID" ] && kill "$HPID" 2>/dev/null
  echo "images: $passed passed, $failed failed, $skipped skipped"
}
trap finish EXIT

if [ "$CXLKV_FULL" != 1 ]; then
  echo "images: debootstrap + build inside the rootfs is behind --full; skipping"
  skipped=1; exit 0
fi
if [ "$(id -u)" != 0 ]; then echo "images: needs root (chroot); skipping"; skipped=1; exit 0; fi

OUT=$(mktemp -d /tmp/cxlkv-image.XXXXXX)
if [ -n "${CXLKV_IMAGE_TREE:-}" ]; then
  # A tree rootfs-build.py already made (iterating on these checks).
  T=$CXLKV_IMAGE_TREE
  [ -d "$T" ] && [ -f "$T.json" ] || { bad "CXLKV_IMAGE_TREE=$T is not a rootfs-build.py tree"; exit 1; }
  echo "images: checking the existing tree $T"
else
  t0=$SECONDS
  if python3 deployments/images/rootfs-build.py --out "$OUT/tree"; then
    ok "Dockerfile steps ran in debootstrap trees in $((SECONDS - t0)) s"
  else bad "rootfs build"; exit 1; fi
  T=$OUT/tree
fi
in_tree() {  # in_tree <uid:gid> <cmd...>: run in the final tree
  local u=$1; shift
  unshare --mount --propagation private --fork bash -c \
    'mount --rbind /dev "$0/dev" && mount -t proc proc "$0/proc" && exec chroot --userspec="$1" "$0" "${@:2}"' \
    "$T" "$u" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp "$@"
}
BINS=(cxlkv-dra-controller cxlkv-dra-kubeletplugin cxlkv-hostd cxlkv)
for b in "${BINS[@]}"; do
  if ! in_tree 0:0 ldd "/usr/bin/$b" >"$OUT/$b.ldd" 2>&1; then bad "$b: ldd: $(tail -2 "$OUT/$b.ldd")"
  elif grep -q "not found" "$OUT/$b.ldd"; then bad "$b: $(grep "not found" "$OUT/$b.ldd" | tr '\n' ' ')"
  else ok "$b: all $(grep -c '=>' "$OUT/$b.ldd") shared libraries resolve in the runtime tree"; fi
  if in_tree 65532:65532 "/usr/bin/$b" --help >"$OUT/$b.help" 2>&1; then
    ok "$b --help as uid 65532 ($(head -1 "$OUT/$b.help" | cut -c1-70))"
  else bad "$b --help as uid 65532: $(tail -2 "$OUT/$b.help")"; fi
done
if python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))
sys.exit(0 if e["user"]=="65532:65532" and e["entrypoint"]==["/usr/bin/cxlkv-dra-controller"] else 1)' \
    "$T.json"; then ok "image user 65532, entrypoint cxlkv-dra-controller"
else bad "image user/entrypoint: $(cat "$T.json")"; fi

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
rm -rf "$T/tmp/h"; mkdir -p "$T/tmp/h/cdi" "$T/tmp/h/state" "$T/tmp/h/dev"
in_tree 0:0 /usr/bin/cxlkv-hostd --host-id image-test --listen "127.0.0.1:$PORT" \
  --cdi-dir /tmp/h/cdi --state-dir /tmp/h/state --dev-dir /tmp/h/dev --resync-interval 0 \
  >"$OUT/hostd.log" 2>&1 &
HPID=$!
end=$((SECONDS + 20))
until grep -q listening "$OUT/hostd.log" || [ $SECONDS -ge $end ]; do sleep 0.5; done
if code=$(curl -s -o "$OUT/regions.json" -w '%{http_code}' "http://127.0.0.1:$PORT/cxlkv/v1/regions") &&
   [ "$code" = 200 ]; then ok "cxlkv-hostd started in the tree answers GET /cxlkv/v1/regions: $(head -c 80 "$OUT/regions.json")"
else bad "cxlkv-hostd in the tree: HTTP ${code:-none}; $(tail -3 "$OUT/hostd.log")"; fi
kill "$HPID" 2>/dev/null; wait "$HPID" 2>/dev/null; HPID=""

if in_tree 65532:65532 /usr/bin/cxlkv-dra-controller --identity image-test \
    --fabric http://127.0.0.1:9 --kubeconfig /nonexistent >"$OUT/ctl.log" 2>&1; then
  bad "controller with no cluster exited 0"
elif grep -q "cxlkv-dra-controller: kube" "$OUT/ctl.log"; then
  ok "cxlkv-dra-controller as uid 65532 stops with: $(head -1 "$OUT/ctl.log" | cut -c1-100)"
else bad "controller: $(cat "$OUT/ctl.log")"; fi
rm -rf "$OUT"
[ -z "${CXLKV_IMAGE_TREE:-}" ] && rm -rf "${T:?}" "$T.json"
[ "$failed" -eq 0 ]
