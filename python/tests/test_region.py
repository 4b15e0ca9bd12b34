"""Bindings of the Region API (CPU): values round-trip, Status codes arrive as
the documented exception classes, keys convert."""
import os
import unittest

import cxlkv


def _path(tag):
    return f"/dev/shm/cxlkv-pytest-{os.getpid()}-{tag}"


class RegionBindingTest(unittest.TestCase):
    def setUp(self):
        self.path = _path(self._testMethodName)
        self.region = cxlkv.open_region(self.path, size=64 << 20, slot_size=256 << 10,
                                        hash_algorithm="test", hash_seed_fingerprint=7,
                                        prefault="none")
        self.ns = self.region.register_namespace(cxlkv.NamespaceDesc("m", "bfloat16", "HND"))

    def tearDown(self):
        del self.region
        os.unlink(self.path)

    def test_store_then_load_returns_same_bytes(self):
        data = os.urandom(200_000)
        self.assertEqual(self.region.store(self.ns, cxlkv.as_key(1), data), cxlkv.StoreOutcome.STORED)
        out = bytearray(256 << 10)
        self.assertEqual(self.region.load(self.ns, cxlkv.as_key(1), out), len(data))
        self.assertEqual(bytes(out[:len(data)]), data)
        self.assertEqual(self.region.store(self.ns, cxlkv.as_key(1), data), cxlkv.StoreOutcome.DUPLICATE)

    def test_store_takes_the_chunks_depth_in_its_chain(self):
        # depth: an eviction hint (the engine's tests show its effect); the
        # binding passes it, scan_slots reads it back from the slot (so do
        # delegated reservations: begin_write), and what is not a depth is refused.
        from cxlkv import _cxlkv

        for d in range(4):
            self.assertEqual(self.region.store(self.ns, cxlkv.as_key(100 + d), b"c%d" % d, depth=d),
                             cxlkv.StoreOutcome.STORED)
        self.assertEqual(self.region.lookup_prefix(self.ns, [cxlkv.as_key(100 + d) for d in range(4)]), 4)
        w = _cxlkv.begin_write(self.region, self.ns, cxlkv.as_key(300), 64, depth=9)
        slots = _cxlkv.scan_slots(self.region, 0, self.region.info().num_entries)
        depth = {(v[6].hi, v[6].lo): v[7] for v in slots if v[1] in ("ready", "writing")}
        self.assertEqual([depth[(k.hi, k.lo)] for k in cxlkv.as_keys([100, 101, 102, 103, 300])],
                         [0, 1, 2, 3, 9])
        _cxlkv.abort_write(self.region, w)
        with self.assertRaises(TypeError):
            self.region.store(self.ns, cxlkv.as_key(200), b"x", depth=-1)

    def test_miss_raises_not_found_which_is_a_key_error(self):
        with self.assertRaises(cxlkv.NotFoundError) as cm:
            self.region.load(self.ns, cxlkv.as_key(99), bytearray(16))
        self.assertIsInstance(cm.exception, KeyError)
        self.assertFalse(self.region.lookup(self.ns, cxlkv.as_key(99)))

    def test_too_large_block_raises_invalid_argument(self):
        with self.assertRaises(cxlkv.InvalidArgumentError):
            self.region.store(self.ns, cxlkv.as_key(2), bytes((256 << 10) + 1))
        self.assertEqual(self.region.process_counters()["store_failed_too_large"], 1)

    def test_small_destination_raises_invalid_argument(self):
        self.region.store(self.ns, cxlkv.as_key(3), bytes(1000))
        with self.assertRaises(cxlkv.InvalidArgumentError):
            self.region.load(self.ns, cxlkv.as_key(3), bytearray(999))

    def test_mismatched_config_is_refused(self):
        with self.assertRaises(cxlkv.InvalidArgumentError) as cm:
            cxlkv.open_region(self.path, slot_size=128 << 10, hash_algorithm="test", prefault="none")
        self.assertIn("slot", str(cm.exception))

    def test_prefix_lookup_and_pins(self):
        keys = [cxlkv.as_key(i) for i in range(10, 15)]
        for k in keys[:3]:
            self.region.store(self.ns, k, b"abc")
        self.assertEqual(self.region.lookup_prefix(self.ns, keys), 3)
        pins = self.region.pin_prefix(self.ns, keys)
        self.assertEqual(len(pins), 3)
        with self.assertRaises(cxlkv.BusyError):
            self.region.drop(self.ns, keys[0])
        pins.release()
        self.region.drop(self.ns, keys[0])
        self.assertEqual(self.region.lookup_prefix(self.ns, keys), 0)

    def test_verify_and_wipe_report(self):
        self.region.store(self.ns, cxlkv.as_key(20), b"x" * 100)
        rep = self.region.verify(False)
        self.assertEqual((rep["ready"], rep["verified"], rep["crc_failures"]), (1, 1, 0))
        # Layout 5's data-word checks (Region::ScrubReport): a clean region has none to settle.
        self.assertEqual((rep["ready_off_data"], rep["data_unsettled"], rep["data_settled"]),
                         (0, 0, 0))
        self.assertEqual(self.region.wipe()["dropped"], 1)

    def test_keys_convert_from_ids_bytes_and_hex(self):
        k = cxlkv.as_key(bytes(range(32)))
        self.assertEqual(k.hi, 0x0001020304050607)
        self.assertEqual(k.lo, 0x08090A0B0C0D0E0F)
        self.assertEqual(cxlkv.as_key(k.hex()), k)
        self.assertEqual(cxlkv.as_key(5), cxlkv.BlockKey.from_id(5))
        with self.assertRaises(cxlkv.InvalidArgumentError):
            cxlkv.as_key(b"short")

    def test_info_reports_geometry(self):
        info = self.region.info()
        self.assertEqual(info.slot_size, 256 << 10)
        self.assertGreater(info.num_slots, 100)
        self.assertEqual(info.config.hash_algorithm, "test")


if __name__ == "__main__":
    unittest.main()
