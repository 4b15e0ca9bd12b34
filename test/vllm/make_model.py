"""Makes the test model: a tiny Qwen2 with normally initialised random weights
(transformers' own init, std = initializer_range), bf16, plus a 1000-word
WordLevel tokenizer so that the OpenAI server path works too. No download:
everything is generated here.

    python make_model.py OUT_DIR [--seed N] [--layers 2]
"""
import argparse
import json
import os


def make(out, seed=0, layers=2, init_range=0.2):
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(seed)
    # A wide init so that outputs depend strongly on the context (the KV):
    # the zeroed-KV control must change the tokens.
    cfg = Qwen2Config(vocab_size=1000, hidden_size=256, intermediate_size=512,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=8192, initializer_range=init_range,
                      tie_word_embeddings=False, torch_dtype="bfloat16")
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    vocab = {f"w{i}": i for i in range(1000)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", eos_token="w1",
                                   bos_token="w2", pad_token="w3")
    fast.save_pretrained(out)
    with open(os.path.join(out, "cxlkv-test-model.json"), "w") as f:
        json.dump({"seed": seed, "layers": layers, "init_range": init_range}, f)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=2)
    a = ap.parse_args()
    make(a.out, a.seed, a.layers)
