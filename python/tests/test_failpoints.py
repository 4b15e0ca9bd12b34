"""Failpoints exist only in test builds (-DCXLKV_FAILPOINTS=ON): in a release
build, the wheel's configuration, a stray CXLKV_FAILPOINT naming every point
does nothing and the engine carries no failpoint code; in a test build the
same variable kills the process at the first point. The python stage builds
the binding as the wheel does (failpoints off); the vLLM test venv builds it
with them on."""
import os
import subprocess
import sys
import unittest

from cxlkv import _cxlkv

# Every point in src/region/failpoint.h, each set to kill.
POINTS = ("open.after_create format.after_lock format.mid_zero write.before_claim "
          "write.after_claim write.mid_copy write.before_commit evict.after_take "
          "pin.before_pin pin.after_pin read.mid_copy reclaim.mid_sweep").split()

CHILD = r"""
import os, sys
import cxlkv
path = sys.argv[1]
r = cxlkv.open_region(path, size=8 << 20, slot_size=64 << 10, hash_algorithm="test",
                      prefault="none")
ns = r.register_namespace(cxlkv.NamespaceDesc("m", "bfloat16", "HND"))
keys = [cxlkv.as_key(i) for i in range(3)]
for k in keys:
    r.store(ns, k, os.urandom(1000))
pins = r.pin_prefix(ns, keys)
out = bytearray(64 << 10)
assert r.load(ns, keys[0], out) == 1000
print("survived")
"""


class FailpointTest(unittest.TestCase):
    def run_child(self, env_value):
        path = f"/dev/shm/cxlkv-pytest-{os.getpid()}-failpoints"
        env = dict(os.environ)
        if env_value is not None:
            env["CXLKV_FAILPOINT"] = env_value
        try:
            return subprocess.run([sys.executable, "-c", CHILD, path], env=env,
                                  capture_output=True, text=True, timeout=120)
        finally:
            if os.path.exists(path):
                os.unlink(path)

    def test_the_child_survives_without_the_variable(self):
        p = self.run_child(None)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("survived", p.stdout)

    def test_a_stray_variable_acts_only_in_a_test_build(self):
        p = self.run_child(",".join(f"{name}:kill" for name in POINTS))
        if _cxlkv._FAILPOINTS_BUILT:
            self.assertEqual(p.returncode, -9, "a failpoint build ignored CXLKV_FAILPOINT")
        else:
            self.assertEqual(p.returncode, 0, "a release build acted on CXLKV_FAILPOINT: "
                             + p.stderr)
            self.assertIn("survived", p.stdout)

    def test_a_release_build_carries_no_failpoint_code(self):
        with open(_cxlkv.__file__, "rb") as f:
            image = f.read()
        # failpoint.cc's getenv("CXLKV_FAILPOINT") and the FailpointHit symbol.
        for needle in (b"CXLKV_FAILPOINT", b"FailpointHit"):
            self.assertEqual(needle in image, bool(_cxlkv._FAILPOINTS_BUILT), needle)


if __name__ == "__main__":
    unittest.main()
