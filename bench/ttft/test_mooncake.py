"""CPU tests of the Mooncake tier's plumbing (mooncake_tier.py, issue 29): the
replicas' flags and config, read back by vLLM's own MooncakeStoreConfig;
a real mooncake_master started, read and stopped; Mooncake's store moving
bytes between two processes over tcp through it (the site's no-device
libcuda.so.1 and the CUDA runtime make mooncake.store import here: see
scripts/mooncake-site.sh). No engine: the ttft stage's --full run has T3's
vLLM engines. Run by the ttft stage (scripts/test.d/70-ttft.sh) with the vLLM
venv's python:

    CXLKV_TTFT_MOONCAKE_SITE=$(PYTHON=<venv python> scripts/mooncake-site.sh) \\
        python -m pytest -q bench/ttft/test_mooncake.py

The tests that start mooncake_master need the site; they fail, not skip,
when CXLKV_TTFT_MOONCAKE_SITE is set and Mooncake does not work.
"""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mooncake_tier  # noqa: E402
import tiers  # noqa: E402
import ttft  # noqa: E402
from replica import StartError  # noqa: E402

SITE = os.environ.get("CXLKV_TTFT_MOONCAKE_SITE")
needs_site = pytest.mark.skipif(not SITE, reason="CXLKV_TTFT_MOONCAKE_SITE not set "
                                                 "(scripts/mooncake-site.sh)")


def test_replica_flags_are_the_store_connector_with_a_lookup_port_each():
    f = tiers.flags("T3", mooncake_lookup_port=5801)
    assert f[:2] == ["--no-enable-prefix-caching", "--kv-transfer-config"]
    assert json.loads(f[2]) == {
        "kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"lookup_rpc_port": 5801}}
    assert tiers.flags("T3", mooncake_lookup_port=5802) != f
    with pytest.raises(ValueError):
        tiers.flags("T3")
    assert "T3" in tiers.SHARED and "T3" in tiers.TIERS


def test_config_splits_t4s_memory_over_the_replicas():
    c = mooncake_tier.config(50051, (32 << 30) // 4, 4 << 30)
    assert c == {"mode": "embedded", "metadata_server": "P2PHANDSHAKE",
                 "master_server_address": "127.0.0.1:50051", "global_segment_size": 8 << 30,
                 "local_buffer_size": 4 << 30, "protocol": "tcp", "device_name": ""}
    for bad in ((1, 0, 1 << 30), (1, 1 << 30, 0)):
        with pytest.raises(ValueError):
            mooncake_tier.config(*bad)
    env = mooncake_tier.replica_env("/x/m.json")
    assert env == {"MOONCAKE_CONFIG_PATH": "/x/m.json",
                   "MOONCAKE_REQUESTER_LOCAL_HOSTNAME": "127.0.0.1"}


def test_master_argv_names_the_rpc_and_metrics_ports():
    argv = mooncake_tier.master_argv("py", rpc_port=7001, metrics_port=7002, extra=["--x=1"])
    assert argv[:3] == ["py", "-m", "mooncake.cli"]
    assert argv[argv.index("--rpc_port") + 1] == "7001"
    assert argv[argv.index("--metrics_port") + 1] == "7002"
    assert argv[argv.index("--rpc_address") + 1] == "127.0.0.1" and argv[-1] == "--x=1"


def test_vllms_own_parser_reads_our_config(tmp_path):
    """vLLM's MooncakeStoreConfig.from_file (the class its connector's worker
    builds from MOONCAKE_CONFIG_PATH) and its connector registry."""
    try:
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
        from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.worker import (
            MooncakeStoreConfig)
    except ImportError as e:
        pytest.skip(f"vllm not importable here: {e}")
    p = tmp_path / "m.json"
    p.write_text(json.dumps(mooncake_tier.config(50051, 128 << 20, 64 << 20)))
    c = MooncakeStoreConfig.from_file(str(p))
    assert (c.mode, c.metadata_server, c.master_server_address, c.protocol, c.device_name) == \
        ("embedded", "P2PHANDSHAKE", "127.0.0.1:50051", "tcp", "")
    assert (c.global_segment_size, c.local_buffer_size) == (128 << 20, 64 << 20)
    assert "MooncakeStoreConnector" in KVConnectorFactory._registry


def test_t3s_skip_and_damage_reasons_say_why():
    assert "libcuda.so.1" in ttft.T3_CPU_REASON and "mooncake-site.sh" in ttft.T3_CPU_REASON
    assert "not reachable" in ttft.MOONCAKE_DAMAGE_REASON
    assert "libcuda.so.1" in mooncake_tier.import_error(sys.executable, None) or \
        mooncake_tier.import_error(sys.executable, None).startswith("ModuleNotFoundError")


# One Mooncake client: setup against the master, then put KEY (VALUE bytes of
# a seeded pattern) or get KEY and print its length and SHA-256; a putter
# keeps its segment (which holds the object) until stdin closes.
_CLIENT = """
import hashlib, sys
from mooncake.store import MooncakeDistributedStore
port, role = sys.argv[1], sys.argv[2]
s = MooncakeDistributedStore()
rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 32 << 20, 8 << 20, "tcp", "", "127.0.0.1:" + port)
value = bytes(range(256)) * 1200
if role == "put":
    print("setup", rc, "put", s.put("ttft-key", value), flush=True)
    sys.stdin.read()
else:
    v = s.get("ttft-key")
    print("setup", rc, "get", len(v), hashlib.sha256(v).hexdigest() ==
          hashlib.sha256(value).hexdigest(), flush=True)
"""


@needs_site
def test_the_store_moves_bytes_between_two_processes_over_tcp(tmp_path):
    m = mooncake_tier.Master("t3-store", python=sys.executable, log_dir=str(tmp_path),
                             segment_bytes=32 << 20, local_buffer_bytes=8 << 20, site=SITE)
    env = dict(os.environ, **mooncake_tier.site_env(SITE))
    putter = None
    try:
        m.start()
        m.wait_ready(60)
        putter = subprocess.Popen([sys.executable, "-c", _CLIENT, str(m.rpc_port), "put"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, env=env)
        before = (0.0, 0.0)
        line = putter.stdout.readline()
        assert line.split() == ["setup", "0", "put", "0"], line
        w = m.wait_stored(before, 1, 10)
        assert w["store_complete"] and w["master_keys"] == 1 and w["master_puts_done"] == 1, w
        got = subprocess.run([sys.executable, "-c", _CLIENT, str(m.rpc_port), "get"],
                             capture_output=True, text=True, env=env, timeout=120)
        assert got.stdout.split() == ["setup", "0", "get", str(256 * 1200), "True"], \
            (got.stdout, got.stderr[-800:])
    finally:
        if putter is not None:
            putter.communicate("", timeout=60)
        m.stop()


@needs_site
def test_a_real_master_starts_counts_and_stops(tmp_path):
    a = mooncake_tier.Master("t3-a", python=sys.executable, log_dir=str(tmp_path),
                             segment_bytes=64 << 20, local_buffer_bytes=16 << 20, site=SITE)
    b = mooncake_tier.Master("t3-b", python=sys.executable, log_dir=str(tmp_path),
                             segment_bytes=64 << 20, local_buffer_bytes=16 << 20, site=SITE)
    try:
        a.start()
        b.start()
        assert a.wait_ready(60) > 0 and b.wait_ready(60) > 0
        assert {a.rpc_port, a.metrics_port}.isdisjoint({b.rpc_port, b.metrics_port})
        c = a.counters()
        assert c["master_key_count"] == 0 and c["master_active_clients"] == 0, c
        assert {"master_allocated_bytes", "master_evicted_key_count"} <= set(c)
        with open(a.config_path) as f:
            assert json.load(f)["master_server_address"] == f"127.0.0.1:{a.rpc_port}"
        w = a.wait_stored(a.mark(), 1, 0.2)  # nothing is put: not complete, and says so
        assert w["store_complete"] is False and w["master_keys"] == 0
        assert w["master_puts_done"] == 0
        with open(a.log_path) as f:
            assert "Mooncake master version: 0.3.14" in f.read()
    finally:
        a.stop()
        b.stop()
    assert not a.alive() and not b.alive()
    assert a.counters() == {}


@needs_site
def test_a_master_that_cannot_start_says_why(tmp_path):
    m = mooncake_tier.Master("t3-bad", python=sys.executable, log_dir=str(tmp_path),
                             segment_bytes=64 << 20, local_buffer_bytes=16 << 20, site=SITE,
                             extra=["--rpc_port=not-a-port"])
    try:
        m.start()
        with pytest.raises(StartError) as e:
            m.wait_ready(60)
        assert "exited with" in str(e.value) and "rpc_port" in str(e.value), str(e.value)
    finally:
        m.stop()
