"""One replica: a vLLM OpenAI server process (python -m
vllm.entrypoints.openai.api_server) with a tier's flags, started in its own
process group, waited on until /health answers, stopped with SIGTERM then
SIGKILL of that group (the server's EngineCore and workers are in it).

Placement (issues 15/16 run several GPUs): with at least as many GPUs as
replicas, replica i gets CUDA_VISIBLE_DEVICES=i and the whole GPU share;
otherwise every replica runs on GPU 0 and the share is split. On the CPU
engine each replica is bound to one core (VLLM_CPU_OMP_THREADS_BIND).

Why the OpenAI server and not a server of our own: vLLM 0.26's server takes
a token-id prompt (CompletionRequest.prompt: list[int]) with stream=true
under --skip-tokenizer-init (read in 0.26.0's
entrypoints/openai/completion/serving.py: completion_stream_generator emits a
chunk per step with text "" and, with return_token_ids, the new token ids;
renderers only call the tokenizer for text prompts, echo or padding, and the
output processor builds no detokenizer when the tokenizer is None), and
vllm-cpu 0.32's does the same (run by the CPU stage).
"""

import errno
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

# Engine log lines that carry setup costs of the cxlkv backend (region attach,
# cudaHostRegister, first touch / prefault), whatever exact words the worker
# uses: kept per replica for the report, never parsed for control flow.
_SETUP = re.compile(r"cxlkv.*?(attach|regist|first[ _-]?touch|prefault|populat)", re.I)
# An exception's message line, as a traceback or vLLM's error logging prints it:
# "...] cxlkv.errors.IOError: reserve ..." or "ValueError: ..." at line start.
_EXC = re.compile(r"(?:^|\] |\) )(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception): ")
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(ms|s)\b")


# The checkout this harness runs from (bench/ttft/../..): argv recorded in a
# run's log names its files relative to it, so a results folder never carries
# the paths of the machine it ran on.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def repo_relative(argv):
    """argv with each argument under the checkout written relative to it."""
    return [os.path.relpath(a, _ROOT) if isinstance(a, str) and a.startswith(_ROOT + os.sep)
            else a for a in argv]

# Every server started here and not yet stopped, oldest first. They run in
# sessions of their own (start_new_session), where neither a signal to the
# harness nor a terminal's ^C reaches them: a harness that is stopped ends
# them itself (stop_all).
_LIVE = []
_LIVE_LOCK = threading.Lock()


def stop_all(grace=10):
    """Stops every server still live (each one's own stop(), so LMCache's
    removes its files too), the newest first, each with `grace` seconds from
    SIGTERM to SIGKILL; returns their names."""
    with _LIVE_LOCK:
        live = list(reversed(_LIVE))
    for srv in live:
        srv.stop(grace)
    return [srv.name for srv in live]


def stop_process_group(proc, grace):
    """Ends a server started in its own session (start_new_session): SIGTERM
    to its process group, up to `grace` seconds for it to exit, then SIGKILL
    to the group anyway, since children (vLLM's EngineCore and workers, a
    peer's worker processes) can outlive the leader and hold GPU or shared
    memory. Waits at most 10 s more for the leader; never raises."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def dist_version(python, dist, env):
    """The version of the installed distribution `dist` as interpreter
    `python` sees it with environment `env`, or None (not installed, or the
    interpreter failed)."""
    code = ("import importlib.metadata as m\n"
            f"try:\n    print(m.version({dist!r}))\n"
            "except m.PackageNotFoundError:\n    print('')\n")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120,
                             env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    v = out.stdout.strip().splitlines()[-1:] if out.returncode == 0 else []
    return v[0] if v and v[0] else None


# Ports free_port() handed out in this process: each once, since nothing
# binds them until the servers start.
_HANDED_OUT = set()
_PORTS_LOCK = threading.Lock()


def free_port():
    """A TCP port on 127.0.0.1 for a server started next, which binds it
    only after its imports, seconds later. Picked outside the kernel's
    ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), which no bind
    to port 0 and no outgoing connection is given, from 20000 up, and leased
    as the repository's end-to-end tests lease theirs: a directory per port
    under $CXLKV_PORT_LEASES (default /tmp/cxlkv-port-leases-UID), made with
    mkdir, which fails for a second taker; leases lapse after an hour. A
    port is handed out only if it binds now. Something else may still take
    it before the server binds: ServerProcess.wait_ready then starts a
    Replica again on another port, seen by its bind error."""
    leases = os.environ.get("CXLKV_PORT_LEASES") or f"/tmp/cxlkv-port-leases-{os.getuid()}"
    os.makedirs(leases, exist_ok=True)
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = (int(x) for x in f.read().split())
    candidates = [p for p in range(20000, 65536) if not lo <= p <= hi]
    random.SystemRandom().shuffle(candidates)  # apart from other callers' picks
    if not candidates:  # the whole range is ephemeral: the kernel's picks, leased
        candidates = [0] * 200
    with _PORTS_LOCK:
        for port in candidates:
            if port == 0:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
            if port in _HANDED_OUT:
                continue
            try:
                os.mkdir(os.path.join(leases, str(port)))
            except FileExistsError:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    os.rmdir(os.path.join(leases, str(port)))  # held by something else
                    continue
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"free_port: no free port outside the ephemeral range {lo}-{hi} "
                       f"(leases in {leases})")


def listens(pid, port):
    """True when process `pid` holds the socket listening on TCP `port`:
    the server that answers there is that process, not another that took
    the port."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    col = line.split()
                    if col[3] == "0A" and int(col[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{col[9]}]")
        except OSError:
            pass
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except OSError:
            pass
    return False


class StartError(RuntimeError):
    def __init__(self, msg, log_tail):
        super().__init__(msg)
        self.log_tail = log_tail


class ServerProcess:
    """A server the harness starts in its own process group (session), its
    output in log_dir/<name>.log, ready when probe() says so, stopped with
    stop_process_group: what a vLLM Replica, LMCache's server
    (lmcache_tier.Server) and mooncake_master (mooncake_tier.Master) share.
    A subclass sets cmd and env, and answers probe() and root_cause()."""

    POLL_S = 0.5  # seconds between two readiness probes
    STOP_GRACE_S = 30  # stop()'s default: seconds from SIGTERM to SIGKILL
    # Starts made again on another port (new_port()) when the server exits
    # because its port was taken between free_port() and its bind.
    PORT_RETRIES = 0

    def __init__(self, name, label, log_dir, base_url):
        # label: what messages call the server ("T4", "lmcache server");
        # base_url: its HTTP address, "http://127.0.0.1:8000".
        self.name, self.label, self.base_url = name, label, base_url
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.proc = None
        self.started_at = self.ready_s = None
        self._log = None
        self._log_mark = 0  # the log's length when the last start began
        self.port_retries = 0  # starts made again because the port was taken

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self):
        self._log = open(self.log_path, "ab")
        self._log_mark = self._log.tell()
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        with _LIVE_LOCK:
            _LIVE.append(self)

    def _get(self, path, timeout=5):
        """(HTTP status, body) of GET path; raises OSError when unreachable."""
        with urllib.request.urlopen(self.base_url + path, timeout=timeout) as r:
            return r.status, r.read()

    def probe(self):
        """True once the server answers as ready; may raise OSError."""
        raise NotImplementedError

    def root_cause(self):
        """The first error line of the server's log, or None."""
        raise NotImplementedError

    def port_taken(self):
        """True when the log of the last start says an address was already
        in use (EADDRINUSE, as Python's and ZeroMQ's errors word it)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_mark)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return False
        return os.strerror(errno.EADDRINUSE) in text

    def new_port(self):
        """Moves the server to another free port before a start is made
        again (PORT_RETRIES > 0 only)."""
        raise NotImplementedError

    def start_hint(self, tail):
        """What to do about a failed start whose log ends in tail; "" for nothing known."""
        return ""

    def exit_error(self):
        """The StartError of a server that exited before it was ready: its
        first error line (root_cause) or its log's last line, and a hint."""
        tail = self.log_tail()
        lines = tail.strip().splitlines()
        cause = self.root_cause() or (lines[-1][-300:] if lines else "")
        return StartError(f"{self.name} ({self.label}) exited with {self.proc.returncode} "
                          f"before it was ready{self.start_hint(tail)}: {cause}", tail)

    def wait_ready(self, timeout):
        """Blocks until probe() says ready and returns the seconds since
        start(); raises StartError (with the log's tail) if the process exits
        or the timeout passes first. A server that exits because its port was
        taken (port_taken) is started again on another one, up to
        PORT_RETRIES times, each start with the whole timeout."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                if self.port_retries < self.PORT_RETRIES and self.port_taken():
                    self.port_retries += 1
                    self.stop(grace=1)
                    self.new_port()
                    self.start()
                    deadline = time.monotonic() + timeout
                    continue
                raise self.exit_error()
            try:
                if self.probe():
                    self.ready_s = time.monotonic() - self.started_at
                    return self.ready_s
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise StartError(f"{self.name} ({self.label}) not ready after {timeout:.0f} s",
                                 self.log_tail())
            time.sleep(self.POLL_S)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n=6000):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, grace=None):
        """Ends the process group (stop_process_group; grace defaults to
        STOP_GRACE_S) and closes the log."""
        if self.proc is not None:
            stop_process_group(self.proc, self.STOP_GRACE_S if grace is None else grace)
        with _LIVE_LOCK:
            if self in _LIVE:
                _LIVE.remove(self)
        if self._log:
            self._log.close()
            self._log = None


class Replica(ServerProcess):
    """One vLLM server (module docstring), ready when /health answers 200
    from its own socket. vLLM's OpenAI server binds its port before it
    builds the engine (setup_server: "OSError: [Errno 98] Address already
    in use" within seconds when it is taken), the offline server once the
    engine is up; either way a taken port is started again on another."""

    PORT_RETRIES = 3

    def __init__(self, name, tier, tier_flags, *, model_dir, served_name, platform, index,
                 n_replicas, gpus, log_dir, max_model_len, gpu_util=None, load_dummy=False,
                 eager=True, cpu_kv_bytes=256 << 20, gpu_kv_bytes=None, python=sys.executable,
                 extra_env=None,
                 extra_flags=(), api="server"):
        self.tier = tier
        self.port = free_port()
        self.host = "127.0.0.1"
        super().__init__(name, tier, log_dir, f"http://{self.host}:{self.port}")
        self.model = served_name
        env = dict(os.environ)
        env.update({"PYTHONHASHSEED": "0",  # the paper's prerequisite; cxlkv on 0.26 needs it
                    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                    "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
                    "PYTHONUNBUFFERED": "1"})
        here = os.path.dirname(os.path.abspath(__file__))  # poison.py for the oracle
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        self.api = api
        # offline: the same flags to offline_server.py, which builds vllm.LLM
        # from them and answers /generate, /metrics and /health.
        entry = ["-m", "vllm.entrypoints.openai.api_server"] if api == "server" else \
            [os.path.join(here, "offline_server.py")]
        cmd = [python] + entry + ["--model", model_dir,
               "--served-model-name", served_name, "--host", self.host, "--port", str(self.port),
               "--skip-tokenizer-init", "--dtype", "bfloat16", "--max-model-len",
               str(max_model_len), "--generation-config", "vllm", "--enable-prompt-tokens-details"]
        if api == "offline":
            cmd.remove("--enable-prompt-tokens-details")  # an API-server flag
        if eager:
            cmd.append("--enforce-eager")
        if platform == "gpu":
            if gpus >= n_replicas:
                env["CUDA_VISIBLE_DEVICES"] = str(index)
                self.gpu = index
            else:
                env["CUDA_VISIBLE_DEVICES"] = "0"
                self.gpu = 0
            cmd += ["--gpu-memory-utilization", f"{gpu_util:.3f}"]
            if gpu_kv_bytes:
                # Engines sharing one GPU start at once: a fixed KV cache size
                # skips vLLM's memory profiling, which would count the other
                # engine's allocations as its own (v1/worker/gpu_worker.py,
                # determine_available_memory); the start check (free memory >=
                # utilization x total, v1/worker/utils.py request_memory) holds.
                cmd += ["--kv-cache-memory-bytes", str(int(gpu_kv_bytes))]
            if load_dummy:
                cmd += ["--load-format", "dummy"]
        else:
            ncpu = os.cpu_count() or 1
            env["VLLM_CPU_OMP_THREADS_BIND"] = str(index % ncpu)
            self.gpu = None
            cmd += ["--kv-cache-memory-bytes", str(cpu_kv_bytes), "--block-size", "32",
                    "--max-num-seqs", "8"]
        cmd += list(tier_flags) + list(extra_flags)
        env.update(extra_env or {})
        self.cmd, self.env = cmd, env

    def describe(self):
        return {"name": self.name, "tier": self.tier, "port": self.port,
                "port_retries": self.port_retries, "gpu": self.gpu,
                "api": self.api,
                "cuda_visible_devices": self.env.get("CUDA_VISIBLE_DEVICES"),
                "cpu_bind": self.env.get("VLLM_CPU_OMP_THREADS_BIND"),
                "argv": repo_relative(self.cmd[1:]), "log": os.path.basename(self.log_path)}

    def probe(self):
        status, _ = self._get("/health", timeout=2)
        return status == 200 and listens(self.proc.pid, self.port)

    def new_port(self):
        self.port = free_port()
        self.cmd[self.cmd.index("--port") + 1] = str(self.port)
        self.base_url = f"http://{self.host}:{self.port}"

    def exit_error(self):
        # No cause in the message: ttft.py records every replica's root_cause() beside it.
        return StartError(f"{self.name} ({self.tier}) exited with {self.proc.returncode} "
                          "before it was ready", self.log_tail())

    def root_cause(self):
        """The first exception message in the engine log since the last
        start (the worker's or EngineCore's own, above the API server's
        generic 'Engine core initialization failed'), or None."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_mark)
                for line in f.read().decode("utf-8", "replace").splitlines():
                    if _EXC.search(line) and "initialization failed" not in line:
                        return line.strip()[-400:]
        except OSError:
            pass
        return None

    def setup_lines(self):
        """cxlkv setup lines of the engine log, each with the first duration in it (ms)."""
        out = []
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if not _SETUP.search(line):
                        continue
                    m = _DURATION.search(line.split("cxlkv", 1)[1])
                    ms = None
                    if m:
                        ms = float(m.group(1)) * (1 if m.group(2) == "ms" else 1000)
                    out.append({"line": line.strip()[-300:], "ms": ms})
        except OSError:
            pass
        return out[:50]

    def terminate(self):
        """Sends SIGTERM to the server's process group (stop() then waits)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
