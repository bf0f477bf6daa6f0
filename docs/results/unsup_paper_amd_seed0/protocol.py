"""The bench's default and IForest under issue 11's protocol, from bench results files alone.

    python3 protocol.py RESULTS.csv [RESULTS.csv ...]

Issue 11's protocol is seed 0 on every dataset plus seeds 1-2 on the datasets under 1,000 rows: give the files that
hold those runs (here ``results.csv``, seed 0 on the 26, and ``small_seeds12/results.csv``). Averages each dataset
over its seeds, then the datasets; prints mean AUC-PR / AUC-ROC per method and on how many datasets the default is
above IForest (3 decimals, as the committed protocol tables count). Labels were read by the bench for the metrics only.
"""
from __future__ import annotations

import csv
import sys
from collections import defaultdict
from statistics import mean


def main(paths: list[str]) -> None:
    runs = defaultdict(list)  # (dataset, method) -> [(seed, aucpr, aucroc)]
    for path in paths:
        for r in csv.DictReader(open(path, newline="")):
            if r["status"] == "ok":
                runs[r["dataset"], r["method"]].append((int(r["seed"]), float(r["aucpr"]), float(r["aucroc"])))
    datasets = sorted({d for d, _ in runs})
    methods = sorted({m for _, m in runs})
    per = {k: (mean(x[1] for x in v), mean(x[2] for x in v), sorted(x[0] for x in v)) for k, v in runs.items()}
    seeds = defaultdict(int)
    for d in datasets:
        seeds[tuple(per[d, methods[0]][2])] += 1
    print("seeds per dataset:", ", ".join(f"{list(s)} on {n}" for s, n in seeds.items()))
    for m in methods:
        print(f"{m:10s} {mean(per[d, m][0] for d in datasets):.3f} / {mean(per[d, m][1] for d in datasets):.3f}"
              f"  ({len(datasets)} datasets)")
    if {"default", "iforest"} <= set(methods):
        pr = sum(round(per[d, "default"][0], 3) > round(per[d, "iforest"][0], 3) for d in datasets)
        roc = sum(round(per[d, "default"][1], 3) > round(per[d, "iforest"][1], 3) for d in datasets)
        print(f"default above IForest on {pr} / {roc} of {len(datasets)} datasets (AUC-PR / AUC-ROC)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
