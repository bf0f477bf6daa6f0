"""The isolation forest part refitted on a training core (diagnosis only; reads labels).

The default's score is the larger of two z-scores: the network's (trained on the rows the refinement keeps) and
the warm start's isolation forest's, which is fitted on *every* training row, anomalies included. "Tenth pass"
(docs/contaminated.md) found that a k-NN distance to a core beats IForest on contaminated history; this asks
whether the forest part gains the same way when it is refitted on the rows the default already trusts.

For each variants.py file (docs/results/ablation_snapshots/) it rebuilds the bench's split and scaler, checks
that scikit-learn's forest on every standardised training row (seed = the run's seed) gives the file's
``forest_train`` (the default's own part), refits a forest with the same settings on a core and scores the
training and test rows with it, alone and in the default's blend (the larger z-score, z over the training rows).

Cores: ``netcore`` = the share 1 - (forest's contamination estimate) of training rows the trained network finds
most normal (what the refinement keeps), ``fcore50`` = the warm start's core (the forest's least isolated half),
``netcore∩fcore`` = the rows in both.

    python3 docs/results/forest_core/forestcore.py SETTING SPLIT OUT.json NPZ_DIR [NPZ_DIR ...]
    python3 docs/results/forest_core/forestcore.py summary OUT.json [OUT.json ...]
"""
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import cores, default_parts, rebuilt_runs, score_cli, standardise  # noqa: E402


def run(setting, split, dirs):
    from offline_train.isolation import fit_forest

    res = {}
    for ds, seed, d, y_test, Ztr, Zte in rebuilt_runs(setting, split, dirs):
        gap = float(np.max(np.abs(-fit_forest(Ztr, seed).score_samples(Ztr) - d["forest_train"])))
        assert gap < 1e-6, f"{ds} seed {seed}: the rebuilt forest is not the default's (max gap {gap:g})"
        cores_ = cores(d)
        cores_["netcore&fcore"] = np.intersect1d(cores_["netcore"], cores_["fcore50"])
        zn, zf, v = default_parts(d)
        for cname, core in cores_.items():
            iso = fit_forest(Ztr[core], seed)
            ftr, fte = -iso.score_samples(Ztr), -iso.score_samples(Zte)
            zc = standardise(ftr, fte)
            v[f"forest alone on {cname}"] = fte
            v[f"max(net, forest on {cname})"] = np.maximum(zn, zc)
            v[f"max(net, forest, forest on {cname})"] = np.max([zn, zf, zc], axis=0)
            v[f"max(net, mean(forest, forest on {cname}))"] = np.maximum(zn, (zf + zc) / 2)
        res[f"{ds}|{seed}"] = {nm: (ap(y_test, s), roc(y_test, s)) for nm, s in v.items()}
        print(ds, seed, flush=True)
    return res


if __name__ == "__main__":
    score_cli(run)
