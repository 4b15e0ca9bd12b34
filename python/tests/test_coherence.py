"""coherence=software through the binding (docs/coherence.md): the mode, the
write partitions and this attacher's partition as options, reported in
RegionInfo, and the errors for a region of the other mode, a writer without
a partition and pins, which software mode does not have."""
import os
import subprocess
import sys
import unittest

import cxlkv

GEOMETRY = dict(size=16 << 20, slot_size=64 << 10, prefault="none")


def _path(tag):
    return f"/dev/shm/cxlkv-pytest-{os.getpid()}-{tag}"


class SoftwareCoherenceTest(unittest.TestCase):
    def setUp(self):
        self.path = _path(self._testMethodName)
        self.addCleanup(lambda: os.path.exists(self.path) and os.unlink(self.path))

    def _software(self, partition, **kw):
        return cxlkv.open_region(self.path, coherence="software", software_partitions=2,
                                 software_partition=partition, **GEOMETRY, **kw)

    def test_partition_zero_formats_and_info_reports_the_mode(self):
        r = self._software(0)
        i = r.info()
        self.assertEqual(i.layout_version, 6)
        self.assertEqual(i.config.coherence, cxlkv.CoherenceMode.SOFTWARE)
        self.assertEqual(i.config.software_partitions, 2)
        self.assertEqual(i.participant, 0)

    def test_another_process_on_partition_one_reads_what_partition_zero_stored(self):
        r = self._software(0)
        ns = r.register_namespace(cxlkv.NamespaceDesc("m", "bfloat16", "HND"))
        data = os.urandom(50_000)
        self.assertEqual(r.store(ns, cxlkv.as_key(5), data), cxlkv.StoreOutcome.STORED)
        # Another process, as another host would: partition 1 of the same region.
        child = (
            "import sys, cxlkv\n"
            f"r = cxlkv.open_region({self.path!r}, coherence='software', software_partition=1,"
            " prefault='none', create_if_missing=False)\n"
            "ns = r.register_namespace(cxlkv.NamespaceDesc('m', 'bfloat16', 'HND'))\n"
            "buf = bytearray(64 << 10)\n"
            "n = r.load(ns, cxlkv.as_key(5), buf)\n"
            "sys.stdout.buffer.write(bytes(buf[:n]))\n"
            "r.store(ns, cxlkv.as_key(6), b'from partition 1')\n")
        out = subprocess.run([sys.executable, "-c", child], capture_output=True, check=False)
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        self.assertEqual(out.stdout, data)
        buf = bytearray(64 << 10)
        n = r.load(ns, cxlkv.as_key(6), buf)
        self.assertEqual(bytes(buf[:n]), b"from partition 1")

    def test_pins_are_unsupported_in_software_mode(self):
        r = self._software(0)
        ns = r.register_namespace(cxlkv.NamespaceDesc("m", "bfloat16", "HND"))
        r.store(ns, cxlkv.as_key(1), b"x")
        with self.assertRaises(cxlkv.UnsupportedError) as cm:
            r.pin_prefix(ns, [cxlkv.as_key(1)])
        self.assertIn("coherence=software", str(cm.exception))
        self.assertTrue(r.lookup(ns, cxlkv.as_key(1)), "lookups work without pins")

    def test_the_other_mode_is_refused_naming_both(self):
        r = self._software(0)
        with self.assertRaises(cxlkv.InvalidArgumentError) as cm:
            cxlkv.open_region(self.path, register_participant=False, **GEOMETRY)
        self.assertIn("coherence mismatch: the region has software, this process expects hardware",
                      str(cm.exception))
        del r
        hw = _path(self._testMethodName + "-hw")
        self.addCleanup(lambda: os.path.exists(hw) and os.unlink(hw))
        h = cxlkv.open_region(hw, **GEOMETRY)
        with self.assertRaises(cxlkv.InvalidArgumentError) as cm:
            cxlkv.open_region(hw, coherence="software", register_participant=False, **GEOMETRY)
        self.assertIn("coherence mismatch: the region has hardware, this process expects software",
                      str(cm.exception))
        with self.assertRaises(cxlkv.InvalidArgumentError) as cm:
            cxlkv.open_region(hw, software_partition=1, **GEOMETRY)
        self.assertIn("coherence=software only", str(cm.exception))
        del h

    def test_a_writer_needs_a_partition_an_observer_does_not(self):
        r = self._software(0)
        ns = r.register_namespace(cxlkv.NamespaceDesc("m", "bfloat16", "HND"))
        r.store(ns, cxlkv.as_key(2), b"abc")
        with self.assertRaises(cxlkv.InvalidArgumentError) as cm:
            cxlkv.open_region(self.path, coherence="software", **GEOMETRY)
        self.assertIn("software_partition", str(cm.exception))
        with self.assertRaises(cxlkv.InvalidArgumentError) as cm:
            cxlkv.open_region(self.path, coherence="software", software_partition=2, **GEOMETRY)
        self.assertIn("software_partition 2 does not exist", str(cm.exception))
        obs = cxlkv.open_region(self.path, coherence="software", register_participant=False,
                                **GEOMETRY)
        self.assertEqual(obs.info().participant, -1)
        ns_obs = obs.register_namespace(cxlkv.NamespaceDesc("m", "bfloat16", "HND"))
        buf = bytearray(16)
        self.assertEqual(obs.load(ns_obs, cxlkv.as_key(2), buf), 3)

    def test_formatting_needs_the_partition_count(self):
        with self.assertRaises(cxlkv.InvalidArgumentError) as cm:
            cxlkv.open_region(self.path, coherence="software", software_partition=0, **GEOMETRY)
        self.assertIn("software_partitions", str(cm.exception))

    def test_the_partition_lock_refuses_a_second_writer_naming_its_holder(self):
        """CXL_PARTITION_LOCK (hostd's CDI spec; docs/coherence.md): a writer
        of a software-mode region takes flock on it before attaching, so a
        second process given the same partition on the node is refused,
        naming the lock file and the process that holds it, and the first
        keeps its partition. Readers take no lock."""
        lock = self.path + ".lock"
        open(lock, "w").close()
        self.addCleanup(os.unlink, lock)
        self._software(0)  # formats; no lock named: none taken
        env = dict(os.environ, CXL_PARTITION_LOCK=lock)
        child = (
            "import sys, cxlkv\n"
            f"r = cxlkv.open_region({self.path!r}, coherence='software', software_partition=0,"
            " prefault='none', create_if_missing=False)\n"
            "print('attached', flush=True)\n"
            "sys.stdin.read()\n"
            "print(r.info().participant)\n")
        first = subprocess.Popen([sys.executable, "-c", child], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            if first.stdout.readline().strip() != "attached":
                first.kill()
                self.fail(first.communicate()[1])
            os.environ["CXL_PARTITION_LOCK"] = lock
            try:
                with self.assertRaises(cxlkv.BusyError) as cm:
                    cxlkv.open_region(self.path, coherence="software", software_partition=0,
                                      prefault="none", create_if_missing=False)
                msg = str(cm.exception)
                self.assertIn(f"{lock} ($CXL_PARTITION_LOCK) is locked by pid {first.pid} (", msg)
                # A reader needs no partition and takes no lock.
                cxlkv.open_region(self.path, coherence="software", register_participant=False,
                                  prefault="none", create_if_missing=False)
            finally:
                del os.environ["CXL_PARTITION_LOCK"]
            out, err = first.communicate("", timeout=60)
            self.assertEqual(first.returncode, 0, err)
            self.assertEqual(out.split()[-1], "0", "the first writer kept partition 0")
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
        # The holder is gone: the lock is free again.
        os.environ["CXL_PARTITION_LOCK"] = lock
        try:
            r = cxlkv.open_region(self.path, coherence="software", software_partition=0,
                                  prefault="none", create_if_missing=False)
            self.assertEqual(r.info().participant, 0)
            del r
        finally:
            del os.environ["CXL_PARTITION_LOCK"]
            cxlkv.release_partition_lock()

    def test_unknown_mode_is_a_value_error(self):
        with self.assertRaises(ValueError):
            cxlkv.region_options(coherence="sofware")
        self.assertEqual(cxlkv.coherence_mode("SOFTWARE"), cxlkv.CoherenceMode.SOFTWARE)


if __name__ == "__main__":
    unittest.main()
