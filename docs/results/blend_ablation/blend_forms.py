"""Blend forms on the saved per-row scores (network part, isolation forest), seed 0, all 26 datasets.

    python3 docs/results/blend_ablation/blend_forms.py runs/blend unsup_paper unsup_clean

runs/blend holds what blenddiag_run.py saved (the network part alone: KDSM_SCORE__ISOLATION_FOREST=false).
lse = log(exp(z_network) + exp(z_forest)), the smooth maximum; lse2 the same at temperature 1/2.
Output: blend_forms.txt.
"""
import glob
import sys

import numpy as np
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc


def z(tr, te, log=False):
    if log:
        tr, te = np.log(tr + 1e-12), np.log(te + 1e-12)
    return (te - tr.mean()) / (tr.std() + 1e-12)


if len(sys.argv) < 3:
    raise SystemExit(f"usage: {sys.argv[0]} RUNS_DIR SETTING_SPLIT [SETTING_SPLIT ...]")
runs = sys.argv[1]
for cfg in sys.argv[2:]:
    res = {}
    for f in sorted(glob.glob(f"{runs}/*_{cfg}_0.npz")):
        d = np.load(f); y = d["y_test"]
        zn, zf = z(d["k_train"], d["k_test"], True), z(d["if_train"], d["if_test"])
        forms = {"iforest": d["if_test"], "avg": (zn + zf) / 2, "max": np.maximum(zn, zf),
                 "max(avg,zn)": np.maximum((zn + zf) / 2, zn), "max(avg,zf)": np.maximum((zn + zf) / 2, zf),
                 "lse": np.logaddexp(zn, zf), "lse2": np.logaddexp(2 * zn, 2 * zf)}
        for k, s in forms.items(): res.setdefault(k, []).append((ap(y, s), roc(y, s)))
    I = np.array(res["iforest"])
    print(f"== {cfg}")
    for k, v in res.items():
        v = np.array(v); print(f"{k:12s} {v[:,0].mean():.3f} {v[:,1].mean():.3f} ahead IF {int((v[:,0]>I[:,0]).sum())}/{int((v[:,1]>I[:,1]).sum())}")
