"""Bindings of the lifecycle API (include/cxlkv/lifecycle.h) and the heartbeat and
liveness keywords: values reach the engine, Status codes arrive as exceptions."""
import os
import unittest

import cxlkv


class LifecycleBindingTest(unittest.TestCase):
    def setUp(self):
        self.path = f"/dev/shm/cxlkv-pytest-{os.getpid()}-{self._testMethodName}"

    def tearDown(self):
        if os.path.exists(self.path):
            os.unlink(self.path)

    def _open(self, **kw):
        return cxlkv.open_region(self.path, size=8 << 20, slot_size=4096, hash_algorithm="t",
                                 prefault="none", **kw)

    def test_heartbeat_and_liveness_keywords_reach_the_engine(self):
        with self.assertRaises(cxlkv.InvalidArgumentError) as cm:
            self._open(heartbeat_interval_ns=25_000_000, liveness_timeout_ns=50_000_000)
        self.assertIn("4 x heartbeat", str(cm.exception))
        region = self._open(heartbeat_interval_ns=25_000_000, liveness_timeout_ns=100_000_000)
        self.assertGreaterEqual(region.info().participant, 0)
        del region
        with self.assertRaises(cxlkv.InvalidArgumentError):
            cxlkv.Region.open(self.path, cxlkv.region_options(prefault="none"),
                              heartbeat_interval_ns=61_000_000_000,
                              liveness_timeout_ns=300_000_000_000)

    def test_destroy_is_refused_while_attached_and_idempotent_after(self):
        region = self._open()
        report = cxlkv.check_attached(self.path, liveness_timeout_ns=100_000_000)
        self.assertTrue(report["attached"])
        self.assertTrue(report["locked_on_this_host"])
        with self.assertRaises(cxlkv.BusyError):
            cxlkv.destroy_region(self.path, liveness_timeout_ns=100_000_000)
        del region
        self.assertFalse(cxlkv.check_attached(self.path, liveness_timeout_ns=100_000_000)["attached"])
        cxlkv.destroy_region(self.path, liveness_timeout_ns=100_000_000)
        self.assertFalse(os.path.exists(self.path))
        cxlkv.destroy_region(self.path)  # absent: nothing to do

    def test_foreign_files_are_never_unformatted(self):
        with open(self.path, "w") as f:
            f.write("precious")
        with self.assertRaises(cxlkv.InvalidArgumentError):
            cxlkv.unformat_region(self.path)
        with open(self.path) as f:
            self.assertEqual(f.read(), "precious")

    def test_a_truncated_region_is_refused_not_grown(self):
        region = self._open()
        del region
        os.truncate(self.path, 4 << 20)
        with open(self.path, "rb") as f:
            cut = f.read()
        with self.assertRaises(cxlkv.InvalidArgumentError) as cm:
            self._open()
        self.assertIn("truncated", str(cm.exception))
        self.assertIn("cxlkv format --force --region-size 8388608", str(cm.exception))
        with open(self.path, "rb") as f:
            self.assertTrue(f.read() == cut, "the file was changed")

    def test_foreign_bytes_over_a_format_lock_word_are_never_formatted(self):
        data = b"x" * 100 + bytes((8 << 20) - 100)
        with open(self.path, "wb") as f:
            f.write(data)
        with self.assertRaises(cxlkv.InvalidArgumentError) as cm:
            self._open(format_stall_ns=50_000_000)
        self.assertIn("neither a cxlkv region nor blank", str(cm.exception))
        with open(self.path, "rb") as f:
            self.assertTrue(f.read() == data, "the file was changed")


if __name__ == "__main__":
    unittest.main()
