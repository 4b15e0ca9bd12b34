#!/usr/bin/env bash
# Installs every system package the cxlkv build and test suite need.
# Idempotent; run as root on a fresh Debian 12 (bookworm). Safe to re-run.
set -euo pipefail

# One list per room, so each room's dependencies are visible at a glance.
ENGINE_PKGS=(
  build-essential cmake ninja-build pkg-config git
  libisal-dev            # CRC32C per slot (crc32_iscsi)
  libgtest-dev libgmock-dev
  libbenchmark-dev       # cxlkv bench micro-benchmarks
  nlohmann-json3-dev     # config blob in the region, --json output, trace parsing
  libcli11-dev           # cxlkv CLI flags
  libfmt-dev
  libdaxctl-dev          # devdax sysfs facts on real hardware
  libnuma-dev
  clang libclang-rt-14-dev  # libFuzzer target (scripts/fuzz.sh)
  python3 python3-dev pybind11-dev
)
FABRIC_PKGS=(
  libcpp-httplib-dev libyaml-cpp-dev libcurl4-openssl-dev libssl-dev libspdlog-dev
  curl util-linux        # fabric test stage: HTTP calls, unshare/mount for the CDI e2e
)
KUBE_PKGS=(
  golang-go              # test tooling only: builds kube-apiserver & friends for e2e tests
  openssl                # e2e cluster: CA, serving/client certs, service-account keys
  curl python3           # e2e cluster: readiness probes, free ports
  libcurl4-openssl-dev   # kube client: HTTPS with verified TLS, streaming watches
  libssl-dev             # kube client: base64 of kubeconfig *-data fields
  libyaml-cpp-dev        # kube client: kubeconfig is YAML
  nlohmann-json3-dev     # kube client: API objects are JSON
)

want=("${ENGINE_PKGS[@]}" "${FABRIC_PKGS[@]}" "${KUBE_PKGS[@]}")
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# golang-go is only needed when no Go toolchain is on PATH already.
if command -v go >/dev/null 2>&1; then
  tmp=(); for p in "${missing[@]}"; do [ "$p" = golang-go ] || tmp+=("$p"); done; missing=("${tmp[@]}")
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all system packages present"
fi

# Python-side test tooling (per-room lists; pip is idempotent).
PIP_PKGS=()
[ -f scripts/pip-requirements.txt ] && PIP_PKGS+=(-r scripts/pip-requirements.txt)
if [ ${#PIP_PKGS[@]} -gt 0 ]; then
  python3 -m pip install -q "${PIP_PKGS[@]}"
fi
touch "${CXLKV_SETUP_STAMP:-/var/tmp/cxlkv-setup.stamp}" 2>/dev/null || true
