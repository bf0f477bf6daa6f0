"""ECOD fitted on a training core as a score part (diagnosis only; reads labels).

ECOD (PyOD) scores a row by the tail probabilities of its features under the empirical distribution of its
training rows, so, unlike the isolation forest, it can say per feature why a row is unusual. Fitted on every
training row it is a baseline (0.433 / 0.758 on the contaminated paper split, seed 0); "Tenth pass"
(docs/contaminated.md) found that a k-NN distance gains most when its reference set is the core. This asks whether
ECOD gains the same way, alone and as a part of the default's blend (z-scores over the training rows, the larger).

For each variants.py file (docs/results/ablation_snapshots/) it rebuilds the bench's split and scaler and fits
ECOD on every standardised training row (``all``) and on the default's two cores (``netcore``, ``fcore50``: see
report.cores).

    python3 docs/results/ecod_core/ecodcore.py SETTING SPLIT OUT.json NPZ_DIR [NPZ_DIR ...]
    python3 docs/results/ecod_core/ecodcore.py summary OUT.json [OUT.json ...]
"""
import sys
from pathlib import Path

import numpy as np
from pyod.models.ecod import ECOD
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import cores, default_parts, rebuilt_runs, score_cli, standardise  # noqa: E402


def run(setting, split, dirs):
    res = {}
    for ds, seed, d, y_test, Ztr, Zte in rebuilt_runs(setting, split, dirs):
        zn, zf, v = default_parts(d)
        for cname, core in {**cores(d), "all": np.arange(len(Ztr))}.items():
            ecod = ECOD().fit(Ztr[core])
            etr, ete = ecod.decision_function(Ztr), ecod.decision_function(Zte)
            ze = standardise(etr, ete)
            v[f"ECOD alone on {cname}"] = ete
            v[f"max(net, ECOD on {cname})"] = np.maximum(zn, ze)
            v[f"max(net, forest, ECOD on {cname})"] = np.max([zn, zf, ze], axis=0)
            v[f"mean(net, forest, ECOD on {cname})"] = np.mean([zn, zf, ze], axis=0)
        res[f"{ds}|{seed}"] = {nm: (ap(y_test, s), roc(y_test, s)) for nm, s in v.items()}
        print(ds, seed, flush=True)
    return res


if __name__ == "__main__":
    score_cli(run)
