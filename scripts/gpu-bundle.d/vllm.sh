# shellcheck shell=bash
# Bundle set "vllm": vLLM 0.26.0 for the GPU machine's image, which already
# has torch 2.11.0+cu130, torchvision 0.26.0 and torchaudio 2.11.0 (0.26.0's
# own pins; later vLLMs pin a newer torch than the image has) but no vLLM.
# Sourced by scripts/gpu-bundle.sh; the variables and the function below are
# the whole interface of a set (see that script's header).

# The wheel unpacked, trimmed and packed as one xz tree (its kernels alone
# are over a carry's size).
SET_TREE_WHEEL="vllm==0.26.0"

# What 0.26.0 imports that the image lacks, by name and version; everything
# else it needs (numpy, transformers, tokenizers, safetensors, triton, psutil,
# prometheus-client, ...) is in the image. Taken as wheels, no dependencies
# resolved (the image's own versions stay in charge).
SET_WHEELS=(
  agent_detector==2.0.0 annotated_types==0.8.0 apache_tvm_ffi==0.1.10 astor==0.8.1
  blake3==1.0.11 cachetools==8.0.2 cbor2==6.3.0 cffi==2.1.1 compressed_tensors==0.17.0
  cryptography==50.0.2 depyf==0.20.0 detect_installer==0.2.1 dill==0.4.1 dnspython==2.9.2
  docstring_parser==0.18.0 email_validator==2.4.0 fastapi==0.136.3 fastapi_cli==0.0.34
  fastar==0.12.0 fastsafetensors==0.5.0 googleapis_common_protos==1.76.0 httpcore2==2.16.2
  httptools==0.9.0 httpx2==2.16.2 ijson==3.6.0 interegular==0.3.3 jiter==0.19.0
  jmespath==1.1.0 jsonschema==4.26.0 jsonschema_specifications==2025.9.1 lark==1.2.2
  llguidance==1.7.6 lm_format_enforcer==0.11.3 loguru==0.7.3 mistral_common==1.13.1
  model_hosting_container_standards==0.1.16 msgspec==0.23.0 nvtx==0.2.15 openai==3.57.0
  openai_harmony==0.0.8 outlines_core==0.2.14 partial_json_parser==0.2.1.1.post7
  prometheus_fastapi_instrumentator==8.1.0 pybase64==1.5.1 pycountry==26.2.16
  pycparser==3.12 pydantic==2.14.4 pydantic_core==2.50.5 pydantic_extra_types==2.11.1
  pydantic_settings==2.16.3 pyelftools==0.33 pyjwt==2.15.1 python_dotenv==1.2.4
  python_json_logger==4.2.0 python_multipart==0.0.34 pyzmq==27.3.0 referencing==0.37.0
  rich_toolkit==0.20.6 rignore==0.8.1 rpds_py==2026.9.1 setproctitle==1.3.8 sniffio==1.3.1
  sse_starlette==3.7.0 starlette==1.10.0 supervisor==4.3.0 torch_c_dlpack_ext==0.1.5
  truststore==0.10.5 typing_inspection==0.4.5 uvicorn==0.54.0 watchfiles==1.3.0
  websockets==17.4 xgrammar==0.2.7
)

# Exported by the installer beside PYTHONPATH. FlashInfer is not bundled, so
# vLLM's FlashInfer sampler must stay off.
SET_ENV=(VLLM_USE_FLASHINFER_SAMPLER=0)

# Sets that must be installed first (none: torch comes with the image).
SET_NEEDS=()

# Removes from the unpacked tree ($1 holds vllm/) what a dense model on a
# Hopper GPU never loads and vLLM imports only optionally: the FlashAttention-2
# kernels (FA3 serves Hopper), the MoE, FlashMLA and QuTLASS kernels, the Rust
# front end, DeepGEMM and the SM100 attention sources, the server's static
# files. Each was seen missing without harm: engine start, the OpenAI server
# and OffloadingConnector ran on an H200 from such a tree.
set_trim() {
  local t=$1/vllm
  rm -rf "$t/vllm_flash_attn/_vllm_fa2_C.abi3.so" "$t/_moe_C_stable_libtorch.abi3.so" \
    "$t/vllm-rs" "$t/_flashmla_C.abi3.so" "$t/_flashmla_extension_C.abi3.so" \
    "$t/_qutlass_C.abi3.so" "$t/third_party/deep_gemm" "$t/third_party/fmha_sm100" \
    "$t/entrypoints/serve/instrumentator/static"
}
