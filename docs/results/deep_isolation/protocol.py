"""Issue 11's protocol over bench CSVs: per dataset the mean over its seeds (0 everywhere, 1-2 on the 11 small ones),
then the mean over the 26 datasets, for DIF and every baseline, and on how many datasets DIF is ahead of each.

    python3 protocol.py SPLIT RESULTS.csv ...    # later files override earlier rows of the same (method, dataset, seed)
"""
from __future__ import annotations

import collections
import csv
import sys

import numpy as np

SMALL = {"14_glass", "15_Hepatitis", "18_Ionosphere", "21_Lymphography", "29_Pima", "37_Stamps", "39_vertebral",
         "42_WBC", "43_WDBC", "45_wine", "4_breastw"}
METHODS = ("dif", "iforest", "ecod", "knn", "lof", "hbos", "pca", "mcd", "inne", "ocsvm", "copod", "cblof", "loda", "gmm")


def main(split: str, files: list[str]) -> None:
    rows = {}
    for f in files:
        for r in csv.DictReader(open(f)):
            if r["status"] != "ok" or r["split"] != split or r["setting"] != "unsup":
                continue
            dataset, seed = r["dataset"], int(r["seed"])
            if seed == 0 or dataset in SMALL:
                rows[(r["method"], dataset, seed)] = (float(r["aucpr"]), float(r["aucroc"]))
    per_seed = collections.defaultdict(lambda: collections.defaultdict(list))
    for (method, dataset, _), v in rows.items():
        per_seed[method][dataset].append(v)
    means = {m: {ds: np.mean(v, axis=0) for ds, v in per_seed[m].items()} for m in METHODS}
    for m in METHODS:
        if len(means[m]) != 26:
            print(f"{m:8s} only {len(means[m])} datasets")
            continue
        mean = np.mean(list(means[m].values()), axis=0)
        ahead = [sum(means["dif"][ds][i] > v[i] for ds, v in means[m].items()) for i in (0, 1)]
        print(f"{m:8s} {mean[0]:.3f} / {mean[1]:.3f}   dif ahead on {ahead[0]} / {ahead[1]} of 26")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("paper", "clean"):
        raise SystemExit("usage: python3 protocol.py paper|clean RESULTS.csv ...")
    try:
        main(sys.argv[1], sys.argv[2:])
    except (OSError, ValueError, KeyError) as e:  # a missing or unreadable CSV: one line, no traceback
        raise SystemExit(f"protocol.py: {e}") from None
