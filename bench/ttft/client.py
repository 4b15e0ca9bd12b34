"""The client side: one streaming completion over vLLM's OpenAI server, and
its Prometheus /metrics scraped as numbers. Standard library only (the GPU
machine has no network to install a client from).

TTFT is measured as the paper does (its section 4.3): from just before the
request's first byte is sent to the arrival of the first streamed chunk that
carries a generated token, on the client's monotonic clock.
"""

import http.client
import json
import time


class RequestError(RuntimeError):
    pass


def complete(host, port, model, prompt, max_tokens, logprobs=False, timeout=600, api="server"):
    """Streams one completion of ``prompt`` (a list of token ids).

    api="offline": the replica is offline_server.py (LLM.generate); its own
    clock gives the TTFT (complete_offline).

    Returns {"ttft_ms", "e2e_ms", "tokens" (generated token ids),
    "logprobs" (per token, when asked), "prompt_tokens", "cached_tokens"}.
    Raises RequestError with the server's answer on a non-200 status or a
    stream without any token.
    """
    if api == "offline":
        return complete_offline(host, port, prompt, max_tokens, logprobs, timeout)
    body = {"model": model, "prompt": prompt, "max_tokens": int(max_tokens), "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    if logprobs:
        # skip_tokenizer_init: tokens come back as "token_id:N" placeholders.
        body.update(logprobs=1, return_tokens_as_token_ids=True)
    else:
        body.update(return_token_ids=True)
    data = json.dumps(body)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    tokens, lps, usage = [], [], {}
    ttft = None
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/v1/completions", data, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RequestError(f"HTTP {resp.status}: {resp.read()[:2000]!r}")
        for raw in resp:
            if not raw.startswith(b"data: "):
                continue
            payload = raw[6:].strip()
            if payload == b"[DONE]":
                break
            chunk = json.loads(payload)
            if chunk.get("usage"):
                usage = chunk["usage"]
            for ch in chunk.get("choices", []):
                new = _chunk_tokens(ch)
                if new and ttft is None:
                    ttft = time.perf_counter() - t0
                tokens += new
                if logprobs and ch.get("logprobs"):
                    lps += [float(x) for x in ch["logprobs"].get("token_logprobs") or []]
    except (OSError, http.client.HTTPException) as e:
        raise RequestError(f"{type(e).__name__}: {e}") from e
    finally:
        conn.close()
    e2e = time.perf_counter() - t0
    if ttft is None:
        raise RequestError("the stream ended without a generated token")
    details = usage.get("prompt_tokens_details") or {}
    return {"ttft_ms": round(ttft * 1e3, 3), "e2e_ms": round(e2e * 1e3, 3), "tokens": tokens,
            "logprobs": lps if logprobs else None, "prompt_tokens": usage.get("prompt_tokens"),
            "cached_tokens": details.get("cached_tokens")}


def complete_offline(host, port, prompt, max_tokens, logprobs=False, timeout=600):
    """One LLM.generate in offline_server.py: its "ttft_ms" is the generate
    call's own time (one token: the time to the first token), measured in
    the engine's process, without HTTP or the OpenAI server's own steps."""
    body = json.dumps({"prompt": prompt, "max_tokens": int(max_tokens),
                       "logprobs": bool(logprobs)})
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        if resp.status != 200:
            raise RequestError(f"HTTP {resp.status}: {raw[:2000]!r}")
    except (OSError, http.client.HTTPException) as e:
        raise RequestError(f"{type(e).__name__}: {e}") from e
    finally:
        conn.close()
    out = json.loads(raw)
    if not out.get("tokens"):
        raise RequestError("generate returned no token")
    out["client_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
    return out


def _chunk_tokens(choice):
    if choice.get("token_ids"):
        return [int(t) for t in choice["token_ids"]]
    lp = choice.get("logprobs") or {}
    out = []
    for t in lp.get("tokens") or []:
        if isinstance(t, str) and t.startswith("token_id:"):
            out.append(int(t.split(":", 1)[1]))
    return out


def scrape(host, port, timeout=30):
    """/metrics as {(name, frozenset(labels)): value} (counters' ``_total`` kept)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
    finally:
        conn.close()
    out = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        try:
            head, value = line.rsplit(" ", 1)
            v = float(value)
        except ValueError:
            continue
        if "{" in head:
            name, rest = head.split("{", 1)
            labels = frozenset(_labels(rest.rstrip("}")))
        else:
            name, labels = head, frozenset()
        out[(name, labels)] = v
    return out


def _labels(s):
    out = []
    for part in s.split('",'):
        if "=" not in part:
            continue
        k, v = part.split("=", 1)
        out.append((k.strip(), v.strip().strip('"')))
    return out


def total(metrics, name, **labels):
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in metrics.items() if n == name and want <= set(ls))


# The counters read per request (both 0.26 and 0.32 expose each of these;
# read from their v1/metrics/loggers.py and the offloading connector's
# metrics.py). Values are tokens except the *_bytes and *_s ones.
COUNTERS = {
    "prompt": ("vllm:prompt_tokens_total", {}),
    "computed": ("vllm:prompt_tokens_by_source_total", {"source": "local_compute"}),
    "local_hit": ("vllm:prompt_tokens_by_source_total", {"source": "local_cache_hit"}),
    "external_hit": ("vllm:prompt_tokens_by_source_total", {"source": "external_kv_transfer"}),
    "prefix_queries": ("vllm:prefix_cache_queries_total", {}),
    "prefix_hits": ("vllm:prefix_cache_hits_total", {}),
    "external_queries": ("vllm:external_prefix_cache_queries_total", {}),
    "external_hits": ("vllm:external_prefix_cache_hits_total", {}),
    "kv_load_bytes": ("vllm:kv_offload_load_bytes_total", {}),
    "kv_store_bytes": ("vllm:kv_offload_store_bytes_total", {}),
    # Seconds the worker reported for its transfers (TransferResult.transfer_time).
    "kv_load_s": ("vllm:kv_offload_load_time_total", {}),
    "kv_store_s": ("vllm:kv_offload_store_time_total", {}),
    "cxlkv_lookup_hits": ("cxlkv:lookup_hits_total", {}),
    "cxlkv_cross_hits": ("cxlkv:cross_replica_hits_total", {}),
    "cxlkv_stored_chunks": ("cxlkv:stored_chunks_total", {}),
    "cxlkv_loaded_chunks": ("cxlkv:loaded_chunks_total", {}),
    # The manager's load-or-recompute choice per request with a hit (policy.py).
    "cxlkv_decided_load": ("cxlkv:load_decisions_total", {"decision": "load"}),
    "cxlkv_decided_recompute": ("cxlkv:load_decisions_total", {"decision": "recompute"}),
    # Scheduler-side seconds in cxlkv's manager (lookup + pin, load bookkeeping).
    "cxlkv_lookup_s": ("cxlkv:manager_seconds_total", {"op": "lookup"}),
    "cxlkv_prepare_load_s": ("cxlkv:manager_seconds_total", {"op": "prepare_load"}),
    "cxlkv_complete_load_s": ("cxlkv:manager_seconds_total", {"op": "complete_load"}),
    "cxlkv_get_stats_s": ("cxlkv:manager_seconds_total", {"op": "get_stats"}),
}


def counters(metrics):
    return {k: total(metrics, n, **l) for k, (n, l) in COUNTERS.items()}


def delta(before, after):
    return {k: after[k] - before[k] for k in after}
