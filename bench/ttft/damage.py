"""The integrity step of issue 28 (bench only): KV bytes damaged between
store and load by a writer outside every engine, as another tenant or a bug
with access to the memory would, and what each tier then did with them.

Where the stored KV is reachable from outside:
- T4 (cxlkv): the region file. A block's payload is bytes [0, len) at
  data_offset + data x slot_stride, `data` being the data slot its directory
  entry names (docs/region_format.md); the blocks that a request stored are
  the READY (entry, generation) pairs that appeared (cxlkv.scan_slots on an
  observer that maps the region).
- T5 (LMCache, L1 in DRAM): the L1 pool, LMCache's POSIX shared-memory
  segment /dev/shm/lmcache_l1_pool_<server pid> (lmcache_tier.py).
- T6 (LMCache, devdax L1): the file given to --l1-devdax-path.
For T5/T6 LMCache keeps its index inside the server process, so the stored
objects are found as the 4 KiB pages of the L1 file whose contents changed
across the store (per-page digests before and after).

Damage modes: "byte" XORs one byte (0xFF) at the start of every 4 KiB of
each stored range (one bf16 value in 2,048: a checksum catches it, the
output may not show it); "zero" zeroes every stored byte (the output of the
seeded model then changes: the oracle's poisoned-KV control shows that).

Verdict per damaged request (req2 again on the replica that never stored
the prompt, after the same request had loaded the undamaged KV):
- "detected, recomputed": fewer tokens loaded than undamaged, or the tier
  counted the damage itself, and the output equal to the undamaged one;
- "detected in part, damage served": detected so, but the output changed;
- "served, output changed" / "served, output unchanged": as many tokens
  loaded as undamaged (nothing was refused);
- "no load to damage": the undamaged request loaded nothing (the tier did
  not reuse, so the step says nothing about integrity);
- "request failed": the damaged request failed (its error is kept).
"""

import os

PAGE = 4096
MODES = ("byte", "zero")


def page_digests(path, length=None):
    """Per-4-KiB-page (sum, xor) of the file's 64-bit words: a page whose
    bytes changed almost surely changes one of the two."""
    import numpy as np

    length = os.path.getsize(path) if length is None else length
    pages = length // PAGE
    out = np.zeros((pages, 2), dtype=np.uint64)
    if not pages:
        return out
    mm = np.memmap(path, dtype=np.uint64, mode="r", shape=(pages * PAGE // 8,))
    step = 16384  # 64 MiB at a time
    for i in range(0, pages, step):
        blk = np.asarray(mm[i * 512:(i + step) * 512]).reshape(-1, 512)
        out[i:i + len(blk), 0] = blk.sum(axis=1, dtype=np.uint64)
        out[i:i + len(blk), 1] = np.bitwise_xor.reduce(blk, axis=1)
    del mm
    return out


def changed_ranges(before, after):
    """[(offset, length)] of the runs of pages whose digests differ."""
    import numpy as np

    n = min(len(before), len(after))
    diff = np.flatnonzero((before[:n] != after[:n]).any(axis=1))
    out = []
    for p in diff.tolist():
        if out and out[-1][0] + out[-1][1] == p * PAGE:
            out[-1] = (out[-1][0], out[-1][1] + PAGE)
        else:
            out.append((p * PAGE, PAGE))
    return out


class RegionSlots:
    """T4's stored payloads, located through an observer of the region."""

    def __init__(self, observer):
        from cxlkv import _cxlkv  # scan_slots: the binding's own (include/cxlkv/lifecycle.h)

        self.native = _cxlkv
        self.region = observer
        self.info = observer.info()

    def ready(self):
        rows = self.native.scan_slots(self.region, 0, self.info.num_entries)
        return {(slot, gen): (length, data)
                for slot, state, gen, _owner, _ns, length, _key, _depth, data in rows
                if state == "ready"}

    def ranges(self, before, after):
        """Payload ranges [(file offset, len)] of slots READY now and not before."""
        out = []
        for (slot, gen), (length, data) in sorted(after.items()):
            if (slot, gen) in before:
                continue
            if length <= 0 or length > self.info.slot_size:  # region bytes are untrusted
                continue
            if data >= self.info.num_slots:
                continue
            out.append((self.info.offset + self.info.data_offset + data * self.info.slot_stride,
                        length))
        return out


def apply(path, ranges, mode):
    """Damages ``ranges`` of ``path`` in place; returns the bytes written."""
    if mode not in MODES:
        raise ValueError(f"damage mode {mode!r}: one of {', '.join(MODES)}")
    written = 0
    fd = os.open(path, os.O_RDWR)
    try:
        for off, length in ranges:
            if mode == "zero":
                pos = 0
                while pos < length:
                    n = min(length - pos, 1 << 22)
                    os.pwrite(fd, bytes(n), off + pos)
                    pos += n
                written += length
            else:
                for k in range(0, length, PAGE):
                    b = os.pread(fd, 1, off + k)
                    os.pwrite(fd, bytes([b[0] ^ 0xFF]), off + k)
                    written += 1
    finally:
        os.close(fd)
    return written


def verdict(clean, damaged, clean_hit, damaged_hit, reported=0, error=None):
    """``reported``: damaged chunks the tier itself counted (cxlkv's CRC
    fallbacks); vLLM may count a promised load as a hit before the worker
    finds it bad, so a refusal shows in either."""
    if error:
        return "request failed"
    if not clean_hit:
        return "no load to damage"
    same = clean == damaged
    if damaged_hit < clean_hit or reported:
        return "detected, recomputed" if same else "detected in part, damage served"
    return "served, output unchanged" if same else "served, output changed"
