"""Runs one real vLLM engine (vllm.LLM, CPU) with the cxlkv backend and
writes what it did as JSON. A separate OS process per engine, so tests can
run engines one after the other or at once.

    python run_engine.py '<json spec>'

Spec keys: model, region, out (result JSON path), prompts (lists of token
ids), rounds (list of lists of prompt indices; the GPU prefix cache is reset
between rounds), max_tokens (8), connector ("cxlkv": CxlkvOffloadingConnector
with kv_load_failure_policy=recompute; "plain": vLLM's OffloadingConnector),
spec ("ProbeSpec" from probe.py, or "CxlkvOffloadingSpec"), extra (more
extra-config keys), reset (reset the engine's own prefix cache before each
round; default true), hash_algo, loop_s (repeat the rounds until this many
seconds passed), tp (tensor-parallel size), kv_events (an ipc:// endpoint:
vLLM's KV events are published there over ZMQ and this process subscribes,
recording the events of the offloading tier, medium CPU, in the result),
events_format ("legacy", the default, or "self_describing": vLLM's
self_describing_kv_events extra key), waits ({round index: file} to wait for
before that round), signals ({round index: file} to create after it), start
({"signal": file, "wait": file}: once the engine is up, create "signal" and
wait for "wait" before the first round; loop_s counts from there, so engines
started together run their loops at the same time), drain
({"signal": file, "wait": file}: after the rounds, create "signal", wait for
"wait", then serve a prompt shorter than one chunk, so that the engine steps
again and its manager reports what changed in the region meanwhile; it
stores and loads nothing), checkpoint (write the result JSON after every
round too, so that an engine killed later leaves what it did before).
"""
import json
import os
import sys
import threading
import time


def _wait_file(path, timeout=900):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if time.time() > deadline:
            raise TimeoutError(f"run_engine: {path} did not appear in {timeout} s")
        time.sleep(0.2)


class EventTap:
    """Subscribes to the engine's KV-event publisher (ZMQ PUB), as a router's
    indexer does, and keeps the events of the offloading tier (medium CPU;
    the GPU prefix cache's are medium GPU), in order, as {"removed": bool,
    "hashes": [...]} plus, for stores, the payload fields that tell the two
    formats apart: "token_ids", "parent", "block_size" (legacy: [], None, 0;
    self-describing: the chunk's tokens, the previous block's hash, tokens
    per block)."""

    def __init__(self, endpoint):
        import msgspec
        import zmq
        from vllm.distributed.kv_events import BlockRemoved, BlockStored, KVEventBatch

        self.events, self._stop = [], threading.Event()
        self._kinds = (BlockStored, BlockRemoved)
        self._dec = msgspec.msgpack.Decoder(type=KVEventBatch)
        self._sock = zmq.Context.instance().socket(zmq.SUB)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")
        self._sock.connect(endpoint)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        import zmq

        while not self._stop.is_set():
            if not self._sock.poll(100, zmq.POLLIN):
                continue
            _topic, _seq, payload = self._sock.recv_multipart()
            for e in self._dec.decode(payload).events:
                if not isinstance(e, self._kinds) or e.medium != "CPU":
                    continue
                ev = {"removed": isinstance(e, self._kinds[1]),
                      "hashes": [int(h) for h in e.block_hashes],
                      "group": getattr(e, "group_idx", None)}
                if not ev["removed"]:
                    ev.update(token_ids=list(e.token_ids), block_size=e.block_size,
                              parent=None if e.parent_block_hash is None
                              else int(e.parent_block_hash))
                self.events.append(ev)

    def close(self, linger_s=3.0):
        time.sleep(linger_s)  # the publisher sends from its own thread
        self._stop.set()
        self._thread.join()
        self._sock.close()


def main():
    spec = json.loads(sys.argv[1])
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    extra = {"spec_name": spec.get("spec", "ProbeSpec"),
             "spec_module_path": "probe" if spec.get("spec", "ProbeSpec") == "ProbeSpec"
             else "cxlkv.vllm",
             "region_path": spec["region"], "region_size": spec.get("region_size", 256 << 20),
             # The tests check what moves: every hit loads (a tiny model on
             # these cores recomputes faster, and load_policy=measured would
             # say so; test_load_policy.py tests that choice).
             "prefault": "none", "load_policy": "always"}
    extra.update(spec.get("extra", {}))
    if spec.get("events_format", "legacy") == "self_describing":
        extra["self_describing_kv_events"] = True
    ktc = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
           "kv_connector_extra_config": extra}
    if spec.get("connector", "cxlkv") == "cxlkv":
        ktc.update(kv_connector="CxlkvOffloadingConnector",
                   kv_connector_module_path="cxlkv.vllm.connector",
                   kv_load_failure_policy="recompute")
    gpu = {}
    try:
        import torch

        if torch.cuda.is_available():
            # Several engines share the one GPU of the test machine.
            gpu = {"gpu_memory_utilization": spec.get("gpu_memory_utilization", 0.08)}
    except ImportError:
        pass
    more = {}
    tap = None
    if spec.get("kv_events"):
        from vllm.config import KVEventsConfig

        more["kv_events_config"] = KVEventsConfig(enable_kv_cache_events=True, publisher="zmq",
                                                  endpoint=spec["kv_events"])
        tap = EventTap(spec["kv_events"])
    t0 = time.time()
    llm = LLM(**gpu,model=spec["model"], dtype="bfloat16", max_model_len=4096, max_num_seqs=4,
              enforce_eager=True, kv_cache_memory_bytes=128 << 20, block_size=32,
              enable_prefix_caching=True, tensor_parallel_size=spec.get("tp", 1),
              prefix_caching_hash_algo=spec.get("hash_algo", "sha256"),
              kv_transfer_config=ktc, **more)
    started = time.time() - t0
    if spec.get("start"):
        open(spec["start"]["signal"], "w").close()
        _wait_file(spec["start"]["wait"])
    params = SamplingParams(max_tokens=spec.get("max_tokens", 8), temperature=0, ignore_eos=True)
    prompts = spec["prompts"]
    results = []
    deadline = time.time() + spec.get("loop_s", 0)
    waits, signals = spec.get("waits", {}), spec.get("signals", {})
    def dump(events):
        tmp = spec["out"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"started_s": started, "results": results, "pid": os.getpid(),
                       "events": events}, f)
        os.replace(tmp, spec["out"])

    while True:
        for n, rnd in enumerate(spec.get("rounds", [list(range(len(prompts)))])):
            if str(n) in waits:
                _wait_file(waits[str(n)])
            if spec.get("reset", True):
                llm.reset_prefix_cache()  # the engine's own (GPU) cache only
            t = time.time()
            outs = llm.generate([TokensPrompt(prompt_token_ids=prompts[i]) for i in rnd], params,
                                use_tqdm=False)
            dt = time.time() - t
            for i, o in zip(rnd, outs):
                results.append({"prompt": i, "prompt_len": len(prompts[i]),
                                "tokens": list(o.outputs[0].token_ids),
                                "cached": int(o.num_cached_tokens or 0), "seconds": dt})
            if spec.get("checkpoint"):
                if tap is not None:
                    time.sleep(3.0)  # the publisher sends from its own thread (EventTap.close)
                dump(list(tap.events) if tap is not None else [])
            if str(n) in signals:
                open(signals[str(n)], "w").close()
        if time.time() >= deadline:
            break
    if spec.get("drain"):
        open(spec["drain"]["signal"], "w").close()
        _wait_file(spec["drain"]["wait"])
        for _ in range(2):  # a few steps each; less than one chunk: no lookup, no store
            llm.generate([TokensPrompt(prompt_token_ids=list(range(4, 20)))], params,
                         use_tqdm=False)
            time.sleep(0.5)
    events = []
    if tap is not None:
        tap.close()
        events = tap.events
    dump(events)


if __name__ == "__main__":
    main()
