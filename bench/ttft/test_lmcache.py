"""CPU tests of the LMCache tiers' plumbing (lmcache_tier.py) and of the
integrity step's damage (damage.py); no engine. Run by the ttft stage
(scripts/test.d/70-ttft.sh) with the vLLM venv's python:

    python -m pytest -q bench/ttft/test_lmcache.py

The tests that parse the harness's command line with LMCache's own parser
need lmcache 0.5.3 importable (the stage puts it on PYTHONPATH); they fail,
not skip, when CXLKV_TTFT_LMCACHE_SITE names a directory without it.
"""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import damage  # noqa: E402
import lmcache_tier  # noqa: E402
import tiers  # noqa: E402


def _after(argv, flag):
    return argv[argv.index(flag) + 1]


def test_t5_server_argv_names_lmcaches_flags():
    argv = lmcache_tier.server_argv("T5", "py", zmq_port=5601, http_port=5602, l1_bytes=32 << 30)
    assert argv[:4] == ["py", "-m", "lmcache.cli.main", "server"]
    assert _after(argv, "--host") == "127.0.0.1" and _after(argv, "--port") == "5601"
    assert _after(argv, "--http-host") == "127.0.0.1" and _after(argv, "--http-port") == "5602"
    assert _after(argv, "--l1-size-gb") == "32"
    assert _after(argv, "--chunk-size") == "256" == str(tiers.GRANULARITY)
    assert _after(argv, "--eviction-policy") == "LRU"
    assert _after(argv, "--max-workers") == "2"  # one worker slot per replica
    assert "--no-l1-use-lazy" in argv and "--l1-devdax-path" not in argv
    assert "--shm-name" not in argv  # LMCache's default pool name, lmcache_l1_pool_<pid>


def test_t6_server_argv_maps_the_devdax_file_without_shm():
    argv = lmcache_tier.server_argv("T6", "py", zmq_port=1, http_port=2, l1_bytes=256 << 20,
                                    devdax_path="/dev/shm/x.dax")
    assert _after(argv, "--l1-devdax-path") == "/dev/shm/x.dax"
    assert _after(argv, "--shm-name") == ""
    assert _after(argv, "--l1-size-gb") == "0.25"
    assert "--no-l1-use-lazy" in argv


@pytest.mark.parametrize("bad", [dict(tier="T4"), dict(l1_bytes=0), dict(tier="T6")])
def test_server_argv_refuses_what_lmcache_would(bad):
    kw = dict(tier="T5", l1_bytes=1 << 30)
    kw.update(bad)
    with pytest.raises(ValueError):
        lmcache_tier.server_argv(kw.pop("tier"), "py", zmq_port=1, http_port=2, **kw)


def test_replica_flags_are_the_mp_connector_with_the_servers_port():
    f = tiers.flags("T5", lmcache_port=5733)
    assert f[0] == "--no-enable-prefix-caching" and f[1] == "--kv-transfer-config"
    cfg = json.loads(f[2])
    assert cfg == {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                   "kv_load_failure_policy": "recompute",
                   "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1",
                                                 "lmcache.mp.port": 5733}}
    assert tiers.flags("T6", lmcache_port=1) != tiers.flags("T5", lmcache_port=2)
    with pytest.raises(ValueError):
        tiers.flags("T5")


def _lmcache_parser():
    site = os.environ.get("CXLKV_TTFT_LMCACHE_SITE")
    if site:
        sys.path.insert(0, site)
    try:
        from lmcache.cli.commands.server import ServerCommand
    except ImportError as e:
        if site:
            raise AssertionError(f"lmcache not importable from {site}: {e}") from e
        pytest.skip(f"lmcache not importable ({e}); the ttft stage sets CXLKV_TTFT_LMCACHE_SITE")
    import argparse

    p = argparse.ArgumentParser()
    ServerCommand().add_arguments(p)
    return p


@pytest.mark.parametrize("tier", lmcache_tier.TIERS)
def test_lmcache_053_parses_the_harness_command_line(tier):
    """LMCache's own `lmcache server` parser takes every flag, and its config
    parsers give the memory the harness meant (L1 bytes, eager, shm/devdax)."""
    from importlib.metadata import version

    p = _lmcache_parser()
    assert version("lmcache") == lmcache_tier.VERSION
    argv = lmcache_tier.server_argv(tier, "py", zmq_port=5601, http_port=5602,
                                    l1_bytes=3 << 30, devdax_path="/dev/shm/y.dax")
    args = p.parse_args(argv[4:])
    from lmcache.v1.distributed.config import parse_args_to_config
    from lmcache.v1.multiprocess.config import (parse_args_to_http_frontend_config,
                                                parse_args_to_mp_server_config)

    mp = parse_args_to_mp_server_config(args)
    assert (mp.host, mp.port, mp.chunk_size) == ("127.0.0.1", 5601, 256)
    assert (mp.max_gpu_workers, mp.max_cpu_workers) == (2, 2)
    http = parse_args_to_http_frontend_config(args)
    assert (http.http_host, http.http_port) == ("127.0.0.1", 5602)
    mem = parse_args_to_config(args).l1_manager_config.memory_config
    assert mem.size_in_bytes == 3 << 30 and mem.use_lazy is False
    if tier == "T5":
        assert mem.devdax_path is None and mem.shm_name.startswith(lmcache_tier.SHM_PREFIX)
    else:
        assert mem.devdax_path == "/dev/shm/y.dax" and mem.shm_name == ""


@pytest.mark.parametrize("tier", lmcache_tier.TIERS)
def test_server_lifecycle_with_the_real_lmcache_server(tier, tmp_path):
    """A real `lmcache server` (it runs on this CPU class): ready on
    /healthcheck, its L1 the size asked in the file the integrity step
    damages, /status readable, and nothing left in /dev/shm after stop."""
    site = os.environ.get("CXLKV_TTFT_LMCACHE_SITE")
    if not site:
        pytest.skip("the ttft stage sets CXLKV_TTFT_LMCACHE_SITE (scripts/lmcache-site.sh)")
    srv = lmcache_tier.Server(f"test-{tier}", tier, python=sys.executable, log_dir=str(tmp_path),
                              l1_bytes=64 << 20, site=site)
    srv.start()
    try:
        srv.wait_ready(300)
        path = srv.l1_path()
        assert os.path.getsize(path) == 64 << 20, path
        assert srv.l1_counts() == (0, 0)
        if tier == "T5":
            assert path == f"/dev/shm/{lmcache_tier.SHM_PREFIX}{srv.pid}"
    finally:
        srv.stop()
    assert srv.proc.returncode is not None
    assert not os.path.exists(path)
    with open(srv.log_path) as f:
        assert "Uvicorn running on http://127.0.0.1:%d" % srv.http_port in f.read()


def test_a_t6_file_lmcache_refuses_is_the_tiers_result_in_the_report(tmp_path):
    """If LMCache 0.5.3 refuses T6's file, the tier's result is LMCache's own
    error: `ttft.py run` logs the start as failed (exit 1, no engine started)
    and the report prints it, not a timeout or a silent skip; the file is
    removed. Refused here as 0.5.3 refuses a file shorter than its L1
    (devdax_memory_allocator.py): the harness's file is --region-size (64 MiB),
    the L1 128 MiB (--lmcache-arg, the later --l1-size-gb wins)."""
    import subprocess

    import report
    from runlog import read

    site = os.environ.get("CXLKV_TTFT_LMCACHE_SITE")
    if not site:
        pytest.skip("the ttft stage sets CXLKV_TTFT_LMCACHE_SITE (scripts/lmcache-site.sh)")
    run = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ttft.py"),
         "run", str(run), "--platform", "cpu", "--python", sys.executable, "--tiers", "T6",
         "--prefixes", "512", "--sessions", "2", "--phases", "grid", "--max-model-len", "4096",
         "--region-size", "64MiB", "--start-timeout", "300", "--lmcache-site", site,
         "--lmcache-arg=--l1-size-gb=0.125"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    recs, torn = read(str(run / "log.jsonl"))
    assert torn == 0
    (failed,) = [r for r in recs if r.get("kind") == "start_failed"]
    path = failed["server"]["l1_path"]
    want = (f"RuntimeError: l1 devdax size ({128 << 20} bytes) exceeds {path} "
            f"capacity ({64 << 20} bytes)")
    assert failed["tier"] == "T6" and failed["cause"].endswith(want), failed
    assert failed["left_behind"] == [path] and not os.path.exists(path)
    assert not [r for r in recs if r.get("kind") in ("replica", "req", "skip")]
    s = report.build(recs)
    assert [(f["tier"], f["cause"]) for f in s["start_failures"]] == [("T6", failed["cause"])]
    assert "T6 (grid) did not start: " in report.tables(s) and want in report.tables(s)


def test_an_lmcache_tiers_start_estimate_counts_its_server():
    """The budget's estimate of a T5/T6 start adds its lmcache server's ready
    time to the replicas' (the peers run on an H100: server 18.6 s, replicas
    71.6 s), its own tier's if seen, else another LMCache tier's, else 20 s."""
    from types import SimpleNamespace

    import ttft

    h = ttft.Harness.__new__(ttft.Harness)
    h.call, h.platform = 1, "gpu"
    h.log = SimpleNamespace(records=[
        {"kind": "lmcache_server", "tier": "T5", "call": 0, "ready_s": 18.6},
        {"kind": "replica", "tier": "T5", "call": 0, "all_ready_s": 71.6},
        {"kind": "replica", "tier": "T2", "call": 1, "all_ready_s": 50.0}])
    assert h.start_estimate("T5") == pytest.approx(90.2)
    assert h.start_estimate("T6") == pytest.approx(50.0 + 20 + 18.6)  # T5's server
    assert h.start_estimate("T2") == 50.0
    h.log.records.append({"kind": "lmcache_server", "tier": "T6", "call": 1, "ready_s": 30.0})
    assert h.start_estimate("T6") == pytest.approx(50.0 + 20 + 30.0)
    h.log.records = []
    assert h.start_estimate("T6") == 80.0 and h.start_estimate("T0") == 60.0


def test_l1_pin_failed_reads_lmcaches_warning(tmp_path):
    """T6 on a GPU: 0.5.3 warns, and copies through pageable memory, when
    cudaHostRegister refuses the devdax map; the harness records it."""
    t6 = lmcache_tier.Server("t6", "T6", python=sys.executable, log_dir=str(tmp_path),
                             l1_bytes=64 << 20)
    t5 = lmcache_tier.Server("t5", "T5", python=sys.executable, log_dir=str(tmp_path),
                             l1_bytes=64 << 20)
    assert t6.l1_pin_failed() is False  # no log yet
    with open(t6.log_path, "w") as f:
        f.write("[2026-12-07 01:04:29,628] LMCache INFO: L1Manager: Device-DAX L1 tier enabled; "
                "CPU-only L1 disabled (l1_manager.py:202:lmcache.v1.distributed.l1_manager)\n")
    assert t6.l1_pin_failed() is False
    with open(t6.log_path, "a") as f:
        f.write("[2026-12-07 01:04:30,001] LMCache WARNING: pin_memory failed for Device-DAX L1 "
                "mapping /dev/shm/cxlkv-ttft-lmcache/t6.dax; falling back to pageable host "
                "copies (devdax_memory_allocator.py:345)\n")
    assert t6.l1_pin_failed() is True
    assert t5.l1_pin_failed() is None


def test_a_full_l1_that_evicts_as_it_stores_still_counts_the_store(tmp_path, monkeypatch):
    """wait_stored: a full L1 evicts as it stores, so its object count can
    fall across a store (seen on an H100 at 32K with a 16 GiB L1: 918 objects
    before 127 chunks were stored, 855 after). The server's own "Stored N
    tokens" lines after the mark count the store; the object count alone
    waited out --store-wait-s."""
    srv = lmcache_tier.Server("t", "T5", python=sys.executable, log_dir=str(tmp_path),
                              l1_bytes=64 << 20)
    line = ("\x1b[32;20m[2026-12-06 22:59:59,510] LMCache INFO:\x1b[0m Stored %d tokens in "
            "0.004 seconds \x1b[3m(lmcache_driven_transfer.py:1159:lmcache.v1.multiprocess."
            "modules.lmcache_driven_transfer)\x1b[0m\n")
    with open(srv.log_path, "w") as f:
        f.write(line % 8192)  # an earlier request's store, before the mark
    mark = srv.log_mark()
    with open(srv.log_path, "a") as f:
        for n in (8192, 8192, 8192):
            f.write(line % n)
    counts = iter([(918, 0), (855, 0)] + [(855, 0)] * 10000)
    monkeypatch.setattr(srv, "l1_counts", lambda: next(counts))
    assert srv.stored_tokens_since(mark) == 3 * 8192
    # 127 chunks (32,512 tokens) not all logged yet: waits, then gives up.
    r = srv.wait_stored(918, 127, 0.2, log_mark=mark)
    assert not r["store_complete"] and r["l1_logged_tokens"] == 24576
    with open(srv.log_path, "a") as f:
        f.write(line % 7936)
    r = srv.wait_stored(918, 127, 5, log_mark=mark)
    assert r["store_complete"] and r["l1_logged_tokens"] == 127 * 256
    assert r["l1_objects"] == 855
    # A write-locked object still holds the wait (the copy is in flight).
    monkeypatch.setattr(srv, "l1_counts", lambda: (855, 1))
    assert not srv.wait_stored(918, 127, 0.1, log_mark=mark)["store_complete"]
    # Without a mark, the object count alone decides, as before.
    monkeypatch.setattr(srv, "l1_counts", lambda: (1045, 0))
    assert srv.wait_stored(918, 127, 5)["store_complete"]


def _file(tmp_path, size, fill=None):
    p = tmp_path / "pool"
    with open(p, "wb") as f:
        f.truncate(size)
    for off, data in fill or []:
        with open(p, "r+b") as f:
            f.seek(off)
            f.write(data)
    return str(p)


def test_changed_ranges_finds_exactly_the_pages_a_store_wrote(tmp_path):
    path = _file(tmp_path, 64 * damage.PAGE, [(3 * damage.PAGE, b"\x01" * 8)])
    before = damage.page_digests(path)
    with open(path, "r+b") as f:  # a store of 2.5 pages at page 10, one byte at page 40
        f.seek(10 * damage.PAGE)
        f.write(os.urandom(2 * damage.PAGE + 100))
        f.seek(40 * damage.PAGE + 4095)
        f.write(b"\x07")
    got = damage.changed_ranges(before, damage.page_digests(path))
    assert got == [(10 * damage.PAGE, 3 * damage.PAGE), (40 * damage.PAGE, damage.PAGE)]
    assert damage.changed_ranges(before, before) == []


def test_a_write_that_keeps_the_sum_still_changes_the_digest(tmp_path):
    import numpy as np

    path = _file(tmp_path, 4 * damage.PAGE)
    with open(path, "r+b") as f:
        f.write(np.array([5, 0], dtype=np.uint64).tobytes())
    before = damage.page_digests(path)
    with open(path, "r+b") as f:  # same sum of words, other words
        f.write(np.array([2, 3], dtype=np.uint64).tobytes())
    assert damage.changed_ranges(before, damage.page_digests(path)) == [(0, damage.PAGE)]


def test_apply_flips_one_byte_per_page_or_zeroes_the_range(tmp_path):
    payload = bytes(range(256)) * 48  # 3 pages
    path = _file(tmp_path, 8 * damage.PAGE, [(damage.PAGE, payload)])
    rng = [(damage.PAGE, len(payload))]
    assert damage.apply(path, rng, "byte") == 3
    with open(path, "rb") as f:
        f.seek(damage.PAGE)
        got = f.read(len(payload))
    diff = [i for i in range(len(payload)) if got[i] != payload[i]]
    assert diff == [0, damage.PAGE, 2 * damage.PAGE]
    assert all(got[i] == payload[i] ^ 0xFF for i in diff)
    assert damage.apply(path, rng, "zero") == len(payload)
    with open(path, "rb") as f:
        data = f.read()
    assert data[damage.PAGE:damage.PAGE + len(payload)] == bytes(len(payload))
    with pytest.raises(ValueError):
        damage.apply(path, rng, "scramble")


@pytest.mark.parametrize("clean,dmg,ch,dh,rep,err,want", [
    ([1, 2], [1, 2], 512, 0, 0, None, "detected, recomputed"),
    ([1, 2], [1, 2], 512, 512, 2, None, "detected, recomputed"),
    ([1, 2], [1, 3], 512, 256, 0, None, "detected in part, damage served"),
    ([1, 2], [1, 3], 512, 512, 0, None, "served, output changed"),
    ([1, 2], [1, 2], 512, 512, 0, None, "served, output unchanged"),
    ([1, 2], [1, 2], 0, 0, 0, None, "no load to damage"),
    ([1, 2], None, 512, 0, 0, "HTTP 500", "request failed"),
])
def test_verdict(clean, dmg, ch, dh, rep, err, want):
    assert damage.verdict(clean, dmg, ch, dh, reported=rep, error=err) == want


def test_a_server_without_lmcache_says_how_to_go_on(tmp_path):
    import subprocess

    probe = subprocess.run([sys.executable, "-c", "import lmcache"], capture_output=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    if probe.returncode == 0:
        pytest.skip("lmcache is installed in this interpreter itself")
    srv = lmcache_tier.Server("nolmcache", "T5", python=sys.executable, log_dir=str(tmp_path),
                              l1_bytes=64 << 20)
    srv.env.pop("PYTHONPATH", None)
    srv.start()
    with pytest.raises(lmcache_tier.StartError, match="lmcache is not importable.*--lmcache-site"):
        srv.wait_ready(120)
    assert srv.stop() == []
