# shellcheck shell=bash
# A directory built once per key under the cxlkv cache ($CXLKV_CACHE, else
# $XDG_CACHE_HOME/cxlkv, else ~/.cache/cxlkv), for the install scripts
# (vllm-venv.sh, lmcache-site.sh, mooncake-site.sh). Concurrent callers of one
# key serialise on a flock held on fd 9 until the caller exits; a stamp file
# marks a finished build, so a build that died half way is started over.
#
#   . scripts/lib/cached-dir.sh
#   cached_dir_open KIND KEY || { echo "$CACHED_DIR"; exit 0; }   # already built
#   ... build into "$CACHED_DIR" (it does not exist yet) ...
#   cached_dir_done                                              # stamps it, prints it

# cached_dir_open KIND KEY: sets CACHED_DIR to CACHE/KIND/KEY and takes the
# key's lock. Returns 1 when the directory is built (the caller prints it and
# is done), 0 when the caller must build it: the directory is removed first.
cached_dir_open() {
  local cache=${CXLKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cxlkv}/$1
  CACHED_DIR=$cache/$2
  mkdir -p "$cache"
  exec 9> "$cache/$2.lock"
  flock 9
  [ -f "$CACHED_DIR/.cxlkv-complete" ] && return 1
  rm -rf "$CACHED_DIR"
  return 0
}

# cached_dir_done: stamps CACHED_DIR as built and prints its path.
cached_dir_done() {
  touch "$CACHED_DIR/.cxlkv-complete"
  echo "$CACHED_DIR"
}
