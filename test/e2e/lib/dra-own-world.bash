# A DRA world of a file's own, for the bats files that need other settings than
# the shared world of lib/dra.bash (other feature gates, a short
# bindingTimeout, coherence=software, two nodes): dra-binding-conditions.bats,
# dra-gates-off.bats, dra-gates-capacity-off.bats, dra-noncoherent.bats.
# Loaded after lib/dra (`load lib/dra; load lib/dra-own-world`), whose helpers,
# per-test setup (the state file) and failure hook these files keep; only the
# world's start and stop are theirs:
#
#   own_world_begin <name>     E (/tmp/cxlkv-<name>.XXXXXX), E/logs, E/pids,
#                              BACKING, DRA_STATE, CXLKV_E2E_DIR (exported)
#   own_world_cluster <nodes>  the test control plane (dra_cluster_up; its
#                              settings CXLKV_E2E_GATES, CXLKV_E2E_BINDING_TIMEOUT
#                              pass through), its env into DRA_STATE
#   own_world_keep <var>...    the world's facts into DRA_STATE: ROOT, E, BIN,
#                              FK, F, HPORT and the named variables
#   own_world_down             every process started, the control plane, E
#
# Processes are started with lib/dra-env.sh's start (fd 3 closed: bats reads
# its TAP stream there); the control plane's too (own_world_cluster closes it).

own_world_begin() {  # own_world_begin <name>
  E=$(mktemp -d "/tmp/cxlkv-$1.XXXXXX")
  BACKING=/dev/shm/$(basename "$E")
  mkdir -p "$E/logs" "$E/pids" "$BACKING"
  PIDS=()
  DRA_STATE=$E/state.env
  : >"$DRA_STATE"
  CXLKV_E2E_DIR=$E/cluster
  export E BACKING DRA_STATE CXLKV_E2E_DIR
}

own_world_cluster() {  # own_world_cluster <nodes>
  dra_cluster_up "$1" "$CXLKV_E2E_DIR" 3>&- || return 1
  bash "$CLUSTER" env >>"$DRA_STATE"
}

own_world_keep() {  # own_world_keep [var...]
  local v
  {
    printf 'export %s=%q\n' ROOT "$ROOT" E "$E" BACKING "$BACKING" DRA_STATE "$DRA_STATE"
    printf '%s=%q\n' BIN "$BIN" FK "${FK:-}" F "${F:-}" KCFG "${KUBECONFIG:-}"
    declare -p HPORT >/dev/null 2>&1 && declare -p HPORT | sed 's/^declare -A /declare -gA /'
    for v in "$@"; do printf '%s=%q\n' "$v" "${!v}"; done
  } >>"$DRA_STATE"
}

own_world_down() {
  if [ -n "${E:-}" ] && [ -d "$E" ]; then dra_world_down; fi
  return 0
}

# own_world_root: skips the file unless root with mount namespaces (the fake kubelet's).
own_world_root() {
  if [ "$(id -u)" != 0 ] || ! unshare --mount true 2>/dev/null; then
    skip "the fake kubelet needs root with mount namespaces"
  fi
}
