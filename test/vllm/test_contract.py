"""The contract test of every vLLM release cxlkv.vllm supports, one per minor.

For each release in ``cxlkv.vllm.compat.CHECKED`` (0.26 to the newest), its
Python tree (the wheel's ``*.py`` files, unpacked by scripts/vllm-src.sh into
``$CXLKV_VLLM_SRC_ROOT/<release>``, never installed) is loaded whole in a
fresh interpreter and test/vllm/contract.py runs against it: spec, manager
and worker built on that release's own classes and driven with its argument
types (contract.py's docstring says what is checked). A new release is one
line in CHECKED. Run by scripts/test.d/45-vllmapi.sh, which fetches the
trees and sets CXLKV_VLLM_SRC_ROOT.
"""
import concurrent.futures
import os
import re
import subprocess
import sys

import pytest

from cxlkv.vllm import compat

ROOT = os.environ.get("CXLKV_VLLM_SRC_ROOT", "")
HERE = os.path.dirname(os.path.abspath(__file__))


def test_supported_is_exactly_the_checked_releases():
    assert compat.SUPPORTED == tuple(compat.CHECKED)
    assert [compat.minor(r) for r in compat.CHECKED.values()] == list(compat.CHECKED)
    assert compat.NEWEST == max(compat.CHECKED, key=lambda m: tuple(map(int, m.split("."))))


def _run(release):
    """contract.py against `release`'s tree in a fresh interpreter: (rc, stdout, stderr)."""
    src = os.path.join(ROOT, release)
    with open(os.path.join(src, f"vllm-{release}.dist-info", "METADATA")) as f:
        if f"Version: {release}\n" not in f.read():
            return 1, "", f"{src} is not vLLM {release}'s tree"
    env = dict(os.environ, CXLKV_VLLM_SRC=src, CXLKV_VLLM_RELEASE=release, PYTHONHASHSEED="0")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         os.path.join(HERE, "contract.py")],
        env=env, capture_output=True, text=True, timeout=900)
    return out.returncode, out.stdout, out.stderr


@pytest.fixture(scope="module")
def runs():
    """Every release's run, two at a time (one per core: each is mostly
    importing its vLLM and torch), started on first use."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    futures = {m: pool.submit(_run, r) for m, r in compat.CHECKED.items()}
    yield futures
    pool.shutdown(wait=True)


@pytest.mark.skipif(not ROOT, reason="CXLKV_VLLM_SRC_ROOT unset: scripts/test.d/45-vllmapi.sh "
                                     "sets it (scripts/vllm-src.sh)")
@pytest.mark.parametrize("minor", list(compat.CHECKED))
def test_contract(minor, runs):
    rc, out, err = runs[minor].result()
    summary = out.strip().splitlines()[-1] if out.strip() else ""
    print(f"vLLM {compat.CHECKED[minor]}: {summary}")
    assert rc == 0 and re.search(r"\b\d+ passed\b", summary) and " failed" not in summary, \
        f"vLLM {compat.CHECKED[minor]}:\n{out[-12000:]}\n{err[-4000:]}"
