"""The issue's protocol for the default and the quarter-core network (snap0), from variants.py's files.

Seed 0 on every dataset plus seeds 1-2 on the 11 under 1000 rows: mean over datasets of each dataset's
mean over its seeds; IForest from committed bench rows of the same splits (reads labels: report only).
    python3 docs/results/ablation_snapshots/protocol.py runs/snap runs/snap_small IFOREST_CSV [IFOREST_CSV ...]
"""
import csv, glob, sys
from collections import defaultdict
import numpy as np
from sklearn.metrics import average_precision_score as ap, roc_auc_score as roc
from offline_train.blend import Blend

dirs, csvs = sys.argv[1:3], sys.argv[3:]
ifo = {}
for c in csvs:
    for r in csv.DictReader(open(c)):
        if r["method"] == "iforest" and r["status"] == "ok":
            ifo[(r["dataset"], int(r["seed"]))] = (float(r["aucpr"]), float(r["aucroc"]))
per = defaultdict(lambda: defaultdict(list))
for f in sum((glob.glob(f"{d}/*.npz") for d in dirs), []):
    stem = f.rsplit("/", 1)[1][:-4]
    ds, seed = stem.rsplit("_", 3)[0], int(stem.rsplit("_", 1)[1])
    d = np.load(f)
    y = d["y_test"]
    s0 = Blend.fit(d["snap0_train"], d["forest_train"])(d["snap0_test"], d["forest_test"])
    per["default"][ds].append((ap(y, d["blend_test"]), roc(y, d["blend_test"])))
    per["quarter core (snap0)"][ds].append((ap(y, s0), roc(y, s0)))
    per["iforest"][ds].append(ifo[(ds, seed)])
m = {k: {ds: np.mean(v, 0) for ds, v in per[k].items()} for k in per}
for k in m:
    mean = np.mean(list(m[k].values()), 0)
    ahead = [sum(round(m[k][ds][i], 3) > round(m["iforest"][ds][i], 3) for ds in m[k]) for i in (0, 1)]
    print(f"{k:22s} {len(m[k])} datasets  {mean[0]:.3f} / {mean[1]:.3f}  ahead of IForest {ahead[0]} / {ahead[1]}")
