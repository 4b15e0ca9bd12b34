"""The paper's numbers ([Fan26] section 4, Tables 3-7), to print beside ours.
Transcribed from the paper's tables; keyed by the bucket medians
(2,054 / 8,173 / 16,282 / 32,694 tokens). Testbed: one NVIDIA L4 per node,
vLLM 0.23.0, a 27.1 GB/s CXL fabric (its Table 1), n = 60 per cell.
"""

PREFIXES = (2054, 8173, 16282, 32694)
LABEL = {2054: "2K", 8173: "8K", 16282: "16K", 32694: "32K"}
FABRIC_GBPS = 27.1

# Table 6: (tier, arm) -> per prefix (p50, p90, p99, hit %)
TABLE6 = {
    ("T0", "same"): [(568.6, 576.2, 580.2, 0.0), (2306.3, 2386.1, 2391.6, 0.0),
                     (5127.6, 5191.8, 5205.8, 0.0), (12388.8, 12504.8, 12585.7, 0.0)],
    ("T0", "cross"): [(560.7, 568.7, 949.7, 0.0), (2223.6, 2279.6, 2284.8, 0.0),
                      (4895.0, 4950.5, 4966.3, 0.0), (11816.9, 11924.7, 11979.6, 0.0)],
    ("T1", "same"): [(86.6, 87.3, 88.0, 98.8), (117.0, 120.8, 122.1, 99.7),
                     (131.8, 148.6, 149.8, 99.9), (189.1, 191.0, 192.0, 99.9)],
    ("T1", "cross"): [(563.3, 570.7, 958.6, 0.7), (2218.6, 2287.1, 2296.7, 0.3),
                      (4898.4, 4937.4, 4959.4, 0.1), (11845.0, 11921.1, 12015.7, 0.0)],
    ("T2", "same"): [(93.9, 94.9, 95.5, 98.8), (138.4, 142.5, 143.4, 99.7),
                     (170.3, 187.1, 189.4, 99.9), (259.9, 265.0, 267.7, 99.9)],
    ("T2", "cross"): [(566.8, 575.7, 954.8, 0.7), (2224.6, 2280.9, 2298.9, 0.4),
                      (4901.9, 4944.4, 4962.8, 0.2), (11822.3, 11926.3, 12023.7, 0.1)],
    ("T4", "same"): [(99.5, 130.1, 131.8, 94.6), (168.4, 178.8, 195.9, 97.9),
                     (216.3, 234.6, 239.7, 98.9), (320.6, 347.7, 366.9, 99.5)],
    ("T4", "cross"): [(101.6, 134.7, 521.2, 95.4), (175.0, 196.2, 199.0, 98.0),
                      (224.6, 240.6, 249.3, 99.0), (322.6, 357.4, 381.4, 99.5)],
}
# Table 3 (cross arm): T4 vs T0 speedup; Table 4: cross/same per tier.
SPEEDUP_T4_T0 = [5.5, 12.7, 21.8, 36.6]
CROSS_SAME = {"T0": [0.99, 0.96, 0.95, 0.95], "T1": [6.5, 19.0, 37.2, 62.6],
              "T2": [6.0, 16.1, 28.8, 45.5], "T4": [1.02, 1.04, 1.04, 1.01]}
# Table 5: KV volume (MiB), T4 cross p50 (ms), effective read (GB/s), % of 27.1 GB/s.
TABLE5 = [(112, 101.6, 1.16, 4), (447, 175.0, 2.68, 10), (891, 224.6, 4.16, 15),
          (1788, 322.6, 5.81, 21)]
# Table 7 (same arm): T1 p50, T4 p50, T4/T1.
TABLE7 = [(86.6, 99.5, 1.15), (117.0, 168.4, 1.44), (131.8, 216.3, 1.64), (189.1, 320.6, 1.70)]
# Section 4.9: identical greedy continuations T0 vs T4 across two GPUs.
ORACLE_IDENTICAL = (6, 10)
FIRST_TOUCH_MS = (521.2, 101.6)  # section 4.7: the reader's first read vs steady state


def at(prefix):
    """Index into the per-prefix lists, or None for a prefix the paper did not run."""
    try:
        return PREFIXES.index(prefix)
    except ValueError:
        return None
