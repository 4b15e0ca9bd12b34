#!/usr/bin/env python3
"""Prefix-aware hit rate of eviction policies at equal capacity.

    bench/eviction/evaluate.py [--trace PATH | --generate] [--capacities 0.05,0.1,...|256MiB,...]
                               [--policies lru,belady,model,replay,replay-sw,sw-lru,...]
                               [--sw-delay N] [--cxlkv build/bin/cxlkv] [--json OUT]

For a trace (Mooncake format: one JSON object per line with `hash_ids`, one
id per 512-token block; default the carried conversation trace) or a
generated multi-turn trace with long shared prefixes (--generate,
bench/eviction/gen_multiturn.py), and each capacity given as a fraction of
the working set (the trace's distinct blocks) or as a region size (256MiB,
2GiB: the data slots of a region of that size formatted by --cxlkv, and the
replays at that size, as scripts/sweep.sh runs them), prints the usable-token hit
rate of each policy: the tokens a request can use, i.e. its leading blocks
up to the first one missing when it looks, over all tokens asked. Every
block is 512 tokens, so this is also the leading-block hit rate.

Policies (bench/eviction/policies.py says how each is counted):
- lru:       exact global LRU over that many blocks (lru_ceiling.py).
- belady:    farthest next use first; a reference, not a bound (chains
             count only to their first miss).
- model:     the engine's placement and victim choice, modelled in Python
             (two candidate sets of 16 ways per key; single-threaded).
- model-lru32: the same model with the victim choice before the
             prefix-aware policy (oldest of the 32 candidates).
- indexed:   a model of a design the engine does not have yet: the
             directory decoupled from where data lives, so any data slot
             can be the victim; a sweep over --window data slots (default
             the whole region) queues the --batch (default 1/64 of the
             slots) least recently used, ties deepest first, one tick per
             request as the engine's millisecond clock sees a request
             (policies.indexed).
- indexed-prefix: the same design with the engine's EvictionRank (age,
             depth, uses) as the victim order.
- replay:    the engine itself: `cxlkv replay` on a fresh region with that
             many slots (coherence=hardware, 2 replicas, round-robin).
- replay-sw: the same in coherence=software (replica i writes partition i).
- sw-*:      models of coherence=software's eviction, for choosing its design
             (policies.software): 2 write partitions of half the slots,
             request j on replica j % 2 (round-robin, as the replay routes
             it), stores only into the replica's own partition, a lookup
             finds a block in either, a store of a block either holds is a
             duplicate; in trace order, one tick per request.
  sw-sampled:       layout 4 as it is: a key's 32 candidate ways in the
                    writer's partition, the largest EvictionRank among them,
                    only the holder's own uses counted (the blind spot).
  sw-lru:           the directory decoupled inside the partition (any block
                    of the partition can be the victim), least recently used
                    first, deepest first on ties; holder's own uses only.
  sw-lru-cross:     sw-lru with every host's uses counted by the owner,
                    --sw-delay requests late (a reader-side recency channel),
                    or when the owner reads the channel, once per --sw-drain of
                    its partition's slots of its own stores, each owner's
                    unread uses at most --sw-ring (older ones lost).
  sw-sampled-cross: sw-sampled with the same channel.
  sw-lru-promote:   sw-lru, and a reader's hit on the other partition's block
                    stores a copy into the reader's partition.
Replays run the trace with 2 replicas concurrently (each request waits for
the one that first stored its prefix), so they are not exactly trace order.

Prints a Markdown table (each policy's hit rate, and the region's ratio to
exact LRU) and writes one JSON object per (trace, capacity) to --json.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_multiturn  # noqa: E402
import policies  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KV_BYTES_PER_TOKEN = 64  # 32 KiB blocks, as scripts/sweep.sh
BLOCK_TOKENS = 512


def read_chains(path):
    chains = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                chains.append([int(h) for h in json.loads(line)["hash_ids"]])
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"{path}:{n}: not a trace line with hash_ids ({e}); "
                         "give a Mooncake-format trace (one JSON object per line)")
    if not chains:
        sys.exit(f"{path}: no requests")
    return chains


def cxlkv_json(cxlkv, *args):
    out = subprocess.run([cxlkv, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def region_size_for(cxlkv, slots, workdir):
    """Smallest region size (bytes) whose format holds at least `slots` slots
    of 32 KiB, found by formatting and inspecting (the geometry is the
    engine's, src/region/geometry.cc)."""
    slot_bytes = BLOCK_TOKENS * KV_BYTES_PER_TOKEN
    per_slot = slot_bytes + 64 + 4 + 8
    size = slots * per_slot + (4 << 20)
    path = os.path.join(workdir, "probe")
    for _ in range(6):
        size = (size + 4095) // 4096 * 4096
        subprocess.run([cxlkv, "format", "--region", path, "--region-size", str(size),
                        "--slot-size", str(slot_bytes)], check=True, capture_output=True)
        got = cxlkv_json(cxlkv, "inspect", "--region", path)["slots"]["free"]
        os.remove(path)
        if got >= slots and got - slots < 16:
            return size, got
        size += (slots - got) * per_slot + (16 * per_slot if got < slots else 0)
    return size, got


def replay(cxlkv, trace, slots, coherence, workdir, size=None):
    if size is None:
        size, got = region_size_for(cxlkv, slots, workdir)
    else:
        got = slots
    region = os.path.join(workdir, "region")
    try:
        j = cxlkv_json(cxlkv, "replay", "--region", region, "--region-size", str(size),
                       "--trace", trace, "--replicas", "2",
                       "--kv-bytes-per-token", str(KV_BYTES_PER_TOKEN), "--baseline", "shared",
                       "--routing", "round-robin", "--coherence", coherence, "--quiet")
    finally:
        for f in os.listdir(workdir):
            if f.startswith("region"):
                os.remove(os.path.join(workdir, f))
    if j.get("wrong_data", 0) or j.get("errors", 0):
        sys.exit(f"cxlkv replay reported wrong data or errors: {json.dumps(j)}")
    return j["hit_rate"], got


# evaluate.py's name of each software-mode model: policies.software's
# policy and arguments.
SOFTWARE = {
    "sw-sampled": ("sampled", {}),
    "sw-lru": ("lru", {}),
    "sw-lru-cross": ("lru-cross", {}),
    "sw-sampled-cross": ("sampled-cross", {}),
    "sw-lru-promote": ("lru", {"promote_age": 0}),
}


def _is_fraction(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def parse_size(text):
    """Bytes of "256MiB" / "2GiB", or None."""
    for unit, mult in (("MiB", 1 << 20), ("GiB", 1 << 30)):
        if text.endswith(unit):
            try:
                return int(float(text[:-len(unit)]) * mult)
            except ValueError:
                return None
    return None


def slots_of_size(cxlkv, size, workdir):
    """Data slots of 32 KiB blocks in a (hardware-mode) region of `size`
    bytes, as `cxlkv format` lays it out (scripts/sweep.sh's count)."""
    path = os.path.join(workdir, "probe")
    subprocess.run([cxlkv, "format", "--region", path, "--region-size", str(size),
                    "--slot-size", str(BLOCK_TOKENS * KV_BYTES_PER_TOKEN)], check=True,
                   capture_output=True)
    try:
        return cxlkv_json(cxlkv, "inspect", "--region", path)["slots"]["free"]
    finally:
        os.remove(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=os.path.join(ROOT, "data/traces/mooncake-conversation-trace.jsonl"))
    ap.add_argument("--generate", action="store_true",
                    help="a generated multi-turn trace with long shared prefixes (seed 1)")
    ap.add_argument("--capacities", default="0.05,0.1,0.2,0.3,0.5,0.75,1.0",
                    help="fractions of the working set, or region sizes (256MiB, 2GiB)")
    ap.add_argument("--sw-delay", type=int, default=0,
                    help="sw-*-cross: requests before the owner sees another host's use (0: at "
                         "once)")
    ap.add_argument("--sw-drain", type=float, default=0,
                    help="sw-*-cross, instead of --sw-delay: the owner reads the channel once "
                         "per this fraction of its partition's slots of its own stores (0: off)")
    ap.add_argument("--sw-ring", type=int, default=0,
                    help="sw-*-cross with --sw-drain: uses that wait per owner, older ones lost "
                         "beyond (0: no limit)")
    ap.add_argument("--policies", default="lru,belady,model,replay")
    ap.add_argument("--cxlkv", default=os.path.join(ROOT, "build/bin/cxlkv"))
    ap.add_argument("--json", default=None, help="append one JSON object per row here")
    ap.add_argument("--window", type=int, default=0,
                    help="indexed: data slots one sweep ranks (at least 1024; 0: all)")
    ap.add_argument("--batch", type=int, default=0,
                    help="indexed: victims one sweep queues (0: 1/64 of the slots)")
    a = ap.parse_args()
    pols = a.policies.split(",")
    known = {"lru", "belady", "model", "model-lru32", "indexed", "indexed-prefix", "replay",
             "replay-sw"} | set(SOFTWARE)
    if set(pols) - known:
        sys.exit(f"unknown policy {sorted(set(pols) - known)}; known: {sorted(known)}")
    if (a.window and a.window < 1024) or a.batch < 0 or (a.window and a.batch > a.window):
        sys.exit(f"--window {a.window} --batch {a.batch}: the window is 0 (the whole region) "
                 "or at least 1024 data slots, the batch 0 (1/64 of the slots) or at most the "
                 "window")
    sizes = [c for c in a.capacities.split(",") if not _is_fraction(c)]
    if sizes and not all(parse_size(c) for c in sizes):
        sys.exit(f"--capacities {a.capacities}: each must be a fraction of the working set "
                 "(0.05) or a region size (256MiB, 2GiB)")
    if a.sw_delay < 0:
        sys.exit(f"--sw-delay {a.sw_delay}: a number of requests, 0 or more")
    if not 0 <= a.sw_drain <= 1 or a.sw_ring < 0 or (a.sw_drain and a.sw_delay):
        sys.exit(f"--sw-drain {a.sw_drain} --sw-ring {a.sw_ring} --sw-delay {a.sw_delay}: the "
                 "drain is a fraction of a partition in [0, 1], the ring 0 or more, and a "
                 "drain and a delay do not go together")
    if ((sizes or any(p.startswith("replay") for p in pols))
            and not os.access(a.cxlkv, os.X_OK)):
        sys.exit(f"{a.cxlkv}: not an executable; build it (cmake --build build --target "
                 "cxlkv_cli) or pass --cxlkv, or leave the replay policies and region sizes out")
    workdir = tempfile.mkdtemp(prefix="cxlkv-evict-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    trace = a.trace
    name = os.path.basename(trace)
    if a.generate:
        trace = os.path.join(workdir, "multiturn.jsonl")
        with open(trace, "w") as f:
            gen_multiturn.generate(seed=1, out=f)
        name = "multiturn (gen_multiturn.py, seed 1)"
    chains = read_chains(trace)
    asked = sum(len(c) for c in chains)
    ws = len({h for c in chains for h in c})
    print(f"trace {name}: {len(chains)} requests, {asked} blocks asked, working set {ws} blocks")
    cols = [p for p in pols]
    head = "| capacity | slots | " + " | ".join(cols)
    if "lru" in pols:
        head += "".join(f" | {p} ÷ lru" for p in pols if p not in ("lru", "belady"))
    print(head + " |")
    print("|" + "---|" * (head.count("|")))
    jout = open(a.json, "a") if a.json else None
    try:
        for cap in a.capacities.split(","):
            size = None
            if _is_fraction(cap):
                frac = float(cap)
                slots = max(16, int(round(ws * frac)))
                label = f"{frac:.0%}"
            else:
                size = parse_size(cap)
                slots = slots_of_size(a.cxlkv, size, workdir)
                frac = slots / ws
                label = f"{cap} ({frac:.0%})"
            rates = {}
            local = {}
            swstats = {}  # sw-*: promoted copies, leading hits on the other partition's blocks
            used_slots = slots
            for p in pols:
                if p == "lru":
                    rates[p] = policies.exact_lru(chains, slots) / asked
                elif p == "belady":
                    rates[p] = policies.belady(chains, slots) / asked
                elif p == "model":
                    rates[p] = policies.region(chains, slots, victim="prefix") / asked
                elif p == "model-lru32":
                    rates[p] = policies.region(chains, slots, victim="lru32") / asked
                elif p in SOFTWARE:
                    pol, kw = SOFTWARE[p]
                    if pol.endswith("-cross"):
                        kw = dict(kw, delay=a.sw_delay, ring=a.sw_ring,
                                  drain=max(1, int(slots // 2 * a.sw_drain)) if a.sw_drain else 0)
                    st = {}
                    rates[p] = policies.software(chains, slots, pol, stats=st, **kw) / asked
                    swstats[p] = st
                elif p.startswith("indexed"):
                    rk = "prefix" if p == "indexed-prefix" else "lru-depth"
                    st = {}
                    rates[p] = policies.indexed(chains, slots, window=a.window or slots,
                                                batch=a.batch or max(1, slots // 64),
                                                rank=rk, stats=st) / asked
                    # Stores whose two index sets were full (victim among their 32).
                    local[p] = st["local"]
                else:
                    rates[p], used_slots = replay(a.cxlkv, trace, slots,
                                                  "software" if p == "replay-sw" else "hardware",
                                                  workdir, size=size)
            row = f"| {label} | {slots} | " + " | ".join(f"{rates[p]:.4f}" for p in pols)
            if "lru" in pols:
                row += "".join(f" | {rates[p] / rates['lru']:.3f}" if rates["lru"] else " | -"
                               for p in pols if p not in ("lru", "belady"))
            print(row + " |", flush=True)
            if jout:
                jout.write(json.dumps({"trace": name, "capacity": frac, "slots": slots,
                                       "region_size": size, "sw_delay": a.sw_delay,
                                       "sw_drain": a.sw_drain, "sw_ring": a.sw_ring,
                                       "window": a.window, "batch": a.batch,
                                       "region_slots": used_slots, "working_set": ws,
                                       "hit_rate": rates, "index_full_stores": local,
                                       "software": swstats}) + "\n")
                jout.flush()
    finally:
        if jout:
            jout.close()
        for f in os.listdir(workdir):
            os.remove(os.path.join(workdir, f))
        os.rmdir(workdir)


if __name__ == "__main__":
    main()
