#!/usr/bin/env python3
"""One replica through vLLM's offline API: vllm.LLM built from the flags the
harness gives the OpenAI server (replica.py), answering on localhost:

    POST /generate {"prompt": [ids], "max_tokens": n, "logprobs": bool}
         -> {"ttft_ms", "e2e_ms", "tokens", "logprobs", "prompt_tokens", "cached_tokens"}
    GET  /metrics   the process's Prometheus registry (vLLM's and cxlkv's counters)
    GET  /health    200 once the engine is up

ttft_ms is the wall time of one LLM.generate call, measured around the
call in this process: with one token, the time to the first token without
HTTP, the OpenAI server's request handling or its streaming in it (the issue
behind this mode: the server's own overhead hides tens of ms). Requests are
served one at a time, as LLM.generate is not re-entrant.
"""

import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


def parse(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--served-model-name")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--skip-tokenizer-init", action="store_true")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--max-model-len", type=int)
    ap.add_argument("--generation-config", default="auto")
    ap.add_argument("--enforce-eager", action="store_true")
    ap.add_argument("--gpu-memory-utilization", type=float)
    ap.add_argument("--kv-cache-memory-bytes", type=int)
    ap.add_argument("--load-format")
    ap.add_argument("--block-size", type=int)
    ap.add_argument("--max-num-seqs", type=int)
    pc = ap.add_mutually_exclusive_group()
    pc.add_argument("--enable-prefix-caching", dest="prefix_caching", action="store_true",
                    default=None)
    pc.add_argument("--no-enable-prefix-caching", dest="prefix_caching", action="store_false")
    ap.add_argument("--kv-offloading-backend")
    ap.add_argument("--kv-offloading-size", type=float)
    ap.add_argument("--kv-transfer-config", type=json.loads)
    return ap.parse_args(argv)


def engine_kwargs(a):
    """The LLM keywords of the flags given (None: vLLM's default)."""
    kw = {"model": a.model, "skip_tokenizer_init": a.skip_tokenizer_init, "dtype": a.dtype,
          "max_model_len": a.max_model_len, "generation_config": a.generation_config,
          "enforce_eager": a.enforce_eager, "gpu_memory_utilization": a.gpu_memory_utilization,
          "kv_cache_memory_bytes": a.kv_cache_memory_bytes, "load_format": a.load_format,
          "block_size": a.block_size, "max_num_seqs": a.max_num_seqs,
          "enable_prefix_caching": a.prefix_caching,
          "kv_offloading_backend": a.kv_offloading_backend,
          "kv_offloading_size": a.kv_offloading_size,
          "kv_transfer_config": a.kv_transfer_config,
          "disable_log_stats": False}  # the Prometheus counters /metrics serves
    return {k: v for k, v in kw.items() if v is not None}


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(**engine_kwargs(a))
    try:
        from prometheus_client import REGISTRY, generate_latest
    except ImportError:
        REGISTRY = generate_latest = None

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code, body, ctype="application/json"):
            data = body if isinstance(body, bytes) else body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                return self._send(200, "{}")
            if self.path == "/metrics" and generate_latest is not None:
                return self._send(200, generate_latest(REGISTRY), "text/plain; version=0.0.4")
            return self._send(404, "{}")

        def do_POST(self):
            if self.path != "/generate":
                return self._send(404, "{}")
            try:
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                params = SamplingParams(max_tokens=int(req["max_tokens"]), temperature=0,
                                        ignore_eos=True, logprobs=1 if req.get("logprobs") else None)
                prompt = TokensPrompt(prompt_token_ids=list(req["prompt"]))
                t0 = time.perf_counter()
                (out,) = llm.generate([prompt], params, use_tqdm=False)
                e2e = time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001 - the client reports it
                return self._send(500, json.dumps({"error": f"{type(e).__name__}: {e}"}))
            c = out.outputs[0]
            lps = None
            if req.get("logprobs") and c.logprobs:
                lps = [float(d[t].logprob) for d, t in zip(c.logprobs, c.token_ids)]
            one = int(req["max_tokens"]) == 1
            self._send(200, json.dumps({
                "ttft_ms": round(e2e * 1e3, 3) if one else None, "e2e_ms": round(e2e * 1e3, 3),
                "tokens": list(c.token_ids), "logprobs": lps,
                "prompt_tokens": len(req["prompt"]),
                "cached_tokens": getattr(out, "num_cached_tokens", None)}))

    HTTPServer((a.host, a.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
