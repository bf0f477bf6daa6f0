"""Reads of the network's output vectors f(x) beside the default's ||f(x)|| (issue 11, diagnosis only; reads labels).

For each ``scorespace.py`` file: the default, its two parts, and scores built from the output vectors of the training
rows: the largest component (``linf``), each component standardised over a core (``diag``), the Mahalanobis distance
under a Ledoit-Wolf covariance of a core's outputs (``maha``), the k-th nearest distance among a core's outputs
(``knnF``); each alone, blended with the forest as the default blends, and as a third part of the default's blend (the larger of the two z-scores, the
network-like part on the log scale). Cores as in ``../ablation_snapshots/report.py``.

    python3 docs/results/score_space/read.py unsup paper OUT.json NPZ_DIR [NPZ_DIR ...]
    python3 docs/results/score_space/read.py summary OUT.json [OUT.json ...]
"""
import sys
from pathlib import Path

import numpy as np
from sklearn.covariance import LedoitWolf
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "knn_core"))
from knncore import kth_distance  # noqa: E402
from report import cores, dataset_seed, default_parts, lg, npz_files, score_cli, standardise  # noqa: E402


def maha(Ftr, Fte, core):
    lw = LedoitWolf().fit(Ftr[core])
    return lw.mahalanobis(Ftr), lw.mahalanobis(Fte)


def diag(Ftr, Fte, core):
    mu, sd = Ftr[core].mean(0), Ftr[core].std(0) + 1e-12
    return np.linalg.norm((Ftr - mu) / sd, axis=1), np.linalg.norm((Fte - mu) / sd, axis=1)


def run(setting, split, dirs):
    res = {}
    for f in npz_files(dirs):
        ds, seed = dataset_seed(f)
        d = dict(np.load(f))
        Ftr, Fte = d["F_train"].astype(np.float64), d["F_test"].astype(np.float64)
        zf = standardise(d["forest_train"], d["forest_test"])
        zn, _, v = default_parts(d)
        parts = {"linf": (np.abs(Ftr).max(1), np.abs(Fte).max(1))}
        for cname, core in {**cores(d), "all": np.arange(len(Ftr))}.items():
            parts[f"diag/{cname}"] = diag(Ftr, Fte, core)
            parts[f"maha/{cname}"] = maha(Ftr, Fte, core)
            parts[f"knnF k10/{cname}"] = kth_distance(Ftr, Fte, core, 10, seed)
        for nm, (tr, te) in parts.items():
            v[f"{nm} alone"] = te
            zp = standardise(lg(tr), lg(te))
            v[f"max(forest,{nm})"] = np.maximum(zf, zp)
            v[f"max(net,forest,{nm})"] = np.max([zn, zf, zp], axis=0)
        res[f"{ds}|{seed}"] = {nm: (ap(d["y_test"], s), roc(d["y_test"], s)) for nm, s in v.items()}
        print(ds, seed, flush=True)
    return res


if __name__ == "__main__":
    score_cli(run)
