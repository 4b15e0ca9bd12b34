"""Eviction policies over a trace of prefix chains, for bench/eviction/evaluate.py.

A trace is a list of chains (one per request, in trace order), each a list of
block ids; requests sharing leading ids share that prefix. Every policy is
counted the same way, prefix-aware: a request can use its leading blocks up to
the first one missing when it looks (as vLLM and `cxlkv replay` count them);
then every block of the request is used (hits touched, misses stored).

- exact_lru: one global LRU list of `slots` blocks (bench/eviction/lru_ceiling.py).
- belady: evicts the block whose next use is farthest (the new block itself
  when that is farthest: it is then not kept). Optimal for independent blocks;
  with chains counted only to their first miss it is a reference, not a bound.
- region: a model of the engine's placement (two candidate sets of 16 ways per
  key, the emptier set first, free ways first) with the engine's victim
  choice among the 32 candidates (`victim`: "lru32", the engine before the
  prefix-aware policy, or "prefix", docs/region_format.md "Eviction"). A
  model for choosing a policy quickly; `cxlkv replay` measures the engine.
"""
import heapq


def _mix64(x):
    x &= 0xFFFFFFFFFFFFFFFF
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 31
    return x


def exact_lru(chains, slots):
    order = {}  # insertion-ordered dict as the LRU list: first = least recent
    hit = 0
    for chain in chains:
        k = 0
        while k < len(chain) and chain[k] in order:
            k += 1
        hit += k
        for h in chain:
            if h in order:
                del order[h]
            order[h] = None
            if len(order) > slots:
                del order[next(iter(order))]
    return hit


def belady(chains, slots):
    # Next use of each (request, position) occurrence, counted in requests;
    # within a request, a later position is a later use.
    inf = float("inf")
    seq = [(j, p, h) for j, chain in enumerate(chains) for p, h in enumerate(chain)]
    nxt = [inf] * len(seq)
    last = {}
    for i in range(len(seq) - 1, -1, -1):
        h = seq[i][2]
        nxt[i] = last.get(h, inf)
        last[h] = i
    cache = {}  # block -> index of its next use
    heap = []   # (-next use, block): lazy, stale entries skipped
    hit = 0
    i = 0
    for chain in chains:
        k = 0
        while k < len(chain) and chain[k] in cache:
            k += 1
        hit += k
        for h in chain:
            n = nxt[i]
            i += 1
            cache[h] = n
            heapq.heappush(heap, (-n, h))
            while len(cache) > slots:
                negn, v = heapq.heappop(heap)
                if cache.get(v) == -negn:
                    del cache[v]
    return hit


def region(chains, slots, victim="prefix", ways=16):
    """The engine's placement and victim choice, single-threaded, in trace
    order; time is one tick per block used. victim "prefix": the engine's
    EvictionRank (age, chain depth, uses; duplicates count as uses);
    "lru32": the oldest candidate, duplicates not counted (the engine
    before the prefix-aware policy)."""
    prefix = victim != "lru32"
    nsets = max(1, slots // ways)
    n = nsets * ways
    key = [None] * n
    last = [0] * n
    depth = [0] * n
    uses = [0] * n
    used = [0] * nsets
    where = {}
    now = 0
    hit = 0
    for chain in chains:
        k = 0
        while k < len(chain) and chain[k] in where:
            k += 1
        hit += k
        for d, h in enumerate(chain):
            now += 1
            s = where.get(h)
            if s is not None:
                if d < k or prefix:
                    last[s] = now
                    uses[s] += 1
                continue
            a = _mix64(h * 0x9E3779B97F4A7C15 + 1)
            b = _mix64(a ^ h)
            sets = [a % nsets, b % nsets]
            if used[sets[1]] < used[sets[0]]:
                sets.reverse()
            slot = None
            for st in sets:
                if used[st] < ways:
                    base = st * ways
                    for w in range(ways):
                        if key[base + w] is None:
                            slot = base + w
                            break
                    used[st] += 1
                    break
            if slot is None:
                cand = [st * ways + w for st in sets for w in range(ways)]
                if prefix:
                    slot = max(cand, key=lambda c: eviction_rank(now - last[c], depth[c], uses[c]))
                else:
                    slot = min(cand, key=lambda c: last[c])
                del where[key[slot]]
            key[slot] = h
            last[slot] = now
            depth[slot] = d
            uses[slot] = 0
            where[h] = slot
    return hit


def eviction_rank(age, depth, uses):
    """The engine's EvictionRank (src/region/region_impl.h; bigger goes
    first): age scaled up by chain depth (a chain leaves tail first) and
    down by uses since the store."""
    return (age + 1) * (256 + min(depth, 255)) * 12 // (1 + min(uses, 3))
