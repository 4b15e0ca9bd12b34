"""What the DRA benches' summaries share: dra-bench.sh's and
dra-tenants-bench.sh's python imports it (it runs with bench/dra on
PYTHONPATH)."""

import json


def pct(xs, p):
    """The p-th percentile (0-100) of xs, linear between the two nearest
    ranks; None when xs is empty."""
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def emit(res, out):
    """Prints the result as one JSON object (after the table), and writes it
    to the file out as well unless out is empty."""
    text = json.dumps(res)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    print(text)
