#!/usr/bin/python3
"""Plots what bench/dra/dra-tenants-bench.sh --json wrote.

    bench/dra/dra-tenants-plot.py RESULT.json OUT.png

Three panels, one group per mode: time to ready p50 and p99 (s), capacity
utilisation (mean composed bytes / blade bytes) and failed composes per
admitted claim, so modes of one run compare side by side.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: dra-tenants-plot.py RESULT.json OUT.png")
    res = json.load(open(sys.argv[1]))
    modes = list(res["modes"])
    if not modes:
        sys.exit("dra-tenants-plot: no modes in " + sys.argv[1])
    r = [res["modes"][m] for m in modes]
    x = range(len(modes))
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.6))
    w = 0.38
    ax[0].bar([i - w / 2 for i in x], [v["ready_p50_s"] or 0 for v in r], w, label="p50")
    ax[0].bar([i + w / 2 for i in x], [v["ready_p99_s"] or 0 for v in r], w, label="p99")
    ax[0].set_title("claim created -> container started (s)")
    ax[0].legend()
    ax[1].bar(x, [v["utilisation_mean"] or 0 for v in r], 0.6, color="tab:green")
    ax[1].set_ylim(0, 1)
    ax[1].set_title("blade utilisation (mean composed / 8 GiB)")
    ax[2].bar(x, [v["failed_composes"] / max(1, v["admitted"]) for v in r], 0.6, color="tab:red")
    ax[2].set_title("failed composes per admitted claim")
    for a in ax:
        a.set_xticks(list(x))
        a.set_xticklabels(modes, rotation=12)
    fig.suptitle(f"3 tenants x {res['claims_per_tenant']} claims, budget "
                 f"{res['budget_per_tenant']} each, one 8 GiB blade")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
