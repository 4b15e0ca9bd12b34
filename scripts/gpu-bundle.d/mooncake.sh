# shellcheck shell=bash
# Bundle set "mooncake": Mooncake 0.3.14 (mooncake-transfer-engine-cuda13,
# the build for CUDA 13, which vLLM 0.26.0's wheel and the image's torch
# 2.11.0+cu130 use) for the GPU machine: the peer that bench/ttft runs as tier
# T3 (bench/ttft/mooncake_tier.py; a bench dependency only, the product does
# not use it). Sourced by scripts/gpu-bundle.sh; installed after the set
# "vllm".
#
# Read from the wheel (readelf -d): mooncake_master, mooncake/_store*.so and
# mooncake/engine.so bundle their own glog, gflags, zmq, yaml-cpp, jsoncpp,
# ... (mooncake_transfer_engine_cuda13.libs) but link libibverbs.so.1,
# libmlx5.so.1, libnuma.so.1 and libcurl.so.4 from the system, and the Python
# extensions also libcuda.so.1 (the driver) and libcudart.so.13 (the CUDA
# runtime: torch's own, nvidia/cu13/lib, or the toolkit's). Without RDMA
# hardware libibverbs finds no device and the "tcp" protocol is used; the
# libraries must still load. They come as Debian 12 packages (the newest
# GLIBC symbol any of them needs is GLIBC_2.34, so they load on any glibc
# from 2.34 on), libcurl with every library it links; `install` exposes only
# those the image lacks (scripts/lib/private-libs.sh).

# The wheel unpacked and trimmed (it is 50 MB; what T3 never loads goes, so
# the set is one part): the standalone store owner (mooncake_client: T3 runs
# the embedded mode, each vLLM worker contributes its segment), the
# collective-communication and expert-parallel libraries and their JIT
# sources (libmooncake_pg*, libmooncake_ep_device, _ep, mooncake_ep_jit,
# _pg_jit) and the transfer-engine benchmark. Kept: mooncake_master,
# _store (MooncakeDistributedStore, which vLLM's MooncakeStoreConnector
# imports), engine.so and the two libraries they link from the package
# directory (libasio.so, libetcd_wrapper.so), every .py file, the bundled
# libraries.
SET_TREE_WHEEL="mooncake-transfer-engine-cuda13==0.3.14"
set_trim() {
  local t=$1/mooncake
  rm -rf "$t/mooncake_client" "$t/libmooncake_pg.so" "$t/libmooncake_pg_device.so" \
    "$t/libmooncake_ep_device.so" "$t"/_ep.*.so "$t/mooncake_ep_jit" "$t/_pg_jit" \
    "$t/transfer_engine_bench"
}

# What the wheel's metadata requires that the image lacks: none (aiohttp,
# requests, msgpack are in the image's package list).
SET_WHEELS=()

# The system libraries, for Debian 12 (bookworm) x86-64: libibverbs1 and
# ibverbs-providers (libmlx5.so.1 and the provider plugins; libnl-3 and
# libnl-route-3 are theirs), libnuma1, libcurl4 and what libcurl.so.4 links.
SET_DEBS=(
  libibverbs1 ibverbs-providers libnl-3-200 libnl-route-3-200 libnuma1
  libcurl4 libbrotli1 libffi8 libgmp10 libgnutls30 libgssapi-krb5-2 libhogweed6 libidn2-0
  libk5crypto3 libkrb5-3 libkrb5support0 libldap-2.5-0 libnettle8 libnghttp2-14 libp11-kit0
  libpsl5 librtmp1 libsasl2-2 libsasl2-modules-db libssh2-1 libssl3 libtasn1-6 libunistring2
  libzstd1 libcom-err2 libkeyutils1
)
# The ELF files whose missing libraries `install` links into @DIR@/lib.
SET_ELVES=(mooncake/mooncake_master "mooncake/_store.*.so" mooncake/engine.so)

# Where the image keeps the CUDA runtime (libcudart.so.13): the pip packages
# beside torch (nvidia/cu13/lib, nvidia/cuda_runtime/lib) and the toolkit.
set_libdirs() {
  local p
  for p in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for d in "$p"/nvidia/cu13/lib "$p"/nvidia/cuda_runtime/lib; do [ -d "$d" ] && echo "$d"; done
  done
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && echo "$d"
  done
  return 0
}

# The linked libraries first on the library path of every process started
# from this environment (the vLLM workers load _store.so, the harness starts
# mooncake_master).
SET_ENV=('LD_LIBRARY_PATH=@DIR@/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}')

# None: Mooncake imports only what the image has (torch, aiohttp, requests,
# msgpack); vLLM's connector imports it from a process that has the set
# "vllm" on its path already.
SET_NEEDS=()
