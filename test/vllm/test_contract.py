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


# Run by the interpreter before pytest (`python -c`): vLLM's NVML wrapper
# (vllm.third_party.pynvml, what its CUDA platform detection asks in every
# release 0.26-0.34) reports one GPU, as on the GPU machine, so vLLM's own
# detection names CudaPlatform; pytest then runs with the arguments given.
NVML_SEES_A_GPU = """
import importlib.machinery, sys

class NvmlSeesAGpu:
    def find_spec(self, name, path, target=None):
        if name != "vllm.third_party.pynvml":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(m):
            run(m)
            m.nvmlInit = lambda *a, **k: None
            m.nvmlShutdown = lambda: None
            m.nvmlDeviceGetCount = lambda: 1

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, NvmlSeesAGpu())
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def _run(release, boot=None, args=()):
    """contract.py against `release`'s tree in a fresh interpreter (pytest's
    arguments `args`, run by the code `boot` instead of `-m pytest` when
    given): (rc, stdout, stderr)."""
    src = os.path.join(ROOT, release)
    with open(os.path.join(src, f"vllm-{release}.dist-info", "METADATA")) as f:
        if f"Version: {release}\n" not in f.read():
            return 1, "", f"{src} is not vLLM {release}'s tree"
    env = dict(os.environ, CXLKV_VLLM_SRC=src, CXLKV_VLLM_RELEASE=release, PYTHONHASHSEED="0")
    out = subprocess.run(
        [sys.executable, *(("-c", boot) if boot else ("-m", "pytest")), "-q", "-rs",
         "-p", "no:cacheprovider", *args, os.path.join(HERE, "contract.py")],
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


@pytest.mark.skipif(not ROOT, reason="CXLKV_VLLM_SRC_ROOT unset: scripts/test.d/45-vllmapi.sh "
                                     "sets it (scripts/vllm-src.sh)")
def test_contract_where_vllm_detects_a_gpu():
    """The newest release's contract where vLLM's platform detection finds a
    GPU, as on the GPU machine (scripts/gpu-vllm.sh --contract; the tensors
    stay on the CPU here): the tree still loads and the tests pass, because
    contract.py fixes vLLM's platform before it is resolved (its module doc).
    Without that, vLLM picks CudaPlatform, whose module imports the native
    kernels the tree lacks (0.34: ModuleNotFoundError vllm._C_stable_libtorch),
    and a test importing the half-loaded modules again met "LayerName is
    already registered as an opaque type": what the GPU run showed. The tree
    check, the DevicePointers round trip and the NONE_HASH test (the one that
    met the second error) are run."""
    release = compat.CHECKED[compat.NEWEST]
    rc, out, err = _run(release, NVML_SEES_A_GPU,
                        ("-s", "-k", "tree_is_this or round_trip or none_hash"))
    summary = out.strip().splitlines()[-1] if out.strip() else ""
    print(f"vLLM {release}, NVML reporting a GPU: {summary}")
    assert rc == 0 and re.search(r"\b3 passed\b", summary), \
        f"vLLM {release}:\n{out[-12000:]}\n{err[-4000:]}"
    assert f"vLLM {release} detects vllm.platforms.cuda.CudaPlatform" in out, out[-4000:]
