#!/usr/bin/env python3
"""A multi-turn chat trace with long shared prefixes, in the Mooncake trace
format (one JSON object per line: timestamp ms, input_length, output_length,
hash_ids, one id per 512-token block), for bench/eviction/evaluate.py.

    bench/eviction/gen_multiturn.py [--seed N] [--conversations N] > trace.jsonl

Shape (deterministic in the seed):
- 12 system prompts of 24-96 blocks (12K-48K tokens: agent instructions,
  tool schemas, a shared document), picked by popularity (Zipf, s = 1.1).
- Conversations arrive as a Poisson process (one per 400 ms on average);
  each has 1-12 turns (geometric, mean 4). Turn k's prompt is the system
  prompt, every earlier turn's blocks, and 1-3 new blocks (the user's message
  and the previous answer), so turn k+1 reuses all of turn k.
- A turn follows the previous one after a think time drawn from an
  exponential distribution with mean 20 s, so other conversations' turns
  interleave and a prefix waits long between uses.
"""
import argparse
import heapq
import json
import random
import sys


def generate(seed=1, conversations=3000, out=sys.stdout):
    rng = random.Random(seed)
    next_id = 0

    def new_blocks(n):
        nonlocal next_id
        ids = list(range(next_id, next_id + n))
        next_id += n
        return ids

    systems = [new_blocks(rng.randint(24, 96)) for _ in range(12)]
    weights = [1.0 / (i + 1) ** 1.1 for i in range(len(systems))]
    events = []  # (time ms, seq, conversation state)
    t = 0.0
    for c in range(conversations):
        t += rng.expovariate(1 / 400.0)
        turns = min(12, 1 + int(rng.expovariate(1 / 3.0)))
        sysp = rng.choices(range(len(systems)), weights)[0]
        heapq.heappush(events, (t, c, list(systems[sysp]), turns))
    n = 0
    while events:
        t, c, chain, left = heapq.heappop(events)
        chain = chain + new_blocks(rng.randint(1, 3))
        out.write(json.dumps({"timestamp": int(t), "input_length": 512 * len(chain),
                              "output_length": rng.randint(64, 512), "hash_ids": chain}) + "\n")
        n += 1
        if left > 1:
            heapq.heappush(events, (t + rng.expovariate(1 / 20000.0), c, chain, left - 1))
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--conversations", type=int, default=3000)
    a = ap.parse_args()
    generate(a.seed, a.conversations)


if __name__ == "__main__":
    main()
