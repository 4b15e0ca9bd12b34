"""The models the harness serves, made locally (the GPU machine has no network
and no tokenizer files; every server runs with --skip-tokenizer-init and
token-id prompts).

- ``qwen7b``: Qwen2.5-7B-Instruct's architecture (its public config.json's
  fields), no weights: served with --load-format dummy. The timing grid's
  model; TTFT and KV volume do not depend on weight values, outputs do, so
  no output of it is ever compared.
- ``llama8b``: Llama-3.1-8B's architecture, the same way: the second KV
  geometry (32 layers x 8 KV heads x 128: 128 KiB of KV per token, against
  Qwen2.5-7B's 28 x 4 x 128, 56 KiB).
- ``qwen1.5b``: Qwen2.5-1.5B-Instruct's architecture, the same way: small
  enough that four engines share one GPU (3 GB of weights each; 28 layers x
  2 KV heads x 128: 28 KiB of KV per token), for the four-replica runs.
- ``small``: a Qwen2-shaped model with seeded, normally initialised weights
  (transformers' own init, std = initializer_range), written as safetensors.
  The correctness oracle's model, and the CPU stage's: a wide init (0.2) so
  that outputs depend strongly on the KV (the poisoned-KV control must change
  them).
"""

import json
import os

QWEN25_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "torch_dtype": "bfloat16",
    "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06,
    "hidden_act": "silu", "tie_word_embeddings": False, "use_sliding_window": False,
    "sliding_window": 131072, "max_window_layers": 28, "attention_dropout": 0.0,
    "initializer_range": 0.02, "bos_token_id": 151643, "eos_token_id": 151645,
    "use_cache": True,
}


LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
    "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "max_position_embeddings": 131072, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rms_norm_eps": 1e-05, "hidden_act": "silu", "tie_word_embeddings": False,
    "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
    "initializer_range": 0.02, "bos_token_id": 128000, "eos_token_id": 128009,
    "use_cache": True,
}
# Qwen2.5-1.5B-Instruct's public config.json: the 7B's fields but the ones it sets otherwise.
QWEN25_1_5B = {
    **QWEN25_7B,
    "vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960,
    "num_attention_heads": 12, "num_key_value_heads": 2,
    "tie_word_embeddings": True, "sliding_window": 32768, "max_window_layers": 21,
}
ARCHS = {"qwen7b": ("qwen2.5-7b-arch", QWEN25_7B), "llama8b": ("llama-3.1-8b-arch", LLAMA31_8B),
         "qwen1.5b": ("qwen2.5-1.5b-arch", QWEN25_1_5B)}


def kv_bytes_per_token(cfg, dtype_bytes=2):
    """K and V of every layer: layers x KV heads x head dim x 2 x bytes."""
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * 2 * dtype_bytes


def write_arch(name, models_dir):
    """A directory holding only the named architecture's config.json (for
    load_format=dummy). name: a key of ARCHS."""
    sub, cfg = ARCHS[name]
    out = os.path.join(models_dir, sub)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return out


def write_qwen7b(out):
    """A directory holding only Qwen2.5-7B's config.json (for load_format=dummy)."""
    return write_arch("qwen7b", os.path.dirname(out))


def weight_bytes(cfg, dtype_bytes=2):
    """Parameters x bytes of a dense decoder (embeddings, attention, MLP, head)."""
    h, i, L, v = (cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"],
                  cfg["vocab_size"])
    head_dim = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * head_dim
    per_layer = h * h + 2 * h * kv + h * h + 3 * h * i + 2 * h
    return (L * per_layer + v * h * (1 if cfg.get("tie_word_embeddings") else 2)) * dtype_bytes


def make_small(out, seed=0, layers=2, hidden=256, heads=4, kv_heads=2, vocab=1000,
               init_range=0.2, max_positions=8192):
    """Writes the seeded small model (idempotent: an existing one of the same
    recipe is kept). Returns the directory."""
    recipe = {"seed": seed, "layers": layers, "hidden": hidden, "heads": heads,
              "kv_heads": kv_heads, "vocab": vocab, "init_range": init_range,
              "max_positions": max_positions}
    stamp = os.path.join(out, "cxlkv-ttft-model.json")
    if os.path.exists(stamp):
        with open(stamp) as f:
            if json.load(f) == recipe:
                return out
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
                      initializer_range=init_range, tie_word_embeddings=False,
                      torch_dtype="bfloat16")
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    with open(stamp, "w") as f:
        json.dump(recipe, f)
    return out


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)
