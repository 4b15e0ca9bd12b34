"""Bindings of the delegated, parted writes (cxlkv/delegate.h): a reservation
made here is filled part by part from page tensors, committed, and loaded back
part by part; a part never filled is refused at commit."""
import array
import ctypes
import os
import random
import unittest

import cxlkv
from cxlkv import _cxlkv

PAGE, BLOCKS, PER_CHUNK, PARTS = 512, 8, 2, 2


class _Kv:
    """Two page tensors of BLOCKS pages (a rank's KV cache) in one ctypes buffer."""

    def __init__(self, seed):
        self.buf = (ctypes.c_uint8 * (2 * BLOCKS * PAGE)).from_buffer_copy(
            random.Random(seed).randbytes(2 * BLOCKS * PAGE))
        base = ctypes.addressof(self.buf)
        self.tensors = [(base + t * BLOCKS * PAGE, PAGE, PAGE, BLOCKS) for t in range(2)]

    def page(self, t, b):
        off = (t * BLOCKS + b) * PAGE
        return bytes(self.buf[off:off + PAGE])


def _kv(seed):
    kv = _Kv(seed)
    return kv, kv.tensors


def ids(*v):
    return array.array("i", v)


class DelegateBindingTest(unittest.TestCase):
    def setUp(self):
        self.path = f"/dev/shm/cxlkv-pytest-{os.getpid()}-{self._testMethodName}"
        self.part_len = 2 * PER_CHUNK * PAGE
        self.slot = _cxlkv.parted_payload_len(PARTS, self.part_len)
        self.region = cxlkv.open_region(self.path, size=8 << 20, slot_size=self.slot,
                                        hash_algorithm="test", prefault="none")
        self.ns = self.region.register_namespace(cxlkv.NamespaceDesc("m", "bfloat16", "LBHNC"))

    def tearDown(self):
        del self.region
        os.unlink(self.path)

    def test_parts_round_trip_and_mid_chunk_load(self):
        key = cxlkv.as_key(1)
        w = _cxlkv.begin_write(self.region, self.ns, key, self.slot)
        self.assertTrue(w.open)
        token = _cxlkv.export_write_token(self.region, w)
        src = [_kv(p) for p in range(PARTS)]
        for p in range(PARTS):
            _cxlkv.fill_part(self.region, token, PARTS, self.part_len, p, src[p][1], PER_CHUNK,
                             ids(5, 2))
        self.assertFalse(self.region.lookup(self.ns, key))
        _cxlkv.commit_parted_write(self.region, w, PARTS, self.part_len)
        self.assertTrue(self.region.lookup(self.ns, key))
        for p in range(PARTS):
            dst, tensors = _kv(100 + p)
            n, _ = _cxlkv.load_part(self.region, self.ns, key, PARTS, self.part_len, p, tensors,
                                    PER_CHUNK, ids(0, 7))
            self.assertEqual(n, 2 * PER_CHUNK * PAGE)
            for t in range(2):
                self.assertEqual(dst.page(t, 0), src[p][0].page(t, 5))
                self.assertEqual(dst.page(t, 7), src[p][0].page(t, 2))
            dst, tensors = _kv(200 + p)
            _cxlkv.load_part(self.region, self.ns, key, PARTS, self.part_len, p, tensors,
                             PER_CHUNK, ids(3), skip=1)
            for t in range(2):
                self.assertEqual(dst.page(t, 3), src[p][0].page(t, 2))

    def test_unfilled_part_is_refused_and_full_region_is_an_outcome(self):
        key = cxlkv.as_key(2)
        w = _cxlkv.begin_write(self.region, self.ns, key, self.slot)
        token = _cxlkv.export_write_token(self.region, w)
        _cxlkv.fill_part(self.region, token, PARTS, self.part_len, 0, _kv(0)[1], PER_CHUNK,
                         ids(0, 1))
        with self.assertRaises(cxlkv.CorruptionError):
            _cxlkv.commit_parted_write(self.region, w, PARTS, self.part_len)
        self.assertFalse(w.open)
        self.assertFalse(self.region.lookup(self.ns, key))
        # A second reservation of a key being written is a lost race, not an error.
        w1 = _cxlkv.begin_write(self.region, self.ns, key, self.slot)
        w2 = _cxlkv.begin_write(self.region, self.ns, key, self.slot)
        self.assertTrue(w1.open)
        self.assertFalse(w2.open)
        self.assertEqual(w2.outcome, cxlkv.StoreOutcome.LOST_RACE)
        _cxlkv.abort_write(self.region, w1)

    def test_block_ids_of_another_type_are_refused(self):
        w = _cxlkv.begin_write(self.region, self.ns, cxlkv.as_key(3), self.slot)
        token = _cxlkv.export_write_token(self.region, w)
        with self.assertRaises(ValueError):
            _cxlkv.fill_part(self.region, token, PARTS, self.part_len, 0, _kv(0)[1], PER_CHUNK,
                             array.array("q", [0, 1]))
        with self.assertRaises(cxlkv.InvalidArgumentError):  # block id out of range
            _cxlkv.fill_part(self.region, token, PARTS, self.part_len, 0, _kv(0)[1], PER_CHUNK,
                             ids(0, BLOCKS))
        _cxlkv.abort_write(self.region, w)


if __name__ == "__main__":
    unittest.main()
