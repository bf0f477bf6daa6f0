"""Diagnosis (reads labels, for this report only): does the size of the smallest k-means cluster of a training set
(paper split, seed 0, standardised) estimate its contamination, or hold the anomalies?
    python3 docs/results/cluster_estimate/clusterdiag.py"""
import json
import os
import sys
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans

from offline_train.data import DataError, load_npz
from offline_train.evaluation.protocol import make_split
from offline_train.evaluation.runner import dataset_paths
from offline_train.scaler import Scaler

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[2].parent / "shared" / "data" / "adbench"  # ../shared/data/adbench from the repository root
try:
    FILES = sorted(dataset_paths(DATA))  # by name, the order the committed JSON was written in
except (FileNotFoundError, DataError) as e:
    raise SystemExit(f"{sys.argv[0]}: {e}") from None
OUT = HERE
KS = (2, 3, 4)

rows = []
for path in FILES:
    ds = os.path.basename(path)[:-4]
    X, y = load_npz(path)
    for setting in ("semi", "unsup"):
        split = make_split(y, setting, "paper", 0)
        Z = Scaler.fit(X[split.scaler_idx]).transform(X[split.train_idx])
        Z = Z[:, Z.std(0) > 1e-9]  # constant columns carry no cluster structure
        y_train = y[split.train_idx]
        row = dict(ds=ds, setting=setting, true=float(y_train.mean()))
        for k in KS:
            labels = KMeans(k, n_init=4, random_state=0).fit_predict(Z)
            sizes = np.bincount(labels, minlength=k) / len(Z)
            smallest = int(np.argmin(sizes))
            row[f"min{k}"] = float(sizes[smallest])  # the label-free estimate
            row[f"pur{k}"] = float(y_train[labels == smallest].mean())  # its anomaly share (diagnosis)
        rows.append(row)
json.dump(rows, open(f"{OUT}/clusterdiag.json", "w"))

unsup = [r for r in rows if r["setting"] == "unsup"]
semi = {r["ds"]: r for r in rows if r["setting"] == "semi"}
true = np.array([r["true"] for r in unsup])
for k in KS:
    est = [r[f"min{k}"] for r in unsup]
    print(f"k={k}: mean min-cluster share semi {np.mean([semi[r['ds']][f'min{k}'] for r in unsup]):.3f} "
          f"unsup {np.mean(est):.3f}; corr with true {np.corrcoef(true, est)[0, 1]:.2f}; "
          f"unsup>semi on {sum(r[f'min{k}'] > semi[r['ds']][f'min{k}'] for r in unsup)}/26; "
          f"anomaly share in the minority cluster {np.mean([r[f'pur{k}'] for r in unsup]):.3f} vs base {true.mean():.3f}; "
          f"purer than base on {sum(r[f'pur{k}'] > r['true'] for r in unsup)}/26")
