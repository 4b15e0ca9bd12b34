# shellcheck shell=bash
# Bundle set "lmcache": LMCache 0.5.3 for the GPU machine, the peer that
# bench/ttft runs as tiers T5/T6 (bench/ttft/lmcache_tier.py; a bench
# dependency only, the product does not use it). Sourced by
# scripts/gpu-bundle.sh; installed after the set "vllm".
#
# Why 0.5.3: its compiled ops (lmcache/c_ops) link libcudart.so.13 and need 66
# symbols of torch, all exported by the image's torch 2.11.0+cu130. The
# compiled ops of 0.5.4, 0.5.5 and 0.5.6 (lmcache/cuda_ops) need one more,
# c10::NotImplementedError::NotImplementedError(c10::SourceLocation,
# std::string), which torch 2.11.0's libc10.so does not export, so they fail
# to load there. Checked from the wheels: `nm -D --undefined-only` of each
# extension against `nm -D --defined-only` of torch 2.11.0's libc10, libc10_cuda,
# libtorch, libtorch_cpu, libtorch_cuda and libtorch_python.

# lmcache itself, and what the `lmcache server` command and the vLLM
# connector import that neither the image nor the set "vllm" has: the
# OpenTelemetry API and SDK (module-level imports of lmcache's observability;
# versions inside lmcache 0.5.3's own pins, opentelemetry-api<=1.40.0,
# opentelemetry-exporter-prometheus<=0.61b0) and importlib-metadata, which
# opentelemetry-api imports. lmcache's other requirements (redis, awscrt,
# google-cloud-bigtable, cufile-python, aiofile, ...) serve storage backends
# and tools that tiers T5/T6 do not use; its numpy<=2.2.6 pin is left to the
# image's numpy (no dependency is resolved here).
SET_WHEELS=(
  lmcache==0.5.3
  opentelemetry-api==1.40.0 opentelemetry-sdk==1.40.0
  opentelemetry-semantic-conventions==0.61b0 opentelemetry-exporter-prometheus==0.61b0
  importlib-metadata==8.7.1
)

# LMCache's usage telemetry off (lmcache/usage_telemetry/identity.py); the
# machine has no network anyway.
SET_ENV=(LMCACHE_TRACK_USAGE=false)

# The vLLM connector side imports vllm, and lmcache imports its
# dependencies that the set "vllm" brings (zmq, msgspec, fastapi, ...).
SET_NEEDS=(vllm)
