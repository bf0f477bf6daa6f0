"""Do the refinement rounds leave out whole modes of clean history? (issue 11, fortieth pass; diagnosis only.)

Trains the default (``make_kdsm("default")``, the library's code path) with the bench's split and scaler, records the
warm start's core and the last round's kept rows (by wrapping ``offline_train.refine.Refinement``), clusters the
standardised training rows with k-means (k = 5, 10, 20) and prints, per cluster, the share of its rows the core and
the last round keep, sorted; then the test AUC-PR / AUC-ROC and the training rows' anomaly share (labels: report only).
From the repository root (arguments of ``../ablation_snapshots/perrow.py``):
    python3 docs/results/strata/modediag.py semi paper 0 0 1 runs/modediag 28_pendigits
"""
import sys
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.metrics import average_precision_score, roc_auc_score

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from perrow import trainings

import offline_train.refine as refine
from offline_train.config import TrainSettings
from offline_train.evaluation.methods import make_kdsm

log = {}
_init, _call = refine.Refinement.__init__, refine.Refinement.__call__
def init(self, config, Z, steps, seed, device="cpu"):
    _init(self, config, Z, steps, seed, device); log["Z"] = Z; log["core"] = self.start_rows(); log["rounds"] = []
def call(self, net):
    r = _call(self, net); log["rounds"].append(np.asarray(r)); return r
refine.Refinement.__init__, refine.Refinement.__call__ = init, call
settings = TrainSettings()
for f, seed, Xtr, Xte, sc, sp, y in trainings(sys.argv, settings.data.scale_discrete):
    t0 = time.time()
    det = make_kdsm("default", settings, seed).fit(Xtr, scaler=sc)
    yte = y[sp.test_idx]; ytr = y[sp.train_idx]
    s = det.score_samples(Xte) if hasattr(det, "score_samples") else det.decision_function(Xte)
    Z = log["Z"]; n = len(Z)
    for k in (5, 10, 20):
        lab = KMeans(k, n_init=4, random_state=0).fit_predict(Z)
        def share(rows):
            m = np.zeros(n, bool); m[rows] = True
            return sorted(round(float(m[lab == c].mean()), 2) for c in range(k))
        print(f.stem, "k", k, "sizes", sorted(np.bincount(lab).tolist()), "\n core", share(log["core"]), "\n last", share(log["rounds"][-1]))
    print(f.stem, f"aucpr {average_precision_score(yte, s):.3f} roc {roc_auc_score(yte, s):.3f}", f"train anom share {ytr.mean():.3f}", f"{time.time()-t0:.0f}s", flush=True)
