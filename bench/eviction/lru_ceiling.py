#!/usr/bin/env python3
"""The hit-rate ceiling of a cache of N blocks with exact global LRU, for a
Mooncake trace replayed in trace order (the bound `cxlkv replay` reports is
for an unbounded cache; this one is for the region's slot count).

    bench/eviction/lru_ceiling.py TRACE SLOTS [SLOTS ...]

Prints one line per slot count: slots, leading-prefix hit rate. A request's
hits are its leading blocks present when it looks (as vLLM and `cxlkv
replay` count them); then every block of the request is used (most recent).
Single-threaded and in trace order, so it ignores the replay's concurrency:
a ceiling for the policy, not a prediction of the replay.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from evaluate import read_chains  # noqa: E402  (the trace format, one reader)
from policies import exact_lru  # noqa: E402  (the LRU evaluate.py's "lru" column counts)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    chains = read_chains(sys.argv[1])
    asked = sum(len(c) for c in chains)
    for arg in sys.argv[2:]:
        slots = int(arg)
        print(f"{slots} {exact_lru(chains, slots) / asked if asked else 0:.4f}")


if __name__ == "__main__":
    main()
