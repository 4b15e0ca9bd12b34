"""A test-only spec: CxlkvOffloadingSpec plus observation, so that tests can
see what really moved. It records, in $CXLKV_PROBE_DIR:

- manager-<pid>.json: per request, the chunks promised for loading; totals;
- store-<pid>-<n>.bin / .json: the KV pages of the n-th chunk this worker
  stored, read from the KV cache (what the engine computed), and its slot;
- load-<pid>-<n>.bin / .json: the pages of the n-th chunk this worker loaded,
  read back from the KV cache after the load, and whether it failed.

With CXLKV_PROBE_ZERO_LOADS=1 it zeroes every loaded page after the load
(the control showing that outputs depend on the KV).

With CXLKV_PROBE_KILL_ARM=<file> and CXLKV_PROBE_KILL_AFTER=<n>: once <file>
exists, the worker fills n chunks of its next store job and then SIGKILLs
the engine's whole process group (the engine killed -9 mid-store), after
writing kill-<pid>.json: the job's reservations (write tokens, keys) and how
many chunks were filled.

With CXLKV_PROBE_KILL_LOAD_ARM=<file> and CXLKV_PROBE_KILL_LOAD_AFTER=<n>: once
<file> exists, the worker loads n chunks of its next load job and then
SIGKILLs the engine's whole process group, while the manager holds the
job's lookup pins (taken at lookup, held until complete_load), after writing
kill-load-<pid>.json: the job's chunks and how many were loaded.

With CXLKV_PROBE_TRACKER=1, manager-<pid>.json also has "tracker": whether
vLLM's KV-events tracker in this EngineCore (found from the connector
scheduler that calls the manager) is self-describing and how many chunk
payloads it holds (compat.skip_lookup_snapshots).

Select with spec_name="ProbeSpec", spec_module_path="probe" (this directory on
PYTHONPATH). Not part of the product.
"""
import ctypes
import json
import os
import signal
import sys
import threading

from cxlkv.vllm import CxlkvOffloadingSpec

_DIR = os.environ.get("CXLKV_PROBE_DIR", "")


def _write(name, obj):
    if not _DIR:
        return
    tmp = os.path.join(_DIR, name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, os.path.join(_DIR, name))


def _pages(w, g, ids):
    """The chunk's pages as they are in the KV cache now (CPU or GPU)."""
    out = bytearray()
    if hasattr(w, "group_tensors"):  # CxlkvCudaWorker: read through torch
        for t, page in w.group_tensors[g]:
            for b in ids:
                out += t[int(b), :page].cpu().numpy().tobytes()
        return bytes(out)
    for base, stride, page, _ in w.groups[g]:
        for b in ids:
            out += ctypes.string_at(base + int(b) * stride, page)
    return bytes(out)


def _zero(w, g, ids):
    if hasattr(w, "group_tensors"):
        import torch

        for t, page in w.group_tensors[g]:
            for b in ids:
                t[int(b), :page].zero_()
        torch.cuda.synchronize()
        return
    for base, stride, page, _ in w.groups[g]:
        for b in ids:
            ctypes.memset(base + int(b) * stride, 0, page)


def _kill_mid_store(w, dst_spec, n):
    """Fills n chunks of this store job like the worker does, then SIGKILLs
    the engine (all its processes) before the rest are filled or committed.
    The CPU worker's fill_part only (the CUDA worker fills otherwise)."""
    from cxlkv import _cxlkv

    fill = _cxlkv.fill_part
    filled = [0]

    def fill_then_die(*args, **kw):
        if filled[0] == n:
            _write(f"kill-{os.getpid()}.json", {"tokens": [list(t) for t in dst_spec.tokens],
                                                "keys": [list(k) for k in dst_spec.keys],
                                                "filled": filled[0]})
            os.killpg(os.getpgid(0), signal.SIGKILL)
        fill(*args, **kw)
        filled[0] += 1

    _cxlkv.fill_part = fill_then_die


def _kill_mid_load(src_spec, n):
    """Loads n chunks of this load job like the worker does, then SIGKILLs
    the engine (all its processes) with the job's pins still held."""
    from cxlkv import _cxlkv

    load = _cxlkv.load_part
    loaded = [0]

    def load_then_die(*args, **kw):
        if loaded[0] == n:
            _write(f"kill-load-{os.getpid()}.json", {"entries": [list(e) for e in src_spec.entries],
                                                     "loaded": loaded[0]})
            os.killpg(os.getpgid(0), signal.SIGKILL)
        out = load(*args, **kw)
        loaded[0] += 1
        return out

    _cxlkv.load_part = load_then_die


def _find_tracker(found):
    """vLLM's KV-events tracker, from the connector scheduler that is calling
    this manager (the caller frames' `self`; vLLM freezes its heap after
    start-up, so the garbage collector does not list it). Kept in `found`."""
    if not found:
        f = sys._getframe(1)
        while f is not None:
            tracker = getattr(f.f_locals.get("self"), "_events_tracker", None)
            if tracker is not None:
                found.append(tracker)
                break
            f = f.f_back
    return found[0] if found else None


class ProbeSpec(CxlkvOffloadingSpec):
    def get_manager(self):
        m = super().get_manager()
        state = {"loads": {}, "stored": 0, "store_failed": 0, "stored_keys": []}
        pid = os.getpid()
        prepare_load, complete_store = m.prepare_load, m.complete_store

        watch_tracker = os.environ.get("CXLKV_PROBE_TRACKER") == "1"
        tracker = []

        def _state():
            totals = {f"{n}{'' if l is None else '{' + l + '}'}": v for (n, l), v in m.totals.items()}
            more = {}
            if watch_tracker:
                t = _find_tracker(tracker)
                more["tracker"] = None if t is None else {
                    "self_describing": bool(t.self_describing_enabled),
                    "payloads": len(t._pending_event_metadata)}
            return state | {"pinned": m.pinned(), "totals": totals} | more

        def probe_prepare_load(keys, req_context):
            keys = list(keys)
            state["loads"][req_context.req_id] = state["loads"].get(req_context.req_id, 0) + len(keys)
            spec = prepare_load(keys, req_context)
            _write(f"manager-{pid}.json", _state())
            return spec

        def probe_complete_store(keys, req_context, success=True):
            before = dict(m._counts)
            own_before = set(m._own)
            complete_store(keys, req_context, success)
            state["stored_keys"] += [bytes(k).hex() for k in keys
                                     if k in m._own and k not in own_before]
            state["stored"] = state.get("stored", 0) + sum(
                n for (name, _), n in m._counts.items() if name == "cxlkv:stored_chunks") - sum(
                n for (name, _), n in before.items() if name == "cxlkv:stored_chunks")
            _write(f"manager-{pid}.json", _state())

        def probe_on_request_finished(req_context, _orig=m.on_request_finished):
            _orig(req_context)
            _write(f"manager-{pid}.json", _state())

        m.prepare_load = probe_prepare_load
        m.complete_store = probe_complete_store
        m.on_request_finished = probe_on_request_finished
        return m

    def get_worker(self, kv_caches):
        w = super().get_worker(kv_caches)
        pid = os.getpid()
        seq = {"store": 0, "load": 0}
        lock = threading.Lock()
        zero = os.environ.get("CXLKV_PROBE_ZERO_LOADS") == "1"
        store, load = w._store, w._load
        arm = os.environ.get("CXLKV_PROBE_KILL_ARM")
        kill_after = int(os.environ.get("CXLKV_PROBE_KILL_AFTER", "0"))
        load_arm = os.environ.get("CXLKV_PROBE_KILL_LOAD_ARM")
        load_kill_after = int(os.environ.get("CXLKV_PROBE_KILL_LOAD_AFTER", "0"))

        def probe_store(job_id, src_spec, dst_spec):
            chunks = list(w._chunks(src_spec))
            if arm and os.path.exists(arm):
                _kill_mid_store(w, dst_spec, kill_after)
            res = store(job_id, src_spec, dst_spec)
            for i, (g, ids, _skip) in enumerate(chunks):
                with lock:
                    n = seq["store"]
                    seq["store"] += 1
                with open(os.path.join(_DIR, f"store-{pid}-{n:05d}.bin"), "wb") as f:
                    f.write(_pages(w, g, ids))
                _write(f"store-{pid}-{n:05d}.json", {"token": list(dst_spec.tokens[i]),
                                                     "key": list(dst_spec.keys[i]),
                                                     "rank": w.rank, "part_len": w.part_len})
            return res

        def probe_load(job_id, src_spec, dst_spec):
            chunks = list(w._chunks(dst_spec))
            if load_arm and os.path.exists(load_arm):
                _kill_mid_load(src_spec, load_kill_after)
            failed_before = w.counts["load_failed"]
            res = load(job_id, src_spec, dst_spec)
            # This job's failed blocks (vLLM sees them with the job's result).
            with w._mu:
                failed = set(w._job_failed.get(job_id, ())) if w.report_load_errors else set()
            for i, (g, ids, _skip) in enumerate(chunks):
                with lock:
                    n = seq["load"]
                    seq["load"] += 1
                with open(os.path.join(_DIR, f"load-{pid}-{n:05d}.bin"), "wb") as f:
                    f.write(_pages(w, g, ids))
                _write(f"load-{pid}-{n:05d}.json", {"key": list(src_spec.entries[i]),
                                                    "failed": any(int(b) in failed for b in ids),
                                                    "rank": w.rank})
                if zero:
                    _zero(w, g, ids)
            _write(f"worker-{pid}.json", dict(w.counts) | {"failed_before": failed_before})
            return res

        w._store, w._load = probe_store, probe_load
        return w
