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
