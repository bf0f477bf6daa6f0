"""The first twelve datasets of the fortieth pass, run before the library had ``refine.strata`` (diagnosis only).

The default (``make_kdsm("default")``) with ``offline_train.refine.lowest`` replaced by a per-stratum keep over
``K`` k-means clusters (``KMeans(K, n_init=4, random_state=seed)`` on the standardised training rows, as
``refine.strata_of`` now does) for the core, every round and the k-NN part's reference; writes a JSON per training
with the blend's and the network's test AUC-PR / AUC-ROC. ``KDSM_REFINE__STRATA=10 kdsm bench adbench ...`` is the
same code path in the library (the check on 14_glass: docs/results/strata/README.md).
    K=10 python3 docs/results/strata/strata_diag.py unsup paper 0 0 1 runs/strata_unsup DATASET,...
"""
import json
import os
import sys
import time
from pathlib import Path

import torch
from sklearn.metrics import average_precision_score, roc_auc_score

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from perrow import trainings

import offline_train.detector as detector
import offline_train.refine as refine
from offline_train.config import TrainSettings
from offline_train.evaluation.methods import make_kdsm

K = int(os.environ.get("K", "10")); MODE = os.environ.get("MODE", "strata")
state = {}
_lowest = refine.lowest
def strat_lowest(scores, keep, strata=None):  # the library's own strata (0 here) are ignored
    lab = state.get("lab")
    if MODE != "strata" or lab is None or len(lab) != len(scores):
        return _lowest(scores, keep)
    return _lowest(scores, keep, lab)  # per cluster: the library's rule since it has one (the same rows as this ran)


_init = refine.Refinement.__init__
def init(self, config, Z, steps, seed, device="cpu"):
    state["lab"] = refine.strata_of(Z, K, seed)  # KMeans(K, n_init=4, random_state=seed), as this ran
    _init(self, config, Z, steps, seed, device)
refine.Refinement.__init__ = init
refine.lowest = strat_lowest; detector.lowest = strat_lowest
settings = TrainSettings()
for f, seed, Xtr, Xte, sc, sp, y in trainings(sys.argv, settings.data.scale_discrete):
    t0 = time.time(); state.clear()
    det = make_kdsm("default", settings, seed).fit(Xtr, scaler=sc)
    yte = y[sp.test_idx]
    pp = det.score_parts(Xte)
    res = {"dataset": f.stem.split("_" + sys.argv[1])[0], "seed": seed}
    for name, s in (("blend", pp.scores), ("net", pp.network)):
        res[name] = [average_precision_score(yte, s), roc_auc_score(yte, s)]
    res["s"] = round(time.time() - t0)
    f.with_suffix(".json").write_text(json.dumps(res)); f.touch()
    print(json.dumps(res), flush=True)
