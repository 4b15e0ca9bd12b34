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
import json
import sys
from collections import OrderedDict


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    chains = []
    with open(sys.argv[1]) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                chains.append([int(h) for h in json.loads(line)["hash_ids"]])
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"{sys.argv[1]}:{n}: not a trace line with hash_ids ({e})")
    for arg in sys.argv[2:]:
        slots = int(arg)
        lru, hit, asked = OrderedDict(), 0, 0
        for chain in chains:
            asked += len(chain)
            k = 0
            while k < len(chain) and chain[k] in lru:
                k += 1
            hit += k
            for h in chain:
                if h in lru:
                    lru.move_to_end(h)
                else:
                    lru[h] = None
                    if len(lru) > slots:
                        lru.popitem(last=False)
        print(f"{slots} {hit / asked if asked else 0:.4f}")


if __name__ == "__main__":
    main()
