"""Two real vLLM engines as two simulated hosts sharing a coherence=software
region (docs/coherence.md, docs/vllm.md "Non-coherent regions"): each finds
its write partition from kv_connector_extra_config's software_hosts and its
host name ($NODE_NAME, as a pod gets it), engine A (host-a, partition 0,
which formats) stores a prompt into its partition, engine B (host-b,
partition 1) loads every full chunk from A's partition without pins, and
the loaded KV pages equal A's computed ones byte for byte. While A runs, a
second engine on A's node (A2, host-a, the node's partition lock
$CXL_PARTITION_LOCK as the DRA driver's CDI spec gives every pod there) is
refused at start, naming the lock file and A's process, and A keeps its
partition to the end. One host runs
both, so its caches are coherent: this shows the backend drives the
software-mode protocol end to end, not behaviour under non-coherence (the
engine's emulator suites do, src/region/noncoherent_test.cc).
Warm: about 60 s on 2 idle cores (three engine starts, A2 beside A).
"""
import os
import random
import sys
import time

import cxlkv

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_engines import (BLOCK, _finish, _launch, manager_state,  # noqa: E402
                          probe_files, run_engine)

PROMPT_LEN = 1024


def test_two_hosts_share_a_software_region_byte_equal(tmp_path):
    import make_model

    tmp = str(tmp_path)
    model = make_model.make(os.path.join(tmp, "model"), seed=0)
    region = f"/dev/shm/cxlkv/vllm-sw-test-{os.getpid()}"
    prompt = [random.Random(11).randrange(4, 1000) for _ in range(PROMPT_LEN)]
    extra = {"coherence": "software", "software_hosts": ["host-a", "host-b"]}
    base = {"model": model, "region": region, "prompts": [prompt], "extra": extra}
    try:
        # Host A's node: one partition lock for every engine there.
        lock = os.path.join(tmp, "host-a.lock")
        open(lock, "w").close()
        node_a = {"NODE_NAME": "host-a", "CXL_PARTITION_LOCK": lock}
        done, go = os.path.join(tmp, "swA-done"), os.path.join(tmp, "swA-go")
        ha = _launch(tmp, "swA", dict(base, rounds=[[0], [0]], reset=False,
                                      drain={"signal": done, "wait": go}), env=node_a)
        try:
            while not os.path.exists(done):
                assert ha["proc"].poll() is None, open(ha["log"].name).read()[-4000:]
                time.sleep(0.5)
            # A holds host-a's partition: a second engine on that node is
            # refused before it attaches, naming the lock and its holder.
            _, _, text_a2, rc = run_engine(tmp, "swA2", dict(base, rounds=[[0]]), env=node_a,
                                           check=False)
            assert rc != 0, "a second writer of host-a's partition must not start"
            assert (f"{lock} ($CXL_PARTITION_LOCK) is locked by pid {ha['proc'].pid} ("
                    in text_a2), text_a2[-4000:]
        finally:
            open(go, "w").close()
        a, probe_a, text_a, _ = _finish(ha)
        assert "coherence=software, host host-a partition 0 of 2" in text_a
        b, probe_b, text_b, _ = run_engine(tmp, "swB", dict(base, rounds=[[0]]),
                                           env={"NODE_NAME": "host-b"})
        assert "coherence=software, host host-b partition 1 of 2" in text_b
        chunks = PROMPT_LEN // BLOCK
        assert a["results"][0]["cached"] == 0
        assert manager_state(probe_a)["stored"] == chunks
        (res,) = b["results"]
        print(f"software mode: B external hits {res['cached']} of {res['prompt_len']} tokens")
        assert res["cached"] == chunks * BLOCK, "an external hit on every full chunk"
        assert list(manager_state(probe_b)["loads"].values()) == [chunks]
        assert manager_state(probe_b)["stored"] == 0, "B stored nothing: all came from A"
        stored, loaded = probe_files(probe_a, "store"), probe_files(probe_b, "load")
        assert len(stored) == len(loaded) == chunks
        assert not any(m["failed"] for m, _ in loaded)
        diff = sum(1 for (_, x), (_, y) in zip(stored, loaded) if x != y)
        assert diff == 0, f"{diff} chunks differ between A's computed KV and B's loaded KV"
        assert res["tokens"] == a["results"][1]["tokens"]
        # The region as the engines left it: layout version 6, A's partition
        # holds every chunk (B's holds nothing of the prompt).
        obs = cxlkv.open_region(region, coherence="software", register_participant=False,
                                create_if_missing=False, prefault="none")
        i = obs.info()
        assert (i.layout_version, i.config.software_partitions) == (6, 2)
    finally:
        if os.path.exists(region):
            os.unlink(region)
