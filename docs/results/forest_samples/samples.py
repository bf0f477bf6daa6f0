"""Thirty-sixth pass (docs/contaminated-passes.md): the isolation forest's sample size, alone and in the default's blend.

    python3 samples.py alone SETTING SPLIT DATA_DIR    # the forest alone, 3 seeds, every dataset of DATA_DIR
    python3 samples.py blend PER_ROW_DIR DATA_DIR      # the default's blend with a forest of each size as its part

The default's forest is scikit-learn's (100 trees, each on a sample of ``max_samples`` = 256 rows, the size Liu, Ting
and Zhou recommend). ``alone`` fits it with 32 to 1,024 rows a tree on the bench's split and scaler (``runner._prepared``)
and prints mean AUC-PR / AUC-ROC over the datasets and seeds 0-2 (and AUC-PR per seed). ``blend``
reads the default's per-row files (``../score_space/scorespace.py``) and puts a forest of 256, 512 or 1,024 rows a
tree, fitted on the same training rows, in the blend's forest part (``offline_train.blend.Blend`` fitted on the
training rows' parts; the warm start's core is unchanged, so this measures the scoring part only). The
rebuilt 256-row blend equals the stored default to within 1e-3 AUC-PR. Labels are read only for the metrics.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import alone_or_blend, alone_table, per_row_runs, print_file_means  # noqa: E402

SIZES = (32, 64, 128, 256, 512, 1024)


def _forest(X_train: np.ndarray, size: int, seed: int):
    from sklearn.ensemble import IsolationForest

    return IsolationForest(max_samples=min(size, len(X_train)), random_state=seed, n_jobs=1).fit(X_train)


def alone(setting: str, split: str, data: str) -> None:
    labels = {size: f"{size:5d} rows a tree:" for size in SIZES}
    alone_table(setting, split, data, labels,
                lambda size, X_train, X_test, seed: -_forest(X_train, size, seed).score_samples(X_test))

def blend(per_row: str, data: str) -> None:
    from sklearn.metrics import average_precision_score, roc_auc_score

    from offline_train.blend import Blend

    rows = {}
    for f, _, seed, X_train, X_test, y, p in per_row_runs(per_row, data):
        scores = {"the default (stored)": p["blend_test"]}
        for size in (256, 512, 1024):
            forest = _forest(X_train, size, seed)
            f_train, f_test = -forest.score_samples(X_train), -forest.score_samples(X_test)
            scores[f"forest of {size}"] = f_test
            # the library's blend, fitted on the training rows' parts with this forest's scores in the forest's place
            blend = Blend.fit(p["net_train"], f_train, p["knn_train"])
            scores[f"blend, forest of {size}"] = blend(p["net_test"], f_test, p["knn_test"])
        rows[f] = {k: (average_precision_score(y, s), roc_auc_score(y, s)) for k, s in scores.items()}
    print_file_means(per_row, rows, 24)


if __name__ == "__main__":
    alone_or_blend(__doc__, alone, blend)
