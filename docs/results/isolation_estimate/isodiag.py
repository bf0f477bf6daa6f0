"""Diagnosis (reads labels, for this report only): the isolation forest's contamination estimate on clean (semi) and
contaminated (unsup) training sets of the paper split, seed 0:
    python3 docs/results/isolation_estimate/isodiag.py"""
import json
import os
import sys
from pathlib import Path

import numpy as np
from sklearn.ensemble import IsolationForest

from offline_train.data import DataError, load_npz
from offline_train.evaluation.protocol import make_split
from offline_train.evaluation.runner import dataset_paths
from offline_train.scaler import Scaler

ts=[0.5,0.55,0.6,0.65,0.7]
rows=[]

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[2].parent / "shared" / "data" / "adbench"  # ../shared/data/adbench from the repository root
try:
    FILES = sorted(dataset_paths(DATA))  # by name, the order the committed JSON was written in
except (FileNotFoundError, DataError) as e:
    raise SystemExit(f"{sys.argv[0]}: {e}") from None
for p in FILES:
    ds=os.path.basename(p)[:-4]; X,y=load_npz(p)
    for setting in ('semi','unsup'):
        s=make_split(y,setting,'paper',0); sc=Scaler.fit(X[s.scaler_idx]); Z=sc.transform(X[s.train_idx])
        ytr=y[s.train_idx]
        r=-IsolationForest(random_state=0).fit(Z).score_samples(Z)
        rows.append(dict(ds=ds,setting=setting,d=X.shape[1],n=len(Z),true=float(ytr.mean()),**{f"s{t}":float((r>t).mean()) for t in ts},
          q50=float(np.median(r)),q90=float(np.quantile(r,.9)),q99=float(np.quantile(r,.99)),mx=float(r.max())))
json.dump(rows, open(HERE / 'isodiag.json', 'w'))
for r in rows: print(f"{r['ds'][:14]:14s} {r['setting']:5s} d={r['d']:3d} n={r['n']:5d} true={r['true']:.3f} "+" ".join(f"{r[f's{t}']:.3f}" for t in ts)+f" q50={r['q50']:.3f} q90={r['q90']:.3f} q99={r['q99']:.3f}")
