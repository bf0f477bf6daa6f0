"""Save per-row scores of the (pre-blend) default K-DSM, IForest and ECOD on one ADBench setting/split/seed.

Diagnosis only: it saves the labels with the scores, for blenddiag_report.py. Run from the repository root
at commit dada115 (the default before the blend), e.g. two workers:
    python3 docs/results/blend_ablation/blenddiag_run.py unsup paper 0 0 2 runs/blend ../shared/data/adbench &
    python3 docs/results/blend_ablation/blenddiag_run.py unsup paper 0 1 2 runs/blend ../shared/data/adbench
At a later commit, where the default blends, it needs KDSM_SCORE__ISOLATION_FOREST=false to save the network's part.
"""
import sys
import time
from pathlib import Path

import numpy as np
import torch

torch.set_num_threads(1)
from offline_train.config import TrainSettings
from offline_train.data import load_npz
from offline_train.evaluation.methods import _baseline, make_kdsm
from offline_train.evaluation.protocol import make_split
from offline_train.evaluation.runner import dataset_paths
from offline_train.scaler import Scaler

if len(sys.argv) < 7:
    raise SystemExit(f"usage: {sys.argv[0]} semi|unsup paper|clean SEED WORKER WORKERS OUT_DIR [DATA_DIR]")
setting, split_mode, seed, wi, wn = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
out = Path(sys.argv[6]); out.mkdir(parents=True, exist_ok=True)
paths = dataset_paths(Path(sys.argv[7] if len(sys.argv) > 7 else "../shared/data/adbench"))
sizes = sorted(paths, key=lambda p: -np.load(p)["X"].size)
mine = [p for i, p in enumerate(sizes) if i % wn == wi]
settings = TrainSettings()
for p in mine:
    f = out / f"{p.stem}_{setting}_{split_mode}_{seed}.npz"
    if f.exists():
        continue
    X, y = load_npz(p)
    sp = make_split(y, setting, split_mode, seed)
    sc = Scaler.fit(X[sp.scaler_idx], settings.data.scale_discrete)
    Xtr, Xte = X[sp.train_idx], X[sp.test_idx]
    t0 = time.time()
    det = make_kdsm("default", settings, seed).fit(Xtr, scaler=sc)
    kt = det.decision_function(Xte); ktr = det.decision_function(Xtr)
    t1 = time.time()
    res = {"y_test": sp.y_test, "y_train": y[sp.train_idx], "k_test": kt, "k_train": ktr}
    for name in ("iforest", "ecod"):
        m = _baseline(name, seed).fit(sc.transform(Xtr))
        res[name[:2] + "_test"] = m.decision_function(sc.transform(Xte))
        res[name[:2] + "_train"] = m.decision_function(sc.transform(Xtr))
    np.savez(f, **res)
    print(p.stem, setting, split_mode, seed, f"kdsm {t1-t0:.0f}s", flush=True)
