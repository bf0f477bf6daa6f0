"""The default's parts on training, test and injected rows, one training per dataset (issue 11, diagnosis only).

Thirty-third pass: can anomalies injected into a training set, made from its own rows with no label, tell which part
of the score (or the blend) ranks that history's anomalies best? Per dataset this trains the default once (the
bench's split and scaler, the library's code path) and saves every part's score of the training rows (the k-NN part
skipping a reference row's own copy, as the blend's moments do), of the test rows, and of three kinds of rows made
from the training rows (``injected``). ``choose.py`` then picks a part per training set and reports.
From the repository root, two one-thread workers:
    for w in 0 1; do python3 docs/results/injected_selection/inject.py unsup paper 0 $w 2 runs/inj & done; wait
Arguments: those of ``../ablation_snapshots/perrow.py``.
"""
import sys
import time
from pathlib import Path

import numpy as np
import torch

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from perrow import trainings  # noqa: E402

from offline_train.config import TrainSettings  # noqa: E402
from offline_train.evaluation.methods import make_kdsm  # noqa: E402


def injected(X: np.ndarray, seed: int, rows: int = 1000) -> dict[str, np.ndarray]:
    """Rows made from the training rows X alone (raw units), ``rows`` of each kind (fewer on small data):
    global: uniform in each column's range widened by 10% on each side;
    dependency: each column drawn on its own from its training values (the columns' joint structure broken);
    local: a training row plus Gaussian noise of half each column's standard deviation.

    >>> X = np.random.default_rng(0).normal(size=(50, 3))
    >>> {k: v.shape for k, v in injected(X, 0).items()}
    {'global': (50, 3), 'dependency': (50, 3), 'local': (50, 3)}
    """
    rng = np.random.default_rng(seed)
    n, d = X.shape
    m = min(rows, n)
    lo, hi = X.min(axis=0), X.max(axis=0)
    pad = 0.1 * (hi - lo)
    return {
        "global": rng.uniform(lo - pad, hi + pad, size=(m, d)),
        "dependency": np.stack([rng.choice(X[:, j], size=m) for j in range(d)], axis=1),
        "local": X[rng.integers(0, n, size=m)] + rng.normal(size=(m, d)) * 0.5 * X.std(axis=0),
    }


def parts(det, X: np.ndarray, prefix: str) -> dict:
    pp = det.score_parts(X)
    return {f"blend_{prefix}": pp.scores, f"net_{prefix}": pp.network, f"forest_{prefix}": pp.forest,
            f"knn_{prefix}": pp.knn}


if __name__ == "__main__":
    settings = TrainSettings()
    for f, seed, Xtr, Xte, sc, sp, y in trainings(sys.argv, settings.data.scale_discrete):
        t0 = time.time()
        det = make_kdsm("default", settings, seed)
        fit_neighbours, seen = det._fit_neighbours, {}
        # The training rows' k-NN part as the blend's moments see it (a reference row skips its own copy).
        det._fit_neighbours = lambda *a: seen.setdefault("knn", fit_neighbours(*a))
        det.fit(Xtr, scaler=sc)
        res = {"y_test": sp.y_test, "y_train": y[sp.train_idx], **parts(det, Xte, "test"), **parts(det, Xtr, "train")}
        res["knn_train"] = seen["knn"]
        res["blend_train"] = det.blend_(res["net_train"], res["forest_train"], res["knn_train"])
        for kind, Xi in injected(Xtr, seed).items():
            res.update(parts(det, Xi, kind))
        np.savez_compressed(f, **res)
        print(f.stem, f"{time.time() - t0:.0f}s", flush=True)
