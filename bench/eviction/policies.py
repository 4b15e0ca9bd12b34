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
- indexed: a design the engine does not have (issue 24): a directory
  decoupled from where data lives, so that any block of the region can be
  the victim, chosen by a sweep over the data slots (docs/benchmarks.md,
  "Where the victim may come from").
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


def prefix_hits(chain, held):
    """How many of chain's blocks, from its first on, are in `held`: the
    hits a request counts when it looks (every policy counts them alike)."""
    k = 0
    while k < len(chain) and chain[k] in held:
        k += 1
    return k


def exact_lru(chains, slots):
    order = {}  # insertion-ordered dict as the LRU list: first = least recent
    hit = 0
    for chain in chains:
        k = prefix_hits(chain, order)
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
        k = prefix_hits(chain, cache)
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
        k = prefix_hits(chain, where)
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


def _sweep(n, key, stamp, order, hand, window, batch):
    """The `batch` occupied slots first in `order` (a key function: smaller
    goes first) among the `window` slots from `hand` (wrapping), first
    first, each with the stamp it had (a slot stored or used again since is
    passed over when its turn comes)."""
    w = min(window, n)
    end = hand + w
    span = list(range(hand, min(end, n))) + list(range(0, max(0, end - n)))
    cand = [s for s in span if key[s] is not None]
    return [(s, stamp[s]) for s in heapq.nsmallest(batch, cand, key=order)], end % n


def indexed(chains, slots, window=1024, batch=32, entries=2, ways=16, rank="lru-depth",
            tick="request", stats=None):
    """A directory decoupled from where data lives (a model of a design, not
    of the engine as it is): a key's index entry sits in one of two index
    sets of `ways` entries (`entries` entries per data slot in all) and
    points at any data slot. A store takes a free data slot; when none is
    free, the next victim of a queue that a sweep fills: a clock hand visits
    the next `window` data slots and queues the `batch` of largest rank,
    largest first; a queued slot used again since it was queued is passed
    over. So no block is evicted while an older one (by rank) sat unqueued
    in its sweep's window. Only when both of a key's index sets are full is
    the victim one of the slots they point at (stats["local"]).

    rank: "lru-depth": least recently used first, ties (blocks used by the
    same request, when tick is "request") deepest first; "prefix": the
    engine's eviction_rank (age, depth, uses); "lru": age only.
    tick: "request" (one tick per request, as the engine's millisecond clock
    sees a request's blocks) or "block" (one tick per block used)."""
    n = slots
    nidx = max(1, (entries * n) // ways)
    key = [None] * n
    last = [0] * n
    depth = [0] * n
    uses = [0] * n
    stamp = [0] * n  # changes on every store or use: a queued victim is stale when it differs
    eset = [0] * n
    members = [set() for _ in range(nidx)]
    where = {}
    free = list(range(n - 1, -1, -1))
    queue = []
    hand = 0
    now = 0
    ops = 0
    hit = 0
    local = 0
    sweeps = 0
    # The victim order as a key, smaller first: for the LRU orders a value
    # kept per slot (looked up without a Python call per slot).
    ordv = [0] * n
    if rank == "lru-depth":
        def mark(s):
            ordv[s] = (last[s] << 16) - min(depth[s], 0xFFFF)
        order = ordv.__getitem__
    elif rank == "lru":
        def mark(s):
            ordv[s] = last[s]
        order = ordv.__getitem__
    elif rank == "prefix":
        def mark(s):
            pass

        def order(s):
            return -eviction_rank(now - last[s], depth[s], uses[s])
    else:
        raise ValueError(f"unknown rank {rank}")

    def evict(s):
        del where[key[s]]
        members[eset[s]].discard(s)
        key[s] = None

    for chain in chains:
        k = prefix_hits(chain, where)
        hit += k
        if tick == "request":
            now += 1
        for d, h in enumerate(chain):
            if tick != "request":
                now += 1
            ops += 1
            s = where.get(h)
            if s is not None:
                last[s] = now
                uses[s] += 1
                stamp[s] = ops
                mark(s)
                continue
            a = _mix64(h * 0x9E3779B97F4A7C15 + 1)
            b = _mix64(a ^ h)
            sets = [a % nidx, b % nidx]
            if len(members[sets[1]]) < len(members[sets[0]]):
                sets.reverse()
            st = sets[0]
            if len(members[st]) >= ways:
                local += 1
                s = min((c for x in sets for c in members[x]), key=order)
                st = eset[s]
                evict(s)
            elif free:
                s = free.pop()
            else:
                s = None
                while s is None:
                    if not queue:
                        sweeps += 1
                        queue, hand = _sweep(n, key, stamp, order, hand, window, batch)
                        queue.reverse()  # pop() takes the largest first
                        continue
                    c, st_c = queue.pop()
                    if key[c] is not None and stamp[c] == st_c:
                        s = c
                evict(s)
            key[s] = h
            last[s] = now
            depth[s] = d
            uses[s] = 0
            stamp[s] = ops
            mark(s)
            eset[s] = st
            members[st].add(s)
            where[h] = s
    if stats is not None:
        stats.update(local=local, sweeps=sweeps)
    return hit



def software(chains, slots, policy="sampled", parts=2, ways=16, delay=0, promote_age=None,
             drain=0, ring=0, stats=None):
    """coherence=software's eviction, modelled (docs/coherence.md,
    "Eviction"): `parts` write partitions of slots // parts blocks each;
    request j runs on replica j % parts (round-robin, as `cxlkv replay`
    routes it, here in trace order) and stores only into partition j %
    parts; a lookup finds a block in any partition; a store of a block some
    partition holds is a duplicate (SW1), a use of that copy. One tick per
    request; blocks of one request leave deepest first.

    policy:
    - "sampled": layout 4 as it is: a key's block in one of the 32 ways of
      its two sets inside the writer's partition, the victim the largest
      eviction_rank (age, depth, uses) among them; only the holder's own
      uses count (the blind spot).
    - "lru": the directory decoupled inside the partition (layout 5's
      design, per partition): any block of the partition can be the victim,
      least recently used first; only the holder's own uses count.
    - "sampled-cross", "lru-cross": the same with every host's uses
      counted in the owner's recency, `delay` requests late (0: at once):
      what a reader-side recency channel, read by the owner, would add.
      drain (instead of delay): the owner reads the channel once per `drain`
      of its own stores (as it would when it refills a victim queue of that
      many), seeing the uses as of then; ring: at most that many uses wait
      per owner, an older one is lost when a newer one comes (a reader's
      ring of hints that the owner has not read yet; 0: no limit).
    promote_age: a hit on another partition's block stored (or promoted)
    at least promote_age requests ago stores a copy into the reader's own
    partition (the old copy ages out with its owner), so the block's
    recency restarts with the host that uses it. stats gets "promoted"
    (such copies) and "cross_hits" (leading hits on another partition's
    block)."""
    if policy not in ("sampled", "sampled-cross", "lru", "lru-cross"):
        raise ValueError(f"unknown software policy {policy}")
    sampled = policy.startswith("sampled")
    cross_on = policy.endswith("-cross")
    per = slots // parts
    where = {}  # block -> {partition: slot (sampled) or None (lru)}
    stored = {}  # (partition, block) -> request it was stored at
    pending = []  # (due request, partition, block): uses the owner has not seen yet
    from collections import deque
    waiting = [deque(maxlen=ring or None) for _ in range(parts)]  # drain: per owner, unseen uses
    since = [0] * parts  # drain: the owner's stores since it last read the channel
    lost = 0
    hit = cross = promoted = 0
    if sampled:
        nsets = max(1, per // ways)
        n = nsets * ways
        key = [[None] * n for _ in range(parts)]
        last = [[0] * n for _ in range(parts)]
        depth = [[0] * n for _ in range(parts)]
        uses = [[0] * n for _ in range(parts)]
        used = [[0] * nsets for _ in range(parts)]
    else:
        from collections import OrderedDict
        lists = [OrderedDict() for _ in range(parts)]  # block -> None; first = next victim
    now = 0

    def use(q, h, touched):
        if sampled:
            s = where[h][q]
            last[q][s] = now
            uses[q][s] += 1
        else:
            touched.setdefault(q, []).append(h)

    def drop(q, old):
        del where[old][q]
        if not where[old]:
            del where[old]
        stored.pop((q, old), None)

    for j, chain in enumerate(chains):
        now += 1
        r = j % parts
        k = prefix_hits(chain, where)
        hit += k
        touched = {}  # partition -> this request's blocks there, in depth order (lru)
        while pending and pending[0][0] <= now:
            _, q, h = pending.pop(0)
            if h in where and q in where[h]:
                use(q, h, touched)
        for d, h in enumerate(chain):
            held = where.get(h)
            if held is not None:
                if r in held:
                    use(r, h, touched)
                    continue
                q = next(iter(held))
                if d < k:
                    cross += 1
                if cross_on:
                    if drain:
                        lost += len(waiting[q]) == waiting[q].maxlen
                        waiting[q].append(h)
                    elif delay:
                        pending.append((now + delay, q, h))
                    else:
                        use(q, h, touched)
                if promote_age is None or now - stored[(q, h)] < promote_age:
                    continue
                promoted += 1
            # A store into partition r (a miss, or a promoted copy).
            if drain:
                since[r] += 1
                if since[r] >= drain:
                    since[r] = 0
                    while waiting[r]:
                        u = waiting[r].popleft()
                        if u in where and r in where[u]:
                            use(r, u, touched)
                    if not sampled:
                        # Seen now: the newest but this request's own blocks.
                        for u in reversed(touched.pop(r, [])):
                            if u in lists[r]:
                                lists[r].move_to_end(u)
            if sampled:
                a = _mix64(h * 0x9E3779B97F4A7C15 + 1)
                b = _mix64(a ^ h)
                sets = [a % nsets, b % nsets]
                if used[r][sets[1]] < used[r][sets[0]]:
                    sets.reverse()
                slot = None
                for st in sets:
                    if used[r][st] < ways:
                        base = st * ways
                        for w in range(ways):
                            if key[r][base + w] is None:
                                slot = base + w
                                break
                        used[r][st] += 1
                        break
                if slot is None:
                    cand = [st * ways + w for st in sets for w in range(ways)]
                    slot = max(cand, key=lambda c: eviction_rank(now - last[r][c], depth[r][c],
                                                                 uses[r][c]))
                    drop(r, key[r][slot])
                key[r][slot] = h
                last[r][slot] = now
                depth[r][slot] = d
                uses[r][slot] = 0
            else:
                lst = lists[r]
                if len(lst) >= per:
                    old, _ = lst.popitem(last=False)
                    drop(r, old)
                    slot = None
                lst[h] = None
                slot = None
                touched.setdefault(r, []).append(h)
            where.setdefault(h, {})[r] = slot
            stored[(r, h)] = now
        if not sampled:
            # This request's blocks are the newest, its deepest the oldest of them.
            for q, hs in touched.items():
                for h in reversed(hs):
                    if h in lists[q]:
                        lists[q].move_to_end(h)
    if stats is not None:
        stats.update(promoted=promoted, cross_hits=cross, hints_lost=lost)
    return hit
