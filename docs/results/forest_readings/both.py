"""Thirty-eighth pass: the blend's forest part as both readings of the same trees, from the default's per-row files.

    python3 both.py PER_ROW_DIR[,PER_ROW_DIR ...] DATA_DIR

Reads the default's per-row files (``../score_space/scorespace.py``: the network's and the k-NN part's scores of the
training and test rows), rebuilds the default's forest on each run's training rows (the bench's split and scaler)
and blends (``offline_train.blend.Blend``, fitted on the training rows' parts) with the forest part read

- by depth (scikit-learn's score, ``score.forest_metric: depth``);
- by density (the default since the thirty-seventh pass);
- by the mean of the two readings' z-scores (each standardised over the training rows, as the blend does);
- by both, as two parts: the larger of four z-scores (network, depth, density, k-NN).

Prints mean AUC-PR / AUC-ROC (each dataset averaged over its seeds, then the datasets). Labels are read only for the
metrics.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "forest_variants"))
from report import knn_training_distances, mean_over_datasets, per_row_runs, run_main  # noqa: E402
from variants import _scores  # noqa: E402


def _z(scores: np.ndarray, train: np.ndarray) -> np.ndarray:
    return (scores - train.mean()) / train.std()


def main(argv):
    if len(argv) < 3:
        raise SystemExit("usage: " + __doc__.strip().splitlines()[2].strip())
    from sklearn.metrics import average_precision_score, roc_auc_score

    from offline_train.blend import Blend

    per = defaultdict(dict)
    for folder in argv[1].split(","):
        for _, ds, seed, X_train, X_test, y, p in per_row_runs(folder, argv[2]):
            net = p["net_train"], p["net_test"]
            depth = _scores("scikit-learn (default)", X_train, X_test, seed)
            knn = knn_training_distances(net[0], X_train, seed, depth[0]), p["knn_test"]  # the library's moments
            density = _scores("density, scikit-learn's trees", X_train, X_test, seed)
            mean_z = tuple((_z(a, depth[0]) + _z(b, density[0])) / 2 for a, b in zip(depth, density, strict=True))
            blends = {}
            for key, forest in (("depth", depth), ("density (the default)", density), ("mean of the two z", mean_z)):
                blend = Blend.fit(net[0], forest[0], knn[0])
                blends[key] = blend(net[1], forest[1], knn[1])
            # Both blends map max z back through the network's moments, so their logs' maximum is the larger of four.
            blends["both, larger of four z"] = np.maximum(np.log(blends["depth"]), np.log(blends["density (the default)"]))
            for key, s in blends.items():
                per[key][(ds, seed)] = (average_precision_score(y, s), roc_auc_score(y, s))
    print(f"{argv[1]}: {len(per['depth'])} runs; mean AUC-PR / AUC-ROC")
    for key, v in per.items():
        mean = mean_over_datasets(v)
        print(f"{key:24s} {mean[0]:.3f} / {mean[1]:.3f}")


if __name__ == "__main__":
    run_main(main)
