"""Prompt shapes (run by scripts/test.d/70-ttft.sh with pytest): every
request the harness sends fits the model's positions, including the load
phase's longer generations at the paper's largest prefix (the first H200 load
run sent 32,694 + 64 query + 64 generated tokens to a 32,768-position model
and got HTTP 400)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import prompts  # noqa: E402

PAPER = (2054, 8173, 16282, 32694)


@pytest.mark.parametrize("max_tokens", [8, 64])
@pytest.mark.parametrize("prefix", PAPER)
def test_prompt_and_generation_fit_32k_positions(prefix, max_tokens):
    q = prompts.fit_query_len(64, 32768, prefix, max_tokens)
    assert 1 <= q <= 64
    assert prefix + q + max_tokens <= 32768
    shared, q1, q2 = prompts.session(0, 0, prefix, "same", 0, q, 152064)
    assert len(shared) == prefix and len(q1) == len(q2) == q


def test_short_prefixes_keep_the_whole_query():
    assert prompts.fit_query_len(64, 32768, 8173, 64) == 64


def test_the_largest_bucket_is_shortened_by_what_generation_needs():
    assert prompts.fit_query_len(64, 32768, 32694, 8) == 64
    assert prompts.fit_query_len(64, 32768, 32694, 64) == 10


def test_a_prefix_that_cannot_fit_is_refused_not_truncated():
    with pytest.raises(ValueError, match="no room"):
        prompts.fit_query_len(64, 32768, 32768, 8)


def test_each_load_cell_sends_prefixes_of_its_own(monkeypatch):
    """The load phase's cells of one call (1, 2, 4, 8 sessions per replica)
    are measured one after another on the same replicas: a cell whose
    sessions drew the prefixes of an earlier cell would send req1 prompts the
    tier already holds (their store, and on T4 the region's eviction of them,
    then shape the cell's load), so every req1 must be a prefix no cell sent
    before."""
    from types import SimpleNamespace

    import client
    import ttft

    sent = []

    def complete(host, port, model, prompt, max_tokens, **kw):
        sent.append(tuple(prompt[:256]))
        return {"ttft_ms": 1.0, "e2e_ms": 2.0, "tokens": [1], "logprobs": None,
                "prompt_tokens": len(prompt), "cached_tokens": 0}

    monkeypatch.setattr(client, "complete", complete)
    h = ttft.Harness.__new__(ttft.Harness)
    h.call = 0
    h.a = SimpleNamespace(seed=1, load_sessions=2, load_max_tokens=8)
    h.query_len = lambda prefix, max_tokens=None: 16
    h.log = SimpleNamespace(records=[], append=lambda r: None)
    reps = [SimpleNamespace(host="a", port=1, role="A"), SimpleNamespace(host="b", port=2, role="B")]
    cfg = {"vocab_size": 1000}
    seen = set()
    for c in (1, 2, 4):
        del sent[:]
        h.load_cell(reps, "T4", cfg, ("load", 512, c, f"load/T4/512/c{c}"))
        req1 = set(sent)
        assert len(sent) == 2 * 2 * c * 2  # replicas x sessions per replica x load_sessions x 2
        assert not (req1 & seen), f"the c = {c} cell sent prefixes an earlier cell sent"
        seen |= req1
