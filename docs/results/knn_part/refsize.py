"""How many kept training rows the k-NN part needs as references (issue 11, twenty-sixth pass; diagnosis only).

For each per-row file of ../score_space/scorespace.py (the default's training, both parts for every training and test
row) it rebuilds the bench's split and scaler and scores the twenty-fifth pass's candidate, ``max3 raw k10/netcore``:
the larger of three z-scores over the training rows, the network's (log scale), the forest's and the distance to the
10th nearest of a seeded sample of at most R rows the trained network keeps (reference rows skip themselves), for
R in 256, 512, 1024 and 2048 (the twenty-fifth pass used 2048). Labels feed only the report.

    python3 docs/results/knn_part/refsize.py SETTING SPLIT OUT.json NPZ_DIR [NPZ_DIR ...]
    python3 docs/results/knn_part/refsize.py summary OUT.json [OUT.json ...]
"""
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "knn_core"))
from knncore import kth_distance  # noqa: E402
from report import cores, default_parts, rebuilt_runs, score_cli, standardise  # noqa: E402


def three_parts(setting, split, dirs, variants):
    """{"dataset|seed": {row: (AUC-PR, AUC-ROC)}}: the default's rows, and per (name, reference rows, k) of
    ``variants`` the larger of three z-scores, the third the k-NN distance to the network's kept rows."""
    res = {}
    for ds, seed, d, y_test, Ztr, Zte in rebuilt_runs(setting, split, dirs):
        zn, zf, v = default_parts(d)
        for name, rows, k in variants:
            dtr, dte = kth_distance(Ztr, Zte, cores(d)["netcore"], k, seed, max_ref=rows)
            v[name] = np.max([zn, zf, standardise(dtr, dte)], axis=0)
        res[f"{ds}|{seed}"] = {nm: (ap(y_test, s), roc(y_test, s)) for nm, s in v.items()}
        print(ds, seed, flush=True)
    return res


if __name__ == "__main__":
    score_cli(lambda setting, split, dirs: three_parts(
        setting, split, dirs, [(f"max3 ref {r}", r, 10) for r in (256, 512, 1024, 2048)]))
