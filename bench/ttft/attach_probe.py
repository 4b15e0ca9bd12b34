#!/usr/bin/env python3
"""What a replica that attaches to a region another process already filled
(a late joiner) pays, and when: the attach, the CUDA registration, and how
responsive the process stays meanwhile.

    attach_probe.py REGION_PATH [--size 32GiB] [--chunks 128] [--modes background,metadata]

A writer process formats the region and stores --chunks chunks (from the
GPU with --gpu, else from the CPU). Then, for each prefault mode, a fresh
process attaches the way a vLLM EngineCore does: the worker's handle
(prefault none; with --gpu registered with CUDA) first, then the manager's
(prefault MODE), and loads the chunks at once (first read), then again
(second read), then again after --settle-s. All the while a thread of that
process maps and unmaps 1 MiB every 2 ms, as an engine's allocator does:
its worst wait is how long the process's memory map was locked.

Prints one JSON object per mode and a table. Chunks are 256 tokens of
--kv-per-token bytes in --layers per-layer pages of 16 tokens, vLLM's
per-layer layout.
"""

import argparse
import json
import mmap
import os
import subprocess
import sys
import threading
import time

SIZES = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_size(s):
    for u, m in SIZES.items():
        if s.endswith(u):
            return int(float(s[:-len(u)]) * m)
    return int(s)


def geometry(a):
    page = 16 * a.kv_per_token // a.layers  # one layer's 16-token block
    return page, 16, page * 16 * a.layers   # page bytes, blocks per chunk, chunk bytes


def open_args(a, prefault):
    from cxlkv import open_region  # noqa: F401 (imported by the caller)

    _, _, chunk = geometry(a)
    return dict(size=a.size, slot_size=chunk, hash_algorithm="probe", hash_seed_fingerprint=7,
                prefault=prefault)


def keys(n):
    return [0xC0FFEE00000 + i for i in range(n)]


def tensors(a, torch, n_chunks):
    page, bpc, _ = geometry(a)
    blocks = n_chunks * bpc
    return [torch.empty((blocks, page), dtype=torch.int8, device="cuda") for _ in range(a.layers)]


def writer(a):
    import cxlkv

    page, bpc, chunk = geometry(a)
    t0 = time.perf_counter()
    r = cxlkv.open_region(a.region, **open_args(a, "at_attach"))
    ns = r.register_namespace(cxlkv.NamespaceDesc("probe", "bfloat16", "HND"))
    out = {"format_s": round(time.perf_counter() - t0, 2)}
    if a.gpu:
        import torch
        from cxlkv import gpu

        g = gpu.GpuRegion(r)
        kv = tensors(a, torch, a.chunks)
        for t in kv:
            t.random_(-128, 127)
        res = g.store(ns, keys(a.chunks), kv, list(range(a.chunks * bpc)), bpc)
        out["stored"] = res.stored
        g.close()
    else:
        import random

        rnd = random.Random(1)
        body = bytes(rnd.getrandbits(8) for _ in range(4096)) * (chunk // 4096)
        for k in keys(a.chunks):
            r.store(ns, cxlkv.as_key(k), body)
        out["stored"] = a.chunks
    print(json.dumps(out), flush=True)


class Sampler(threading.Thread):
    """Maps and unmaps 1 MiB every 2 ms; records (time since start, wait)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.stop, self.t0 = [], False, time.perf_counter()

    def run(self):
        while not self.stop:
            t = time.perf_counter()
            m = mmap.mmap(-1, 1 << 20)
            m[0] = 1
            m.close()
            self.samples.append((t - self.t0, time.perf_counter() - t))
            time.sleep(0.002)

    def worst(self, t_from=0.0, t_to=1e9):
        w = [d for t, d in self.samples if t_from <= t < t_to]
        return round(max(w) * 1e3, 2) if w else None


def joiner(a, mode):
    import cxlkv

    s = Sampler()
    s.start()
    out = {"mode": mode}
    page, bpc, _ = geometry(a)
    t0 = time.perf_counter()
    w = cxlkv.open_region(a.region, **dict(open_args(a, "none"), create_if_missing=False))
    out["worker_attach_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    g = kv = None
    buf = bytearray(geometry(a)[2])
    if a.gpu:
        import torch
        from cxlkv import gpu

        kv = tensors(a, torch, a.chunks)
        t0 = time.perf_counter()
        g = gpu.GpuRegion(w)
        out["register_s"] = round(time.perf_counter() - t0, 2)
    t_mgr = time.perf_counter()
    m = cxlkv.open_region(a.region, **dict(open_args(a, mode), create_if_missing=False))
    out["manager_attach_ms"] = round((time.perf_counter() - t_mgr) * 1e3, 1)
    ns = m.register_namespace(cxlkv.NamespaceDesc("probe", "bfloat16", "HND"))
    ks = keys(a.chunks)

    def load():
        t = time.perf_counter()
        pins = m.pin_prefix(ns, [cxlkv.as_key(k) for k in ks])  # the manager's lookups
        if g is not None:
            res = g.load(ns, ks, kv, list(range(a.chunks * bpc)), bpc)
            n = res.loaded
            torch_sync()
        else:
            n = sum(1 for k in ks if w.load(ns, cxlkv.as_key(k), buf) > 0)
        pins.release()
        return round((time.perf_counter() - t) * 1e3, 1), n

    def torch_sync():
        import torch

        torch.cuda.synchronize()

    out["first_load_ms"], out["first_loaded"] = load()
    out["second_load_ms"], _ = load()
    out["first_two_at_s"] = round(time.perf_counter() - t_mgr, 2)
    time.sleep(a.settle_s)
    out["settled_load_ms"], _ = load()
    s.stop = True
    s.join()
    since = t_mgr - s.t0
    out["worst_map_wait_ms_after_manager_attach"] = s.worst(since)
    out["worst_map_wait_ms_before"] = s.worst(0, since)
    # When the process's memory map was free again: the end of the last wait over 10 ms.
    long = [(t, d) for t, d in s.samples if t >= since and d > 0.010]
    out["map_locked_until_s"] = round(max(t + d for t, d in long) - since, 2) if long else 0.0
    if g is not None:
        g.close()
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("region")
    ap.add_argument("--size", type=parse_size, default=parse_size("32GiB"))
    ap.add_argument("--chunks", type=int, default=128)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--kv-per-token", type=int, default=128 << 10)
    ap.add_argument("--modes", default="background,metadata")
    ap.add_argument("--settle-s", type=float, default=3.0)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--role", choices=("main", "writer", "joiner"), default="main")
    ap.add_argument("--mode", default="background")
    a = ap.parse_args()
    if a.role == "writer":
        return writer(a)
    if a.role == "joiner":
        return joiner(a, a.mode)
    if os.path.exists(a.region):
        os.unlink(a.region)
    base = [sys.executable, os.path.abspath(__file__), a.region, "--size", str(a.size),
            "--chunks", str(a.chunks), "--layers", str(a.layers), "--kv-per-token",
            str(a.kv_per_token), "--settle-s", str(a.settle_s)] + (["--gpu"] if a.gpu else [])
    rows = []
    try:
        w = subprocess.run(base + ["--role", "writer"], capture_output=True, text=True)
        if w.returncode:
            sys.exit(f"attach_probe: writer failed:\n{w.stderr[-3000:]}")
        print("writer:", w.stdout.strip().splitlines()[-1], flush=True)
        for mode in a.modes.split(","):
            j = subprocess.run(base + ["--role", "joiner", "--mode", mode], capture_output=True,
                               text=True)
            if j.returncode:
                sys.exit(f"attach_probe: joiner ({mode}) failed:\n{j.stderr[-3000:]}")
            rows.append(json.loads(j.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        if os.path.exists(a.region):
            os.unlink(a.region)
    cols = ("mode", "register_s", "manager_attach_ms", "first_load_ms", "second_load_ms",
            "settled_load_ms", "worst_map_wait_ms_after_manager_attach", "map_locked_until_s")
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r.get(c, "-")) for c in cols))


if __name__ == "__main__":
    main()
