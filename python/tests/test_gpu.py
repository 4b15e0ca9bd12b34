"""Bindings of the GPU path (RegionGpu through cxlkv.gpu) with CUDA tensors in
vLLM's KV layout: round trip bit-exact (also into another process), corrupt
slot detected, failure policy. Skipped, with the reason, where the package
was built without CUDA or there is no GPU; CXLKV_REQUIRE_GPU=1 (set by
scripts/gpu.sh) turns a skip into a failure."""
import hashlib
import mmap
import os
import subprocess
import sys
import textwrap
import unittest

import cxlkv


def _why_no_gpu():
    if not cxlkv.HAVE_CUDA:
        return "cxlkv built without CUDA (-DCXLKV_CUDA=OFF); run scripts/gpu.sh on a GPU machine"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    return None


WHY = _why_no_gpu()
if WHY and os.environ.get("CXLKV_REQUIRE_GPU") == "1":
    raise RuntimeError(f"GPU required (CXLKV_REQUIRE_GPU=1): {WHY}")

PAGE = 917504          # one 16-token page of Qwen2.5-7B, cross-layer
PER_CHUNK = 4          # GPU blocks per offloaded chunk (one region slot)


@unittest.skipIf(WHY is not None, f"GPU tests skipped: {WHY}")
class GpuBindingTest(unittest.TestCase):
    def setUp(self):
        import torch
        from cxlkv import gpu
        self.torch = torch
        self.path = f"/dev/shm/cxlkv-pytest-gpu-{os.getpid()}-{self._testMethodName}"
        self.region = cxlkv.open_region(self.path, size=256 << 20, slot_size=PAGE * PER_CHUNK,
                                        hash_algorithm="test", hash_seed_fingerprint=7)
        self.ns = self.region.register_namespace(cxlkv.NamespaceDesc("m", "bfloat16", "HND"))
        self.gpu = gpu.GpuRegion(self.region)
        self.assertTrue(self.gpu.direct)
        g = torch.Generator(device="cuda").manual_seed(1234)
        self.kv = torch.randint(-128, 128, (64, PAGE), dtype=torch.int8, device="cuda", generator=g)

    def tearDown(self):
        self.gpu.close()
        del self.gpu
        del self.region
        os.unlink(self.path)

    def _ids(self, seed, n):
        g = self.torch.Generator().manual_seed(seed)
        return self.torch.randperm(64, generator=g)[:n]

    def _chunk_bytes(self, kv, ids, c):
        return kv[ids[c * PER_CHUNK:(c + 1) * PER_CHUNK]].flatten()

    def test_round_trip_through_region_is_bit_exact(self):
        torch = self.torch
        ids = self._ids(1, 8 * PER_CHUNK)
        keys = list(range(100, 108))
        st = self.gpu.store(self.ns, keys, [self.kv], ids, PER_CHUNK)
        self.assertEqual(st.stored, 8, st.statuses)
        dst = torch.zeros_like(self.kv)
        ids2 = self._ids(2, 8 * PER_CHUNK)
        for path in ("direct", "staged"):
            dst.zero_()
            res = self.gpu.load(self.ns, keys, [dst], ids2, PER_CHUNK, path=path)
            self.assertEqual((res.loaded, res.prefix), (8, 8))
            for c in range(8):
                self.assertTrue(torch.equal(self._chunk_bytes(dst, ids2, c),
                                            self._chunk_bytes(self.kv, ids, c)), f"{path} chunk {c}")

    def test_another_process_loads_the_same_bytes(self):
        ids = list(range(0, 4 * PER_CHUNK))  # adjacent pages: merged into one piece per chunk
        keys = list(range(200, 204))
        self.assertEqual(self.gpu.store(self.ns, keys, [self.kv], ids, PER_CHUNK).stored, 4)
        want = hashlib.sha256(self.kv[:4 * PER_CHUNK].cpu().numpy().tobytes()).hexdigest()
        child = textwrap.dedent(f"""
            import hashlib, torch, cxlkv
            from cxlkv import gpu
            r = cxlkv.open_region({self.path!r}, create_if_missing=False, slot_size={PAGE * PER_CHUNK},
                                  hash_algorithm="test", hash_seed_fingerprint=7)
            ns = r.register_namespace(cxlkv.NamespaceDesc("m", "bfloat16", "HND"))
            g = gpu.GpuRegion(r)
            kv = torch.zeros(({4 * PER_CHUNK}, {PAGE}), dtype=torch.int8, device="cuda")
            res = g.load(ns, {keys!r}, [kv], list(range({4 * PER_CHUNK})), {PER_CHUNK})
            print(hashlib.sha256(kv.cpu().numpy().tobytes()).hexdigest())
        """)
        out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                             env=os.environ, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip().splitlines()[-1], want)

    def test_corrupt_slot_fails_the_load_and_is_dropped(self):
        torch = self.torch
        ids = self._ids(3, 4 * PER_CHUNK)
        keys = list(range(300, 304))
        self.assertEqual(self.gpu.store(self.ns, keys, [self.kv], ids, PER_CHUNK).stored, 4)
        # Find chunk 2's bytes in the region file and flip one bit there.
        needle = self._chunk_bytes(self.kv, ids, 2)[:64].cpu().numpy().tobytes()
        with open(self.path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
            at = m.find(needle)
            self.assertGreaterEqual(at, 0)
            m[at + 1000] ^= 0x01
        dst = torch.zeros_like(self.kv)
        with self.assertRaises(cxlkv.LoadFailedError) as cm:
            self.gpu.load(self.ns, keys, [dst], ids, PER_CHUNK)
        self.assertEqual([f[:2] for f in cm.exception.failed], [(2, "Corruption")])
        self.assertEqual(cm.exception.prefix, 2)
        self.assertFalse(self.region.lookup(self.ns, cxlkv.as_key(302)), "corrupt slot still served")
        res = self.gpu.load(self.ns, keys, [dst], ids, PER_CHUNK, on_failure="report")
        self.assertEqual([f[:2] for f in res.failed], [(2, "NotFound")])
        self.assertEqual(res.loaded, 3)

    def test_submitted_transfers_complete_in_order_with_the_same_bytes(self):
        torch = self.torch
        ids = self._ids(4, 6 * PER_CHUNK)
        keys = list(range(400, 406))
        store = self.gpu.submit_store(self.ns, keys, [self.kv], ids, PER_CHUNK)
        dst = torch.zeros_like(self.kv)
        ids2 = self._ids(5, 6 * PER_CHUNK)
        # Submitted after the store, so it runs after it (one worker thread).
        load = self.gpu.submit_load(self.ns, keys, [dst], ids2, PER_CHUNK)
        self.assertEqual(store.result(timeout=60).stored, 6)
        res = load.result(timeout=60)
        self.assertEqual((res.loaded, res.prefix), (6, 6))
        for c in range(6):
            self.assertTrue(torch.equal(self._chunk_bytes(dst, ids2, c), self._chunk_bytes(self.kv, ids, c)))
        missing = self.gpu.submit_load(self.ns, [999], [dst], ids2[:PER_CHUNK], PER_CHUNK)
        with self.assertRaises(cxlkv.LoadFailedError):
            missing.result(timeout=60)


if __name__ == "__main__":
    unittest.main()
