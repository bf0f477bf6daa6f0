"""Thirty-seventh pass (docs/contaminated-passes.md): other isolation forests (isotree), alone and in the default's blend.

    python3 variants.py alone SETTING SPLIT DATA_DIR    # each forest alone, 3 seeds, every dataset of DATA_DIR
    python3 variants.py blend PER_ROW_DIR DATA_DIR      # the default's blend with each forest as its forest part

The default's forest part is scikit-learn's isolation forest (100 trees of 256 rows, axis-parallel splits, the
path length as the score). isotree (``pip install isotree pandas``; not a dependency of the project) builds the
variants the literature proposes, each with the same 100 trees of ``min(256, n)`` rows a tree, chosen before any
blend was run:

- ``isotree IF``: isotree's own axis-parallel forest (``ndim=1``), the same model as scikit-learn's in another code;
- ``extended, 2`` and ``extended, 3``: the extended isolation forest (Hariri, Kind and Brunner 2021), random
  hyperplanes through 2 or 3 columns;
- ``SCiForest``: hyperplanes through 2 columns chosen among 10 by the gain in standard deviation (Liu, Ting and
  Zhou 2010), the range penalty on;
- ``density`` and ``adjusted depth``: the axis-parallel trees scored by isotree's density and adjusted-depth
  metrics instead of the path length; ``extended 2, density``: both changes.

One form was added after those had run, the one the library can ship: ``density, scikit-learn's trees``, the default's
own forest (``offline_train.isolation.fit_forest``) read by isotree's density metric
(``IsolationScorer.from_forest(..., metric="density")``), the code path ``score.forest_metric: density`` trains.

``alone`` fits each on the bench's split and scaler (``runner._prepared``) and prints mean AUC-PR / AUC-ROC over
the datasets and seeds 0-2 (and AUC-PR per seed). ``blend`` reads the default's per-row files
(``../score_space/scorespace.py``) and puts each forest, fitted on the same training rows, in the blend's forest part
(``offline_train.blend.Blend`` fitted on the training rows' parts; the warm start's core is unchanged, so this
measures the scoring part only). Labels are read only for the metrics.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import (  # noqa: E402
    alone_or_blend,
    alone_table,
    knn_training_distances,
    per_row_runs,
    print_file_means,
)

NAMES = ("scikit-learn (default)", "isotree IF", "extended, 2", "extended, 3", "SCiForest", "density",
         "adjusted depth", "extended 2, density", "density, scikit-learn's trees")


def _scores(name: str, X_train: np.ndarray, X_test: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The forest ``name`` fitted on ``X_train``: its scores (higher = more anomalous) of the training and test rows."""
    size = min(256, len(X_train))
    if name == "scikit-learn (default)":
        from sklearn.ensemble import IsolationForest

        forest = IsolationForest(max_samples=size, random_state=seed, n_jobs=1).fit(X_train)
        return -forest.score_samples(X_train), -forest.score_samples(X_test)
    if name == "density, scikit-learn's trees":
        import torch

        from offline_train.isolation import IsolationScorer, fit_forest

        scorer = IsolationScorer.from_forest(fit_forest(X_train, seed), X_train, metric="density")
        return tuple(scorer(torch.as_tensor(X, dtype=torch.float32)).numpy() for X in (X_train, X_test))
    import isotree

    options = {
        "isotree IF": {"ndim": 1},
        "extended, 2": {"ndim": 2},
        "extended, 3": {"ndim": 3},
        "SCiForest": {"ndim": 2, "ntry": 10, "prob_pick_avg_gain": 1.0, "penalize_range": True},
        "density": {"ndim": 1, "scoring_metric": "density"},
        "adjusted depth": {"ndim": 1, "scoring_metric": "adj_depth"},
        "extended 2, density": {"ndim": 2, "scoring_metric": "density"},
    }[name]
    forest = isotree.IsolationForest(sample_size=size, ntrees=100, random_seed=seed, nthreads=1,
                                     missing_action="fail", **options).fit(X_train)
    return forest.decision_function(X_train), forest.decision_function(X_test)


def alone(setting: str, split: str, data: str) -> None:
    alone_table(setting, split, data, {name: f"{name:24s}" for name in NAMES},
                lambda name, X_train, X_test, seed: _scores(name, X_train, X_test, seed)[1])

def blend(per_row: str, data: str) -> None:
    from sklearn.metrics import average_precision_score, roc_auc_score

    from offline_train.blend import Blend

    rows = {}
    for f, _, seed, X_train, X_test, y, p in per_row_runs(per_row, data):
        scores = {"the default (stored)": p["blend_test"]}
        forests = {forest: _scores(forest, X_train, X_test, seed) for forest in NAMES}
        # the library's moments read the training distances of the rows the default keeps (by its depth estimate)
        knn_train = knn_training_distances(p["net_train"], X_train, seed, forests["scikit-learn (default)"][0])
        for forest, (f_train, f_test) in forests.items():
            # the library's blend, fitted on the training rows' parts with this forest's scores in the forest's place
            scores[f"blend, {forest}"] = Blend.fit(p["net_train"], f_train, knn_train)(
                p["net_test"], f_test, p["knn_test"])
        rows[f] = {k: (average_precision_score(y, s), roc_auc_score(y, s)) for k, s in scores.items()}
    print_file_means(per_row, rows, 34)


if __name__ == "__main__":
    alone_or_blend(__doc__, alone, blend, (OSError, ValueError, KeyError, ImportError))  # ImportError: isotree is missing
