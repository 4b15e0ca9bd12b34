#!/usr/bin/env bats
# The image's Dockerfile (deployments/images/Dockerfile) run step by step in
# debootstrap rootfs trees (deployments/images/rootfs-build.py: no image
# builder runs here, Debian's packages are reachable), then each entrypoint
# started once in the final tree:
#  - every binary's shared libraries resolve (ldd: nothing "not found");
#  - each binary runs as the image's user (uid 65532) and prints --help;
#  - the image's user and entrypoint;
#  - cxlkv-hostd starts as root (what the chart runs it as), serves its API on
#    127.0.0.1 and answers GET /cxlkv/v1/regions;
#  - cxlkv-dra-controller, as uid 65532, gets past flag parsing and stops with
#    a clear error when it has no cluster to talk to.
# setup_file builds the tree (cold: about 23 min on 2 busy cores; debootstrap
# cached) unless CXLKV_IMAGE_TREE names one rootfs-build.py made. Root only
# (chroot). Run by the images stage (scripts/test.d/59-images.sh, behind
# --full); alone: `bats test/e2e/images.bats`. A failing test prints the
# tree's build log and the daemons' output.
# bats file_tags=images

ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
load lib/common  # free_port

setup_file() {
  [ "$(id -u)" = 0 ] || skip "needs root (chroot)"
  export W=$BATS_FILE_TMPDIR
  if [ -n "${CXLKV_IMAGE_TREE:-}" ]; then
    export T=$CXLKV_IMAGE_TREE
  else
    export T=$W/tree
    local t0=$SECONDS rc=0
    python3 "$ROOT/deployments/images/rootfs-build.py" --out "$T" >"$W/build.log" 2>&1 3>&- || rc=$?
    echo "$rc $((SECONDS - t0))" >"$W/build.rc"
  fi
}

teardown_file() {
  [ -z "${CXLKV_IMAGE_TREE:-}" ] && [ -n "${T:-}" ] && rm -rf "${T:?}" "$T.json"
  return 0
}

# The failure hook: the tree's build log and the daemons' output.
teardown() {
  if [ -z "${BATS_TEST_COMPLETED:-}" ] && [ -z "${BATS_TEST_SKIPPED:-}" ]; then
    local f
    for f in "$W/build.log" "$W"/*.out; do
      [ -s "$f" ] && { echo "--- $f (last 15 lines)"; tail -n 15 "$f"; }
    done
  fi
  return 0
}

# in_tree <uid:gid> <cmd...>: run in the final tree (its own mount namespace,
# /dev and /proc mounted, an empty environment but PATH and HOME); the command
# is killed if unshare dies first (--kill-child).
in_tree() {
  local u=$1; shift
  unshare --mount --propagation private --fork --kill-child bash -c \
    'mount --rbind /dev "$0/dev" && mount -t proc proc "$0/proc" && exec chroot --userspec="$1" "$0" "${@:2}"' \
    "$T" "$u" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp "$@"
}
# stop_tree <pid>: the process and its descendants, deepest first (unshare
# blocks SIGTERM while it waits for its child: the daemon must get it itself).
stop_tree() {
  local c
  for c in $(ps -o pid= --ppid "$1"); do stop_tree "$c"; done
  kill "$1" 2>/dev/null || true
}
tree_ready() {
  [ -d "$T" ] && [ -f "$T.json" ] || { echo "$T is not a rootfs-build.py tree (see the build test)"; return 1; }
}
# libraries_resolve <binary>: ldd in the tree finds every shared library.
libraries_resolve() {
  tree_ready
  in_tree 0:0 ldd "/usr/bin/$1" >"$W/$1.ldd" 2>&1 || { tail -n 2 "$W/$1.ldd"; return 1; }
  ! grep "not found" "$W/$1.ldd" || return 1
  echo "# $1: all $(grep -c '=>' "$W/$1.ldd") shared libraries resolve in the runtime tree" >&3
}
# help_as_image_user <binary>: --help as uid 65532 exits 0.
help_as_image_user() {
  tree_ready
  in_tree 65532:65532 "/usr/bin/$1" --help >"$W/$1.help" 2>&1 || { tail -n 2 "$W/$1.help"; return 1; }
  echo "# $1 --help: $(head -1 "$W/$1.help" | cut -c1-70)" >&3
}

@test "the Dockerfile's steps ran in debootstrap trees" {
  [ -z "${CXLKV_IMAGE_TREE:-}" ] || skip "CXLKV_IMAGE_TREE=$CXLKV_IMAGE_TREE: checking an existing tree"
  read -r rc secs <"$W/build.rc"
  [ "$rc" = 0 ] || { tail -n 30 "$W/build.log"; return 1; }
  echo "# the tree built in $secs s" >&3
}

# bats test_tags=ldd
@test "cxlkv-dra-controller: every shared library resolves in the runtime tree" { libraries_resolve cxlkv-dra-controller; }
# bats test_tags=help
@test "cxlkv-dra-controller --help as uid 65532" { help_as_image_user cxlkv-dra-controller; }
# bats test_tags=ldd
@test "cxlkv-dra-kubeletplugin: every shared library resolves in the runtime tree" { libraries_resolve cxlkv-dra-kubeletplugin; }
# bats test_tags=help
@test "cxlkv-dra-kubeletplugin --help as uid 65532" { help_as_image_user cxlkv-dra-kubeletplugin; }
# bats test_tags=ldd
@test "cxlkv-hostd: every shared library resolves in the runtime tree" { libraries_resolve cxlkv-hostd; }
# bats test_tags=help
@test "cxlkv-hostd --help as uid 65532" { help_as_image_user cxlkv-hostd; }
# bats test_tags=ldd
@test "cxlkv: every shared library resolves in the runtime tree" { libraries_resolve cxlkv; }
# bats test_tags=help
@test "cxlkv --help as uid 65532" { help_as_image_user cxlkv; }

@test "the image's user is 65532 and its entrypoint cxlkv-dra-controller" {
  tree_ready
  jq -e '.user == "65532:65532" and .entrypoint == ["/usr/bin/cxlkv-dra-controller"]' "$T.json" ||
    { cat "$T.json"; return 1; }
}

@test "cxlkv-hostd started in the tree (as root) answers GET /cxlkv/v1/regions" {
  local port pid code end
  tree_ready
  port=$(free_port)
  rm -rf "$T/tmp/h"; mkdir -p "$T/tmp/h/cdi" "$T/tmp/h/state" "$T/tmp/h/dev"
  in_tree 0:0 /usr/bin/cxlkv-hostd --host-id image-test --listen "127.0.0.1:$port" \
    --cdi-dir /tmp/h/cdi --state-dir /tmp/h/state --dev-dir /tmp/h/dev --resync-interval 0 \
    >"$W/hostd.out" 2>&1 3>&- &
  pid=$!
  end=$((SECONDS + 20))
  until grep -q listening "$W/hostd.out" || [ $SECONDS -ge $end ]; do sleep 0.5; done
  code=$(curl -s -o "$W/regions.json" -w '%{http_code}' "http://127.0.0.1:$port/cxlkv/v1/regions") || true
  stop_tree "$pid"; wait "$pid" 2>/dev/null || true
  echo "HTTP ${code:-none}: $(head -c 80 "$W/regions.json" 2>/dev/null)"
  [ "$code" = 200 ]
}

@test "cxlkv-dra-controller as uid 65532 with no cluster stops with a clear error" {
  tree_ready
  run in_tree 65532:65532 /usr/bin/cxlkv-dra-controller --identity image-test \
    --fabric http://127.0.0.1:9 --kubeconfig /nonexistent
  echo "$output"
  [ "$status" -ne 0 ]
  [[ "$output" == *"cxlkv-dra-controller: kube"* ]]
}
