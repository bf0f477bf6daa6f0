"""Seed-averaged means of the default and the quarter-core network (snap0), from variants.py's files.

Mean over datasets of each dataset's mean over the seeds it has files for (the issue's protocol: seed 0
everywhere, seeds 1-2 on the 11 datasets under 1000 rows). IForest from committed bench rows of the same
splits where there are some, else the blend's own forest part, which is PyOD's IForest with the same seed
(equal to the third decimal on all 26 datasets at seed 0: "forest alone" in unsup_paper_seed0.txt).
ECOD, KNN and LOF are reported too where the CSVs have their rows for every dataset and seed of the files.
Reads labels: report only.
    python3 docs/results/ablation_snapshots/protocol.py DIR [DIR ...] BASELINE_CSV [BASELINE_CSV ...]
"""
import glob
import sys
from collections import defaultdict

import numpy as np
from report import ahead, baseline_rows, blended, dataset_seed
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

if not any(a.endswith(".csv") for a in sys.argv[1:]) or all(a.endswith(".csv") for a in sys.argv[1:]):
    raise SystemExit(f"usage: {sys.argv[0]} DIR [DIR ...] BASELINE_CSV [BASELINE_CSV ...]")
dirs = [a for a in sys.argv[1:] if not a.endswith(".csv")]
csvs = [a for a in sys.argv[1:] if a.endswith(".csv")]
ifo = baseline_rows(csvs)
others = {m: baseline_rows(csvs, m) for m in ("ecod", "knn", "lof")}
per = defaultdict(lambda: defaultdict(list))
seeds_of = defaultdict(list)  # the seed of each entry of per[k][ds], in order
for f in sum((glob.glob(f"{d}/*.npz") for d in dirs), []):
    ds, seed = dataset_seed(f)
    d = np.load(f)
    y = d["y_test"]
    s0 = blended(d, d["snap0_train"], d["snap0_test"])
    per["default"][ds].append((ap(y, d["blend_test"]), roc(y, d["blend_test"])))
    per["quarter core (snap0)"][ds].append((ap(y, s0), roc(y, s0)))
    seeds_of[ds].append(seed)
    per["iforest"][ds].append(ifo.get((ds, seed)) or (ap(y, d["forest_test"]), roc(y, d["forest_test"])))
    for m, rows in others.items():
        if (ds, seed) in rows:
            per[m][ds].append(rows[(ds, seed)])
n_runs = sum(map(len, per["default"].values()))
for m in others:  # a baseline missing some dataset-seed would be averaged over other runs: leave it out
    if sum(map(len, per[m].values())) != n_runs:
        per.pop(m, None)
m = {k: {ds: np.mean(v, 0) for ds, v in per[k].items()} for k in per}
for k in m:
    mean = np.mean(list(m[k].values()), 0)
    pr, rc = ahead(m[k], m["iforest"])
    print(f"{k:22s} {len(m[k])} datasets, {sum(map(len, per[k].values()))} runs  {mean[0]:.3f} / {mean[1]:.3f}  "
          f"ahead of IForest {pr} / {rc}")
# Per seed, where a seed has every dataset: the means of that seed alone.
for seed in sorted({x for v in seeds_of.values() for x in v}):
    if all(seed in v for v in seeds_of.values()):
        at = {ds: v.index(seed) for ds, v in seeds_of.items()}
        line = "  ".join(f"{k} {np.mean([per[k][ds][j][0] for ds, j in at.items()]):.3f} / "
                         f"{np.mean([per[k][ds][j][1] for ds, j in at.items()]):.3f}" for k in per)
        print(f"seed {seed}, {len(at)} datasets: {line}")
