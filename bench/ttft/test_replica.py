"""replica.py's ports. free_port() picks outside the kernel's ephemeral
range and leases each port it hands out, never one twice; a real vLLM
OpenAI server whose port another process took between the pick and its
bind is started again on another port, seen by its bind error within
seconds (vLLM binds before it builds the engine), while a start that fails
for another reason is not retried. No engine is built: one vLLM import,
about 10 s on 2 cores. Run by the ttft stage (scripts/test.d/70-ttft.sh)
under the vLLM venv:

    python -m pytest -q bench/ttft/test_replica.py
"""

import importlib.util
import os
import socket
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import replica  # noqa: E402


def _outside_ephemeral():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = (int(x) for x in f.read().split())
    return lo, hi, [p for p in range(20000, 65536) if not lo <= p <= hi]


def test_free_port_is_outside_the_ephemeral_range_leased_and_handed_out_once(tmp_path,
                                                                             monkeypatch):
    lo, hi, outside = _outside_ephemeral()
    if len(outside) < 1000:
        pytest.skip(f"the ephemeral range {lo}-{hi} leaves few ports outside it")
    leases = tmp_path / "leases"
    monkeypatch.setenv("CXLKV_PORT_LEASES", str(leases))
    ports = [replica.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert [p for p in ports if p < 20000 or lo <= p <= hi] == []
    assert sorted(os.listdir(leases)) == sorted(str(p) for p in ports)
    # A port another caller leased is not handed out, even where it binds:
    # lease every outside port but one, which must then be the pick.
    free = next(p for p in outside if str(p) not in os.listdir(leases) and _binds(p))
    for p in outside:
        if p != free:
            (leases / str(p)).mkdir(exist_ok=True)
    assert replica.free_port() == free


def _binds(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_listens_names_the_process_that_holds_the_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert not replica.listens(os.getpid(), port), "bound, not listening"
        s.listen()
        assert replica.listens(os.getpid(), port)
        assert not replica.listens(os.getppid(), port)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="needs vLLM: the ttft stage runs this under the vLLM venv")
def test_a_vllm_server_whose_port_was_taken_is_started_again_on_another(tmp_path, monkeypatch):
    monkeypatch.setenv("CXLKV_PORT_LEASES", str(tmp_path / "leases"))
    # The port of the first start is taken after the pick, as another
    # program could take it: vLLM's bind fails.
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    picks = [taken]
    real = replica.free_port
    monkeypatch.setattr(replica, "free_port", lambda: picks.pop() if picks else real())
    r = replica.Replica("ports", "T0", [], model_dir=str(tmp_path / "no-such-model"),
                        served_name="ttft", platform="cpu", index=0, n_replicas=1, gpus=0,
                        log_dir=str(tmp_path), max_model_len=4096)
    assert r.port == taken
    r.start()
    # The second start (on the new port) runs a program that fails at once
    # for another reason, sparing a second vLLM import: it is not retried.
    argv = r.cmd
    r.cmd = ["/bin/sh", "-c", 'echo "no vLLM here: $*"; exit 3', "sh"] + argv[1:]
    try:
        with pytest.raises(replica.StartError, match="exited with 3"):
            r.wait_ready(600)
    finally:
        r.stop(grace=5)
        held.close()
    log = open(r.log_path, encoding="utf-8", errors="replace").read()
    assert r.port_retries == 1, log[-3000:]
    assert "OSError: [Errno 98] Address already in use" in log, log[-3000:]
    assert r.port != taken and f"--port {r.port} " in log
    assert r.base_url == f"http://127.0.0.1:{r.port}"
    assert r.describe()["port_retries"] == 1
