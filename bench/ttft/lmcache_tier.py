"""LMCache, the most used shared KV tier, beside cxlkv in the same run (issue 28):
tiers T5 and T6, each one `lmcache server` process (LMCache's multiprocess, MP,
mode) that every vLLM replica of the tier connects to.

  T5  LMCache MP, L1 in DRAM: a pinned POSIX shared-memory pool of the same
      size as T4's region (--region-size), allocated at start
  T6  LMCache MP, L1 on a Device-DAX path: here a /dev/shm file of that size
      (the closest analogue of a cxlkv region; real devdax takes /dev/daxX.Y)

Version: lmcache 0.5.3, the newest whose compiled ops load with the GPU
image's torch 2.11.0+cu130 (0.5.4-0.5.6's cuda_ops need the symbol
c10::NotImplementedError::NotImplementedError(c10::SourceLocation,
std::string), which torch 2.11.0's libc10.so does not export; 0.5.3's c_ops
needs 66 torch symbols, all exported by 2.11.0+cu130's libraries; both link
libcudart.so.13). Installed on the GPU machine by the bundle set "lmcache"
(scripts/gpu-bundle.d/lmcache.sh).

Where every flag comes from (LMCache 0.5.3's own `lmcache server --help`,
read from the wheel's source, and LMCache's documentation):
- `python -m lmcache.cli.main server`: the `lmcache` console script of the
  wheel (entry_points.txt: lmcache = lmcache.cli.main:main), run as a module
  because a --target install has no console scripts; docs/source/cli/server.rst.
- --host/--port (ZMQ, the port vLLM connects to), --chunk-size 256 (the
  default, named so the granularity equals T2/T4's): lmcache/v1/multiprocess/
  config.py add_mp_server_args.
- --http-host/--http-port: the HTTP frontend (its /healthcheck and /status are
  what the harness waits on and reads): config.py add_http_frontend_args,
  lmcache/v1/multiprocess/http_apis/info_api.py. A free port per start, not
  the default 8080.
- --l1-size-gb (converted with 1024^3: distributed/config.py
  parse_args_to_config), --eviction-policy LRU (required; LRU as in the docs'
  quick starts, docs/source/mp/quickstart.rst and cli/server.rst):
  lmcache/v1/distributed/config.py add_storage_manager_args.
- --max-workers N, N the number of replicas: the server's worker threads
  (config.py: "Base number of worker threads for both GPU and CPU pools",
  default 1); at start the server logs "Created AffinityThreadPool ... with 1
  worker slots ... Compare this against the number of clients expected to
  connect" (multiprocess/affinity_pool.py): one slot per engine, so two
  replicas' stores and loads are not serialised on one thread. The docs'
  Docker quick start (docs/source/mp/quickstart.rst) runs --max-workers 4.
- --no-l1-use-lazy (T5): the whole L1 allocated and pinned at start, as T4's
  region is created and registered at start; L1 is then LMCache's own default
  POSIX shared-memory pool, /dev/shm/lmcache_l1_pool_<server pid>
  (L1MemoryManagerConfig.shm_name's default; memory_manager/
  l1_memory_manager.py create_memory_allocator; memory_management.py
  _resolve_pinned_alloc_free: alloc_shm_pinned_ptr), which the integrity step
  reaches from outside (damage.py).
- --l1-devdax-path FILE --no-l1-use-lazy --shm-name "" (T6), --l1-size-gb as
  T5's: 0.5.3's help text of --l1-devdax-path ("Optional /dev/dax device or
  mmap-able file to use as the L1 backing arena ... Set --no-l1-use-lazy and
  --shm-name \"\"", distributed/config.py add_storage_manager_args; LMCache's
  docs/source/mp/configuration.rst, "L1 Memory Manager", documents the flag
  alike). What
  0.5.3 does with the path (the wheel's source):
  - distributed/config.py L1MemoryManagerConfig.__post_init__ refuses the path
    with lazy allocation or a named SHM pool (ValueError, at argument parsing);
  - distributed/l1_manager.py takes DevDaxL1MemoryManager for it ("Device-DAX
    L1 tier enabled; CPU-only L1 disabled" in the log), pure Device-DAX: the
    whole --l1-size-gb from the path, no DRAM part (devdax_l1_memory_manager.py:
    a DRAM part needs an overflow size, which only a DAX L2 adapter on the same
    path sets);
  - memory_allocators/devdax_memory_allocator.py _open_devdax_mapping opens
    the path O_RDWR (it must exist: nothing creates it), refuses it when its
    st_size is non-zero and below the L1 size ("l1 devdax size (N bytes)
    exceeds PATH capacity (M bytes)"; a character device reports 0 and is not
    checked, an empty regular file fails in Python's mmap), and maps the L1
    size MAP_SHARED from offset 0. Any file does: no device type, size
    multiple or alignment is checked (--l1-align-bytes, 4 KiB by default,
    aligns objects inside the map). Where CUDA can pin, the map is
    cudaHostRegister'ed; a failure is a warning ("pin_memory failed
    for Device-DAX L1 mapping ...; falling back to pageable host copies"),
    which the harness records (Server.l1_pin_failed);
  - multiprocess/engine_context.py advertises no SHM pool for a devdax L1, so
    engines without a GPU move KV to and from the server by pickle over ZMQ
    ("Using pickle non-GPU transfer strategy"; T5 on CPU uses its SHM pool):
    T6's CPU times are not T5's. On CUDA both read and write the engines' KV
    over CUDA IPC (server-driven transfer) into the pinned L1.
  So a /dev/shm file runs: the harness creates it (sparse, truncated to the L1
  size) before the server starts and removes it after. LMCache's own tests of
  this L1 use a regular file too (tests/v1/distributed/
  test_devdax_l1_allocator.py: "a regular mmap-able file rather than
  requiring real /dev/dax hardware").

vLLM side (vLLM 0.26.0): kv_connector "LMCacheMPConnector" is registered by
vllm/distributed/kv_transfer/kv_connector/factory.py; its module
(v1/lmcache_mp_connector.py, _resolve_lmcache_mp_connector) prefers the
connector shipped in the lmcache package (lmcache/integration/vllm/
lmcache_mp_connector.py in 0.5.3), which reads extra-config keys
lmcache.mp.host (default tcp://localhost) and lmcache.mp.port (default
5555). --no-enable-prefix-caching and kv_load_failure_policy "recompute" as
for T4 (LMCache's docs/source/mp/shared_l1.rst turns GPU prefix caching off
too, to tell a shared hit from a GPU-local one; that page describes a
coordinated shared devdax L1 of a later release: its --l1-coordinator-*
flags are not in 0.5.3).
"""

import json
import os
import re
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from replica import (_EXC, ServerProcess, StartError, dist_version, free_port,  # noqa: E402
                     repo_relative)

TIERS = ("T5", "T6")
VERSION = "0.5.3"
GRANULARITY = 256
NAMES = {"T5": "LMCache MP, L1 in DRAM (shm)", "T6": "LMCache MP, L1 on a devdax path"}
# Where T6's devdax stand-in files live: a directory of this process's own,
# so runs at once never share one (a file name is the tier run's, alike in
# two runs), removed when the run ends (remove_dax_dir); each file is
# removed with its server.
DAX_DIR = f"/dev/shm/cxlkv-ttft-lmcache-{os.getpid()}"
# LMCache's default L1 pool name: L1MemoryManagerConfig.shm_name.
SHM_PREFIX = "lmcache_l1_pool_"
# The server's INFO line for every store (lmcache/v1/multiprocess/modules/
# lmcache_driven_transfer.py): "Stored 8192 tokens in 0.004 seconds".
_STORED = re.compile(r"Stored (\d+) tokens in ")
# 0.5.3's warning when CUDA cannot pin T6's map (devdax_memory_allocator.py
# _register_arena_pin): its copies then go through pageable memory.
PIN_FAILED = "pin_memory failed for Device-DAX L1 mapping"


def remove_dax_dir():
    """Removes DAX_DIR and what is left in it (ttft.py, when a run ends)."""
    shutil.rmtree(DAX_DIR, ignore_errors=True)


def gib(nbytes):
    """--l1-size-gb's value for nbytes (LMCache multiplies by 1 << 30)."""
    return f"{nbytes / (1 << 30):.6g}"


def server_argv(tier, python, *, zmq_port, http_port, l1_bytes, clients=2, devdax_path=None,
                extra=()):
    """The `lmcache server` command line of a T5/T6 start (module docstring
    says where each flag comes from)."""
    if tier not in TIERS:
        raise ValueError(f"{tier!r} is not an LMCache tier ({', '.join(TIERS)})")
    if not l1_bytes or l1_bytes < (1 << 20):
        raise ValueError(f"LMCache L1 of {l1_bytes} bytes: give at least 1 MiB (--region-size)")
    argv = [python, "-m", "lmcache.cli.main", "server",
            "--host", "127.0.0.1", "--port", str(zmq_port),
            "--http-host", "127.0.0.1", "--http-port", str(http_port),
            "--chunk-size", str(GRANULARITY),
            "--l1-size-gb", gib(l1_bytes), "--eviction-policy", "LRU",
            "--max-workers", str(int(clients)), "--no-l1-use-lazy"]
    if tier == "T6":
        if not devdax_path:
            raise ValueError("T6 needs a devdax path")
        argv += ["--l1-devdax-path", devdax_path, "--shm-name", ""]
    return argv + list(extra)


def transfer_config(zmq_port):
    # A template (the run's call record) names the port as a string.
    port = zmq_port if isinstance(zmq_port, str) else int(zmq_port)
    return {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
            "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1",
                                          "lmcache.mp.port": port}}


def flags(tier, zmq_port):
    """The replicas' vLLM flags of a T5/T6 start (the server's port in them)."""
    if tier not in TIERS:
        raise ValueError(f"{tier!r} is not an LMCache tier ({', '.join(TIERS)})")
    return ["--no-enable-prefix-caching", "--kv-transfer-config",
            json.dumps(transfer_config(zmq_port))]


def site_env(site):
    """The environment that puts a directory holding lmcache first on the
    path (the CPU tests' scripts/lmcache-site.sh); {} for none."""
    if not site:
        return {}
    return {"PYTHONPATH": os.pathsep.join(p for p in (HERE, site, os.environ.get("PYTHONPATH"))
                                          if p)}


def installed_version(python, site=None):
    """lmcache's version as the interpreter's metadata names it, or None."""
    return dist_version(python, "lmcache", dict(os.environ, **site_env(site)))


def _find(obj, key):
    """Every value of ``key`` anywhere in a JSON document."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key and isinstance(v, (int, float)):
                out.append(v)
            else:
                out += _find(v, key)
    elif isinstance(obj, list):
        for v in obj:
            out += _find(v, key)
    return out


class Server(ServerProcess):
    """One `lmcache server` process: started in its own process group, ready
    when GET /healthcheck answers 200 (the engine is initialised), stopped
    with SIGTERM then SIGKILL of the group; its log in log_dir; T6's devdax
    file created before and removed after."""

    STOP_GRACE_S = 20

    def __init__(self, name, tier, *, python, log_dir, l1_bytes, clients=2, site=None,
                 extra=()):
        self.tier = tier
        self.zmq_port, self.http_port = free_port(), free_port()
        while self.http_port == self.zmq_port:
            self.http_port = free_port()
        super().__init__(name, "lmcache server", log_dir, f"http://127.0.0.1:{self.http_port}")
        self.l1_bytes = int(l1_bytes)
        self.devdax_path = os.path.join(DAX_DIR, f"{name}.dax") if tier == "T6" else None
        self.cmd = server_argv(tier, python, zmq_port=self.zmq_port, http_port=self.http_port,
                               l1_bytes=self.l1_bytes, clients=clients,
                               devdax_path=self.devdax_path, extra=extra)
        env = dict(os.environ)
        env.update({"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1",
                    # LMCache's own usage reporting (lmcache/usage_context.py)
                    "LMCACHE_TRACK_USAGE": "false"})
        env.update(site_env(site))
        self.env = env

    def l1_path(self):
        """The file that holds the L1 bytes: T5's shared-memory pool
        (/dev/shm/lmcache_l1_pool_<pid>), T6's devdax file."""
        if self.tier == "T6":
            return self.devdax_path
        return f"/dev/shm/{SHM_PREFIX}{self.pid}" if self.pid else None

    def describe(self):
        return {"name": self.name, "tier": self.tier, "zmq_port": self.zmq_port,
                "http_port": self.http_port, "l1_bytes": self.l1_bytes,
                "l1_path": self.l1_path(), "pid": self.pid, "argv": repo_relative(self.cmd[1:]),
                "log": os.path.basename(self.log_path)}

    def start(self):
        if self.devdax_path:
            os.makedirs(DAX_DIR, exist_ok=True)
            st = os.statvfs(DAX_DIR)
            if st.f_bavail * st.f_frsize < self.l1_bytes:
                raise StartError(f"T6 devdax file of {self.l1_bytes} bytes does not fit: {DAX_DIR} "
                                 f"has {st.f_bavail * st.f_frsize} bytes free (--region-size)", "")
            with open(self.devdax_path, "wb") as f:
                f.truncate(self.l1_bytes)
        super().start()

    def probe(self):
        status, _ = self._get("/healthcheck", timeout=2)
        return status == 200

    def start_hint(self, tail):
        if "No module named 'lmcache" in tail:
            return (" (lmcache is not importable: give ttft.py --lmcache-site DIR from "
                    "scripts/lmcache-site.sh, or install the bundle set lmcache)")
        return ""

    def status(self):
        """GET /status as JSON (the L1 manager's object counts are in it)."""
        _, body = self._get("/status", timeout=10)
        return json.loads(body)

    def l1_counts(self):
        """(objects, write-locked objects) of L1, from /status; (None, None)
        when the document has no such fields."""
        try:
            st = self.status()
        except (OSError, ValueError):
            return None, None
        objs, locked = _find(st, "total_object_count"), _find(st, "write_locked_count")
        return (int(sum(objs)) if objs else None, int(sum(locked)) if locked else None)

    def l1_pin_failed(self):
        """T6: True when the server logged that CUDA could not pin its devdax
        map (copies through pageable memory: not the pinned L1 that T5 and
        T4 get), False when it did not; None for T5. On a host without CUDA
        0.5.3 pins nothing and logs nothing."""
        if self.tier != "T6":
            return None
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return any(PIN_FAILED in line for line in f)
        except OSError:
            return False

    def log_mark(self):
        """The server log's length now: stored_tokens_since counts from it."""
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def stored_tokens_since(self, mark):
        """Tokens the server logged as stored ("Stored N tokens in S
        seconds", lmcache_driven_transfer.py's INFO line for every store)
        after byte ``mark`` of its log: a count that eviction does not lower,
        unlike L1's object count."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(mark)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return 0
        return sum(int(n) for n in _STORED.findall(text))

    def wait_stored(self, before_objects, chunks, wait_s, log_mark=None):
        """Waits (at most wait_s) until the prompt's ``chunks`` are stored and
        no L1 object is write-locked, so req2 cannot race the store. Stored
        means L1 holds ``chunks`` more objects than before, or (a full L1
        evicts as it stores, so its count may not grow) the server logged
        that many chunks' tokens as stored since ``log_mark``."""
        t0 = time.monotonic()
        objs = locked = None
        logged = None
        while True:
            objs, locked = self.l1_counts()
            if log_mark is not None:
                logged = self.stored_tokens_since(log_mark)
            grew = objs is not None and before_objects is not None and \
                objs - before_objects >= chunks
            done = (grew or (logged is not None and logged >= chunks * GRANULARITY)) \
                and not locked
            if done or time.monotonic() - t0 > wait_s:
                break
            time.sleep(0.01)
        return {"store_wait_ms": round((time.monotonic() - t0) * 1e3, 1),
                "l1_objects_before": before_objects, "l1_objects": objs,
                "l1_write_locked": locked, "l1_logged_tokens": logged,
                "expected_chunks": chunks, "store_complete": done}

    def root_cause(self):
        """The first error line of the server's log, or None."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if _EXC.search(line):
                        return line.strip()[-400:]
        except OSError:
            pass
        return None

    def stop(self, grace=None):
        pid = self.pid
        super().stop(grace)
        # What the server leaves behind when killed: its pool (named after its
        # own pid, so never another's) and T6's file.
        left = [p for p in (f"/dev/shm/{SHM_PREFIX}{pid}" if pid else None, self.devdax_path)
                if p and os.path.exists(p)]
        for p in left:
            try:
                os.unlink(p)
            except OSError:
                pass
        if self.devdax_path:
            try:
                os.rmdir(DAX_DIR)  # once empty: the last T6 server of the run is gone
            except OSError:
                pass
        return left
