"""`ttft.py run` stopped by SIGTERM or SIGINT stops the servers it started,
and runs at once keep their /dev/shm files apart. Real processes, no engine:
the harness runs as it does in the ttft stage, with --python naming a
stand-in interpreter (STANDIN below) that runs every `python -c` and script
for real but answers `-m vllm.entrypoints.openai.api_server` and
`-m lmcache.cli.main` with a stand-in server: a process that never becomes
ready, with a child of its own in its process group (as vLLM's EngineCore
is), both recorded in a file. Run by the ttft stage (scripts/test.d/70-ttft.sh):

    python -m pytest -q bench/ttft/test_stop.py
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

# The stand-in interpreter (written as an executable script per test).
STANDIN = """#!{python}
import json, os, subprocess, sys, time
REAL = {python!r}
args = sys.argv[1:]
if args[:2] in (["-m", "vllm.entrypoints.openai.api_server"], ["-m", "lmcache.cli.main"]):
    # A stand-in server: never ready, one child in its process group.
    child = subprocess.Popen([REAL, "-c", "import time; time.sleep(600)"])
    out = os.path.join(os.environ["STANDIN_DIR"], "%d.json" % os.getpid())
    with open(out + ".tmp", "w") as f:
        json.dump({{"pids": [os.getpid(), child.pid], "argv": args}}, f)
    os.rename(out + ".tmp", out)
    time.sleep(600)
    sys.exit(0)
os.execv(REAL, [REAL] + args)
"""

# Bounds for conditions waited on (never a fixed sleep): generous, since the
# stage runs beside others on 2 cores.
START_S = 120
STOP_S = 90


def alive(pid):
    """True while `pid` runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_for(cond, seconds, what):
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.1)


def servers(standin_dir):
    """The stand-in servers started so far: [{"pids": [...], "argv": [...]}]."""
    out = []
    for name in sorted(os.listdir(standin_dir)):
        if name.endswith(".json"):
            with open(os.path.join(standin_dir, name)) as f:
                out.append(json.load(f))
    return out


def start_run(tmp_path, name, tier):
    """`ttft.py run` of one tier with the stand-in interpreter; returns
    (process, the directory its stand-in servers are recorded in)."""
    standin = tmp_path / "standin-python"
    if not standin.exists():
        standin.write_text(STANDIN.format(python=sys.executable))
        standin.chmod(0o755)
    record = tmp_path / f"{name}-servers"
    record.mkdir()
    env = dict(os.environ, STANDIN_DIR=str(record))
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "ttft.py"), "run", str(tmp_path / name),
         "--platform", "cpu", "--python", str(standin), "--model", "qwen7b", "--tiers", tier,
         "--prefixes", "512", "--sessions", "2", "--phases", "grid", "--max-model-len", "4096",
         "--region-size", "64MiB", "--start-timeout", "600"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, str(record)


def stop_leftovers(records):
    """Ends stand-ins a failing run left behind (this test's own)."""
    for rec in records:
        for d in rec:
            for s in servers(d):
                for pid in s["pids"]:
                    if alive(pid):
                        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_run_stops_the_replicas_it_started(tmp_path, sig):
    """Two replicas of T0 starting (the harness waits for their /health):
    the signal ends the harness with 128 + its number, and both stand-in
    servers and their children are gone."""
    proc, record = start_run(tmp_path, "run", "T0")
    try:
        wait_for(lambda: len(servers(record)) == 2 or proc.poll() is not None, START_S,
                 "two stand-in replicas started")
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        pids = [pid for s in servers(record) for pid in s["pids"]]
        assert all(alive(pid) for pid in pids)
        proc.send_signal(sig)
        out = proc.communicate(timeout=STOP_S)[0]
        assert proc.returncode == 128 + sig, out[-3000:]
        assert f"stopped by {signal.Signals(sig).name}" in out, out[-3000:]
        wait_for(lambda: not any(alive(pid) for pid in pids), STOP_S,
                 f"stand-in servers {pids} gone")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop_leftovers([[record]])


def test_runs_at_once_keep_their_t6_files_apart_and_remove_them(tmp_path):
    """Two T6 runs at once: each run's LMCache stand-in maps a devdax file in
    a directory of that run's own (named by its pid); SIGTERM to both stops
    their servers and removes both directories."""
    (a, rec_a), (b, rec_b) = start_run(tmp_path, "a", "T6"), start_run(tmp_path, "b", "T6")
    try:
        for p, rec in ((a, rec_a), (b, rec_b)):
            wait_for(lambda: servers(rec) or p.poll() is not None, START_S,
                     "the stand-in lmcache server started")
            assert p.poll() is None, p.communicate()[0][-3000:]
        paths = {}
        for p, rec in ((a, rec_a), (b, rec_b)):
            (srv,) = servers(rec)
            argv = srv["argv"]
            path = argv[argv.index("--l1-devdax-path") + 1]
            assert os.path.dirname(path) == f"/dev/shm/cxlkv-ttft-lmcache-{p.pid}", path
            assert os.path.getsize(path) == 64 << 20
            paths[p.pid] = path
        for p in (a, b):
            p.send_signal(signal.SIGTERM)
        for p, rec in ((a, rec_a), (b, rec_b)):
            out = p.communicate(timeout=STOP_S)[0]
            assert p.returncode == 128 + signal.SIGTERM, out[-3000:]
            pids = servers(rec)[0]["pids"]
            wait_for(lambda: not any(alive(pid) for pid in pids), STOP_S,
                     f"stand-in lmcache server {pids} gone")
            assert not os.path.exists(os.path.dirname(paths[p.pid]))
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
                p.wait()
        stop_leftovers([[rec_a, rec_b]])


def test_a_load_cells_budget_estimate_scales_a_measured_cell():
    """The budget's estimate of a load cell scales the wall time of a cell
    measured at another concurrency (its tier's first), so the c = 8 cell is
    not refused because a request of the c = 4 cell waited for the others:
    the numbers are the H200's 32K cells (c = 4 in 31 s, c = 8 in 67 s, req2
    up to 18 s under load)."""
    from types import SimpleNamespace

    sys.path.insert(0, HERE)
    import ttft

    h = ttft.Harness.__new__(ttft.Harness)
    h.call, h.platform = 0, "gpu"
    h.a = SimpleNamespace(load_sessions=3)
    task = ("load", 32694, 8, "load/T4/32694/c8")
    h.log = SimpleNamespace(records=[])
    fresh = h.task_estimate(task)
    assert fresh == pytest.approx((0.2 + 32694 / 15000) * 2 * 8 * 3 * 2 + 30)
    h.log.records = [
        {"kind": "req", "prefix": 32694, "e2e_ms": 18000.0},
        {"kind": "load_cell", "key": "load/T2/32694/c8", "tier": "T2", "prefix": 32694,
         "concurrency": 8, "wall_s": 20.0},
        {"kind": "load_cell", "key": "load/T4/32694/c4", "tier": "T4", "prefix": 32694,
         "concurrency": 4, "wall_s": 31.0}]
    assert h.task_estimate(task) == pytest.approx(31.0 * 2 * 1.25 + 30)
    # No cell of its tier: another tier's, scaled the same way.
    h.log.records.pop()
    assert h.task_estimate(task) == pytest.approx(20.0 * 1.25 + 30)
    # Another prefix's cells say nothing about this one.
    h.log.records[1]["prefix"] = 16384
    assert h.task_estimate(task) == pytest.approx(18.0 * 2 * 8 * 3 * 2 + 30)
