"""Mooncake Store beside cxlkv in the same run (issue 29): tier T3, the pooled
RDMA-class store that the paper reserved T3 for and never ran. One
`mooncake_master` per tier run (metadata and allocation only); every vLLM
replica runs vLLM's MooncakeStoreConnector, whose worker contributes its
share of the pool in-process ("embedded" mode) and moves KV through
Mooncake's transfer engine.

  T3  Mooncake Store 0.3.14, embedded mode, P2PHANDSHAKE metadata, protocol
      "tcp" (no RDMA device here): the replicas' segments add up to T4's
      region size (--region-size), each replica global_segment_size =
      region size / replicas.

TCP over loopback is not how Mooncake is deployed: its transfer engine is
built for RDMA between hosts (and NVLink inside one), where a read is a
one-sided NIC DMA into GPU memory. Here every byte of a load crosses the
kernel's TCP stack twice (the owning worker's segment -> socket -> the
reader's buffer) and the master is asked first, so T3's TTFT is an upper
bound on what Mooncake costs on one host, and its hit rates and eviction are
Mooncake's own whatever the wire.

Version: mooncake-transfer-engine-cuda13 0.3.14 (the CUDA 13 build that
vLLM 0.26.0's wheel and the GPU image's torch 2.11.0+cu130 use), installed on
the GPU machine by the bundle set "mooncake" (scripts/gpu-bundle.d/
mooncake.sh: the system libraries it links, libibverbs, libmlx5, libnuma,
libcurl, come as Debian packages in a private prefix).

Where every setting comes from:
- `python -m mooncake.cli` is the wheel's `mooncake_master` console script
  (entry_points.txt: mooncake_master = mooncake.cli:main), which execs the
  bundled binary with our arguments (the pid stays the master's); run as a
  module because a --target install has no console scripts.
- --rpc_port (the port the connector's master_server_address names; the
  binary's --help: "Port for RPC server to listen on (0 = use port,
  preferred over port)", --port being deprecated), --rpc_address 127.0.0.1,
  --metrics_port/--metrics_host: the HTTP admin server whose /health
  (`"service_ready": true`) and /metrics (master_key_count,
  master_allocated_bytes, master_total_capacity_bytes,
  master_evicted_key_count, ...) the harness reads. Everything else at the
  binary's defaults (eviction at 90 % of the pool, 5 % at a time, 10 s lease
  per object): vLLM's guide starts it with nothing but the port.
- The JSON config through MOONCAKE_CONFIG_PATH, keys as vLLM 0.26.0's
  MooncakeStoreConfig.from_file reads them (vllm/distributed/kv_transfer/
  kv_connector/v1/mooncake/store/worker.py): mode "embedded",
  metadata_server "P2PHANDSHAKE", master_server_address, global_segment_size
  and local_buffer_size (bytes; "per GPU" in the guide), protocol "tcp",
  device_name "". vLLM's guide (docs/features/
  mooncake_store_connector_usage.md: "protocol: Use "rdma" for best
  performance. "tcp" works as a fallback") gives 80GB/4GB; we give T4's
  memory split over the replicas and the guide's 4 GiB local buffer on GPU
  (--mooncake-local-buffer).
- kv_connector "MooncakeStoreConnector" (registered in 0.26.0's
  kv_connector/factory.py), kv_role "kv_both" (the guide's single-node
  offloading example), kv_connector_extra_config lookup_rpc_port: distinct
  per replica (worker.py get_zmq_rpc_path_lookup: the scheduler-to-worker
  lookup socket is ipc://<VLLM_RPC_BASE_PATH>/lookup_rpc_port_<port>_host_
  <hostname>_dp_rank<n>, so two engines on one host with the default 0 would
  share one socket path). kv_load_failure_policy "recompute" and
  --no-enable-prefix-caching as for T4/T5.
- PYTHONHASHSEED the same for every replica (replica.py sets 0 for all
  tiers): the guide's "Reproducible Block Hashes Across Processes".
- MOONCAKE_REQUESTER_LOCAL_HOSTNAME=127.0.0.1 (vLLM 0.26.0 envs.py; the
  guide's environment table): the address each worker registers its segment
  under; otherwise vLLM's get_ip() guesses one from the default route, which
  the GPU machine has none of.
- Granularity: the connector stores one key per engine KV block (scheduler
  block size: 16 tokens on the GPU, 32 in the CPU tests), not per 256-token
  chunk: T3 can hit up to floor(prefix / 16) x 16 tokens, more than T4's and
  T5's 256-token alignment bound. Reported as measured.

On a host without the NVIDIA driver mooncake.store does not import: its
extension links the driver's libcuda.so.1 and the CUDA runtime
("ImportError: libcuda.so.1: cannot open shared object file").
scripts/mooncake-site.sh puts the runtime (NVIDIA's nvidia-cuda-runtime
wheel) and a no-device libcuda.so.1 (every entry point returns
CUDA_ERROR_NO_DEVICE, as the driver does on a host with no GPU) on that
site's library path; with it, T3 runs with vLLM's CPU engine: Mooncake's tcp
transport of host memory never calls the driver, and vLLM's connector
records a torch.cuda.Event() per store (worker.py wait_for_save), which
vLLM's CPU worker replaces with a placeholder (v1/worker/cpu/shm.py). The
CPU tests run it so (test_mooncake.py, scripts/test.d/70-ttft.sh). Where
mooncake.store does not import, the run logs T3 as skipped with the error.
"""

import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from replica import (_EXC, ServerProcess, dist_version, free_port,  # noqa: E402
                     repo_relative)

TIERS = ("T3",)
VERSION = "0.3.14"
NAMES = {"T3": "Mooncake Store (embedded, tcp)"}
_METRIC = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)\s*$")


def config(master_port, segment_bytes, local_buffer_bytes):
    """The JSON document MOONCAKE_CONFIG_PATH names (module docstring)."""
    if not segment_bytes or segment_bytes < (1 << 20):
        raise ValueError(f"Mooncake segment of {segment_bytes} bytes per replica: give at least "
                         "1 MiB (--region-size / --replicas)")
    if not local_buffer_bytes or local_buffer_bytes < (1 << 20):
        raise ValueError(f"Mooncake local buffer of {local_buffer_bytes} bytes: give at least 1 MiB "
                         "(--mooncake-local-buffer)")
    port = master_port if isinstance(master_port, str) else int(master_port)
    return {"mode": "embedded", "metadata_server": "P2PHANDSHAKE",
            "master_server_address": f"127.0.0.1:{port}",
            "global_segment_size": int(segment_bytes),
            "local_buffer_size": int(local_buffer_bytes),
            "protocol": "tcp", "device_name": ""}


def transfer_config(lookup_port):
    port = lookup_port if isinstance(lookup_port, str) else int(lookup_port)
    return {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both",
            "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": {"lookup_rpc_port": port}}


def flags(tier, lookup_port):
    """One replica's vLLM flags (each replica its own lookup port)."""
    if tier not in TIERS:
        raise ValueError(f"{tier!r} is not a Mooncake tier ({', '.join(TIERS)})")
    return ["--no-enable-prefix-caching", "--kv-transfer-config",
            json.dumps(transfer_config(lookup_port))]


def replica_env(config_path):
    return {"MOONCAKE_CONFIG_PATH": config_path, "MOONCAKE_REQUESTER_LOCAL_HOSTNAME": "127.0.0.1"}


def master_argv(python, *, rpc_port, metrics_port, extra=()):
    return [python, "-m", "mooncake.cli", "--rpc_port", str(rpc_port),
            "--rpc_address", "127.0.0.1", "--metrics_port", str(metrics_port),
            "--metrics_host", "127.0.0.1"] + list(extra)


def site_env(site):
    """The environment that puts a directory holding mooncake first on the
    path (scripts/mooncake-site.sh: its lib/ holds the system libraries
    this machine lacks); {} for none."""
    if not site:
        return {}
    return {"PYTHONPATH": os.pathsep.join(p for p in (HERE, site, os.environ.get("PYTHONPATH"))
                                          if p),
            "LD_LIBRARY_PATH": os.pathsep.join(
                p for p in (os.path.join(site, "lib"), os.environ.get("LD_LIBRARY_PATH")) if p)}


def import_error(python, site=None):
    """The last line of the error importing mooncake.store in the
    replicas' environment, or None when it imports."""
    try:
        out = subprocess.run([python, "-c", "import mooncake.store"], capture_output=True,
                             text=True, timeout=300, env=dict(os.environ, **site_env(site)))
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"
    if out.returncode == 0:
        return None
    lines = (out.stderr or out.stdout).strip().splitlines()
    return lines[-1][-300:] if lines else f"exit status {out.returncode}"


def installed_version(python, site=None):
    return dist_version(python, "mooncake-transfer-engine-cuda13",
                        dict(os.environ, **site_env(site)))


def parse_metrics(text):
    """{name: summed value} of a Prometheus text page (labels summed)."""
    out = {}
    for line in text.splitlines():
        m = _METRIC.match(line.strip())
        if not m:
            continue
        try:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
        except ValueError:
            pass
    return out


# The master's counters the harness logs (region-wide, like T4's).
COUNTERS = ("master_key_count", "master_allocated_bytes", "master_total_capacity_bytes",
            "master_active_clients", "master_evicted_key_count", "master_evicted_size_bytes",
            "master_batch_put_start_items_total", "master_batch_put_start_failed_items_total",
            "master_batch_put_end_items_total", "master_batch_put_end_failed_items_total",
            "master_put_end_requests_total", "master_put_end_failures_total",
            "master_batch_get_replica_list_items_total",
            "master_batch_get_replica_list_failed_items_total")


def puts_done(c):
    """Objects whose put the master completed (batched and single), from
    its counters; None when it does not report them."""
    keys = ("master_batch_put_end_items_total", "master_batch_put_end_failed_items_total",
            "master_put_end_requests_total", "master_put_end_failures_total")
    if not all(k in c for k in keys):
        return None
    return c[keys[0]] - c[keys[1]] + c[keys[2]] - c[keys[3]]


class Master(ServerProcess):
    """One mooncake_master: started in its own process group, ready when GET
    /health says service_ready, stopped with SIGTERM then SIGKILL of the
    group; its log in log_dir beside the engines'; the config file the
    replicas read written there too."""

    POLL_S = 0.3
    STOP_GRACE_S = 15

    def __init__(self, name, *, python, log_dir, segment_bytes, local_buffer_bytes, site=None,
                 extra=()):
        self.rpc_port, self.metrics_port = free_port(), free_port()
        while self.metrics_port == self.rpc_port:
            self.metrics_port = free_port()
        super().__init__(name, "mooncake_master", log_dir, f"http://127.0.0.1:{self.metrics_port}")
        self.config_path = os.path.join(log_dir, f"{name}.json")
        self.config = config(self.rpc_port, segment_bytes, local_buffer_bytes)
        self.cmd = master_argv(python, rpc_port=self.rpc_port, metrics_port=self.metrics_port,
                               extra=extra)
        env = dict(os.environ)
        env.update({"PYTHONUNBUFFERED": "1"})
        env.update(site_env(site))
        self.env = env

    def describe(self):
        return {"name": self.name, "rpc_port": self.rpc_port, "metrics_port": self.metrics_port,
                "pid": self.pid, "argv": repo_relative(self.cmd[1:]), "config": self.config,
                "log": os.path.basename(self.log_path)}

    def start(self):
        with open(self.config_path, "w") as f:
            json.dump(self.config, f, indent=1)
        super().start()

    def probe(self):
        try:
            status, body = self._get("/health", timeout=2)
            return status == 200 and bool(json.loads(body).get("service_ready"))
        except ValueError:  # not JSON (yet)
            return False

    def start_hint(self, tail):
        if "No module named 'mooncake" in tail:
            return (" (mooncake is not importable: give ttft.py --mooncake-site DIR from "
                    "scripts/mooncake-site.sh, or install the bundle set mooncake)")
        if "error while loading shared libraries" in tail:
            return (" (a system library is missing: the bundle set mooncake links what "
                    "the machine lacks into its lib/, which must be on LD_LIBRARY_PATH)")
        return ""

    def counters(self):
        """The master's region-wide counters (COUNTERS), {} when unreachable."""
        try:
            _, body = self._get("/metrics", timeout=10)
        except OSError:
            return {}
        m = parse_metrics(body.decode("utf-8", "replace"))
        return {k: m[k] for k in COUNTERS if k in m}

    def key_count(self):
        return self.counters().get("master_key_count")

    def mark(self):
        """(objects held, puts completed) now: what wait_stored starts from."""
        c = self.counters()
        return c.get("master_key_count"), puts_done(c)

    def wait_stored(self, before, keys, wait_s):
        """Waits (at most wait_s) until ``keys`` more puts completed since
        ``before`` (mark(); one key per engine block of the prompt), or the
        master holds that many more objects, so req2 cannot race the
        asynchronous put. Completed puts count even when a full pool evicts
        as it stores and its object count falls."""
        t0 = time.monotonic()
        keys0, ends0 = before if isinstance(before, tuple) else (before, None)
        now = ends = None
        while True:
            c = self.counters()
            now, ends = c.get("master_key_count"), puts_done(c)
            done = (now is not None and keys0 is not None and now - keys0 >= keys) or \
                (ends is not None and ends0 is not None and ends - ends0 >= keys)
            if done or time.monotonic() - t0 > wait_s:
                break
            time.sleep(0.01)
        return {"store_wait_ms": round((time.monotonic() - t0) * 1e3, 1),
                "master_keys_before": keys0, "master_keys": now,
                "master_puts_done": None if ends is None or ends0 is None else ends - ends0,
                "expected_keys": keys, "store_complete": done}

    def root_cause(self):
        """The first error line of the master's log (an exception, a loader
        error, or glog's E/F lines), or None."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    s = line.strip()
                    if _EXC.search(s) or "error while loading shared libraries" in s or \
                            s.startswith("ERROR: ") or re.match(r"^[EF]\d{4} ", s):
                        return s[-400:]
        except OSError:
            pass
        return None
