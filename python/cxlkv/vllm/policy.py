"""Load or recompute: whether loading a request's hit from the region pays,
from what this engine measured (the manager's LoadPolicy).

Two costs, each a line fitted to this engine's own recent observations:

- a load of n chunks: from its prepare_load (vLLM found the request's GPU
  blocks and hands the job to the workers) to its complete_load, in seconds:
  the transfer, the worker's checks, the steps vLLM polls until it learns
  the job finished. What a load adds to the request's time to first token.
  The wait for GPU blocks before prepare_load is left out: a recompute
  waits for the same blocks.
  A process's first load is left out (it also pays one-time costs).
- a step of t scheduled tokens: from the step's build_connector_meta to its
  update_connector_output (the model's forward pass and the bookkeeping
  around it). The slope is what one more prompt token costs to compute.

A hit of h tokens in n chunks is loaded when load(n) <= min_gain x slope x h,
and recomputed otherwise: the request is then scheduled as if the region
held nothing, and its lookups' pins are let go. Until both lines have an
observation it loads (nothing else can teach it the load's cost); likewise
while the kept steps span fewer than `min_step_span` scheduled tokens (only
decode steps of a few tokens each: their slope, extrapolated to a long
prefix, is noise, and a slope of 0 would price any recompute at nothing). Old
observations age out (the last `keep` of each), so a cost that changes is
followed; and since a hit that is recomputed teaches nothing about loads,
after `explore_every` recomputes in a row the next hit is loaded anyway
("explore"), so one slow early load cannot keep short hits recomputed for
good (at most one request in explore_every pays the difference). With mode
"always" every hit is loaded (the paper's behaviour).

Nothing here touches the region or vLLM: the manager feeds it and asks it.
"""

import collections
from typing import Deque, Optional, Tuple

MODES = ("measured", "always")


class LinearCost:
    """t = a + b x over the last `keep` (x, t) observations, a >= 0, b >= 0.

    With a single distinct x the line is unknown; predictions are then upper
    bounds: t(x0) for x <= x0 (as if it were all fixed cost), t(x0) x / x0
    above (as if all of it grew with x)."""

    def __init__(self, keep: int = 32) -> None:
        self.obs: Deque[Tuple[float, float]] = collections.deque(maxlen=keep)

    def add(self, x: float, t: float) -> None:
        if x > 0 and t >= 0:
            self.obs.append((float(x), float(t)))

    def __len__(self) -> int:
        return len(self.obs)

    def fit(self) -> Optional[Tuple[float, Optional[float]]]:
        """(a, b), or None without observations."""
        if not self.obs:
            return None
        n = len(self.obs)
        mx = sum(x for x, _ in self.obs) / n
        mt = sum(t for _, t in self.obs) / n
        sxx = sum((x - mx) ** 2 for x, _ in self.obs)
        if sxx <= 1e-9 * max(1.0, mx * mx):
            return mt, None  # one distinct x: see predict
        b = sum((x - mx) * (t - mt) for x, t in self.obs) / sxx
        a = mt - b * mx
        if b < 0:
            return max(0.0, mt), 0.0
        if a < 0:
            return 0.0, sum(x * t for x, t in self.obs) / sum(x * x for x, _ in self.obs)
        return a, b

    def predict(self, x: float) -> Optional[float]:
        f = self.fit()
        if f is None:
            return None
        a, b = f
        if b is None:
            x0 = self.obs[-1][0]
            return a if x <= x0 else a * x / x0
        return a + b * x

    def span(self) -> float:
        """Largest x minus smallest x of the kept observations (0 without any)."""
        if not self.obs:
            return 0.0
        xs = [x for x, _ in self.obs]
        return max(xs) - min(xs)

    def describe(self) -> str:
        """The kept observations in a few words, for logs."""
        if not self.obs:
            return "none"
        xs = [x for x, _ in self.obs]
        f = self.fit()
        line = "" if f is None else (f", {f[0] * 1e3:.1f} ms" if f[1] is None else
                                     f", {f[0] * 1e3:.1f} ms + {f[1] * 1e6:.2f} us/unit")
        return f"{len(self.obs)} at {min(xs):g}-{max(xs):g}{line}"

    def slope(self) -> Optional[float]:
        """b, or None while it is unknown (fewer than two distinct x)."""
        f = self.fit()
        return None if f is None or f[1] is None else f[1]


class LoadPolicy:
    def __init__(self, mode: str = "measured", min_gain: float = 0.9, keep: int = 32,
                 explore_every: int = 16, min_step_span: int = 256) -> None:
        if mode not in MODES:
            raise ValueError(f"cxlkv: load_policy={mode!r}: one of {', '.join(MODES)}")
        if not 0 < min_gain <= 1:
            raise ValueError(f"cxlkv: load_min_gain={min_gain!r}: above 0, at most 1")
        self.mode = mode
        self.min_gain = float(min_gain)
        self.loads = LinearCost(keep)   # chunks -> seconds
        self.steps = LinearCost(2 * keep)  # scheduled tokens -> seconds (decodes come often)
        self.explore_every = explore_every
        self.min_step_span = min_step_span
        self._recomputed_in_a_row = 0

    def observe_load(self, chunks: int, seconds: float) -> None:
        self.loads.add(chunks, seconds)

    def observe_step(self, tokens: int, seconds: float) -> None:
        self.steps.add(tokens, seconds)

    def decide(self, hit_tokens: int,
               chunks: int) -> Tuple[bool, str, Optional[float], Optional[float]]:
        """(load?, why, predicted load s, predicted recompute s)."""
        if self.mode == "always":
            return True, "always", None, None
        load_s = self.loads.predict(chunks)
        per_token = self.steps.slope() if self.steps.span() >= self.min_step_span else None
        if load_s is None or per_token is None:
            return True, "unmeasured", load_s, None
        recompute_s = per_token * hit_tokens
        if load_s <= self.min_gain * recompute_s:
            self._recomputed_in_a_row = 0
            return True, "cheaper", load_s, recompute_s
        self._recomputed_in_a_row += 1
        if self.explore_every and self._recomputed_in_a_row > self.explore_every:
            self._recomputed_in_a_row = 0
            return True, "explore", load_s, recompute_s
        return False, "dearer", load_s, recompute_s

    def describe(self) -> str:
        """What the decisions rest on, for logs: the kept loads (chunks) and
        steps (scheduled tokens)."""
        return f"loads: {self.loads.describe()}; steps: {self.steps.describe()}"
