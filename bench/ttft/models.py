"""The models the harness serves, made locally (the GPU machine has no network
and no tokenizer files; every server runs with --skip-tokenizer-init and
token-id prompts).

- ``qwen7b``: Qwen2.5-7B-Instruct's architecture (its public config.json's
  fields), no weights: served with --load-format dummy. The timing grid's
  model; TTFT and KV volume do not depend on weight values, outputs do, so
  no output of it is ever compared.
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


def kv_bytes_per_token(cfg, dtype_bytes=2):
    """K and V of every layer: layers x KV heads x head dim x 2 x bytes."""
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * 2 * dtype_bytes


def write_qwen7b(out):
    """A directory holding only Qwen2.5-7B's config.json (for load_format=dummy)."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(QWEN25_7B, f, indent=1)
    return out


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
