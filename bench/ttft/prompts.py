"""Seeded token-id prompts: a session's SHARED prefix and its two queries.

The paper's prompts are tokenizer-calibrated text; with no tokenizer on the
GPU machine (and random weights) the prompt is random token ids drawn from a
seeded generator: the KV volume and the work are those of a prompt of that
many tokens. Every (repetition, prefix, arm, session) has its own seed, the
same for every tier, so tiers are compared on the same prompts and each arm
has its own prompt set (as the paper's).
"""

import hashlib
import random


def _rng(*parts):
    h = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return random.Random(int.from_bytes(h[:8], "little"))


def token_range(vocab):
    """Ids to draw from: above the tiny models' specials, below Qwen's added tokens."""
    lo = 4 if vocab <= 4096 else 1000
    return lo, min(vocab, 150000)


def fit_query_len(query_len, max_model_len, prefix, max_tokens):
    """Q's length so that prefix + Q + generated tokens fit max_model_len
    (vLLM answers 400 otherwise): query_len, shortened for the largest
    bucket, at least 1. Raises ValueError when even one query token does not
    fit (a prefix the model cannot take)."""
    room = max_model_len - prefix - max_tokens
    if room < 1:
        raise ValueError(f"prefix {prefix} + {max_tokens} generated tokens leave no room for a "
                         f"query within max_model_len {max_model_len}")
    return min(query_len, room)


def session(seed, rep, prefix, arm, index, query_len, vocab):
    """(shared, q1, q2) token-id lists for one session."""
    lo, hi = token_range(vocab)
    r = _rng(seed, rep, prefix, arm, index)
    shared = [r.randrange(lo, hi) for _ in range(prefix)]
    q1 = [r.randrange(lo, hi) for _ in range(query_len)]
    q2 = [r.randrange(lo, hi) for _ in range(query_len)]
    if q1 == q2:  # never in practice; the arms rely on Q1 != Q2
        q2[0] = lo + (q2[0] + 1 - lo) % (hi - lo)
    return shared, q1, q2


def fresh(seed, tag, length, vocab):
    """A prompt nobody was sent before (warm-up, never-stored-keys control)."""
    lo, hi = token_range(vocab)
    r = _rng(seed, "fresh", tag)
    return [r.randrange(lo, hi) for _ in range(length)]
