"""Does refitting the isolation forest on the rows the blend ranks least anomalous help? (issue 11, no)

    python3 docs/results/blend_ablation/forest_refit.py runs/blend unsup_paper ../shared/data/adbench

Reads the per-row scores `blenddiag_run.py` saved (seed 0; k_* must be the network part alone: run it with
KDSM_SCORE__ISOLATION_FOREST=false now that the default blends, as the saved runs predate the blend), drops the top q of the training rows by the shipped
blend (the larger z-score), refits IsolationForest(random_state=0) on the rest, and scores the blend again.
Labels feed only the report. Output: forest_refit_unsup_paper.txt, forest_refit_unsup_clean.txt.
"""
import glob
import sys

import numpy as np

sys.path.insert(0, ".")
from sklearn.ensemble import IsolationForest
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

from offline_train.evaluation.protocol import make_split


def zs(tr, te, log=False):
    if log: tr, te = np.log(tr + 1e-12), np.log(te + 1e-12)
    return (te - tr.mean()) / (tr.std() + 1e-12)
if len(sys.argv) < 4:
    raise SystemExit(f"usage: {sys.argv[0]} RUNS_DIR SETTING_SPLIT DATA_DIR")
runs, cfg, data = sys.argv[1], sys.argv[2], sys.argv[3]  # e.g. runs/blend unsup_paper ../shared/data/adbench
mode = cfg.split("_")[1]
qs = [0.0, 0.05, 0.1, 0.2]
res = {}
for f in sorted(glob.glob(f"{runs}/*_{cfg}_0.npz")):
    name = f.split("/")[-1].rsplit(f"_{cfg}", 1)[0]
    raw = np.load(f"{data}/{name}.npz")
    X, y = raw["X"].astype(np.float64), raw["y"].astype(int)
    s = make_split(y, "unsup", mode, 0)
    d = np.load(f)
    assert np.array_equal(y[s.train_idx], d["y_train"]), name
    assert np.array_equal(s.y_test, d["y_test"]), name
    Xtr, Xte = X[s.train_idx], X[s.test_idx]
    ktr, kte = d["k_train"], d["k_test"]
    blend_tr = np.maximum(zs(ktr, ktr, True), zs(d["if_train"], d["if_train"]))
    for q in qs:
        keep = np.argsort(blend_tr)[: int(round((1 - q) * len(blend_tr)))]
        iso = IsolationForest(random_state=0).fit(Xtr[keep])
        itr, ite = -iso.score_samples(Xtr), -iso.score_samples(Xte)
        for lab, sc in ((f"if q{q}", ite), (f"max q{q}", np.maximum(zs(ktr, kte, True), zs(itr, ite))),
                        (f"avg q{q}", zs(ktr, kte, True) + zs(itr, ite))):
            res.setdefault(lab, []).append((ap(s.y_test, sc), roc(s.y_test, sc)))
    print(name, flush=True, file=sys.stderr)
base = np.array(res["if q0.0"])
for lab, v in res.items():
    v = np.array(v)
    print(f"{lab:12s} {v[:,0].mean():.3f} {v[:,1].mean():.3f} aheadIF PR {int((v[:,0]>base[:,0]).sum())} ROC {int((v[:,1]>base[:,1]).sum())}")
