"""Thirty-eighth pass: the k-NN part's reference rows chosen otherwise, from the default's per-row files.

    python3 reference.py PER_ROW_DIR[,PER_ROW_DIR ...] DATA_DIR

The default's k-NN part measures a row's distance to the 10th nearest of a seeded sample of at most 512 of the
training rows the trained network finds most normal: the share ``keep`` the refinement keeps (one minus the forest's
depth estimate, ``Detector._fit_neighbours``). This rebuilds that part from each per-row file
(``../score_space/scorespace.py``: the network's scores of the training and test rows; the bench's split and scaler)
and checks it equals the stored part, then draws the reference from other rankings and shares:

- the blend of the network and the forest (by density, the default's reading) instead of the network alone;
- the half of the rows the network or that blend finds most normal, a purer core (the warm start's share);
- the network's rows, leaving out twice the estimate (at least half kept).

Each is blended as the default blends (network, forest by density, k-NN; ``offline_train.blend.Blend`` fitted on the
training rows) and prints mean AUC-PR / AUC-ROC (each dataset averaged over its seeds, then the datasets) and the
mean share of anomalies among the reference rows (labels read for the report only, from the files' ``y_train``).
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "forest_variants"))
from report import kept_share, knn_reference, mean_over_datasets, per_row_runs, run_main  # noqa: E402
from variants import _scores  # noqa: E402


def main(argv):
    if len(argv) < 3:
        raise SystemExit("usage: " + __doc__.strip().splitlines()[2].strip())
    from sklearn.metrics import average_precision_score, roc_auc_score

    from offline_train.blend import Blend

    per, purity, worst = defaultdict(dict), defaultdict(list), 0.0
    for folder in argv[1].split(","):
        for _, ds, seed, X_train, X_test, y, p in per_row_runs(folder, argv[2]):
            depth_train, _ = _scores("scikit-learn (default)", X_train, X_test, seed)
            forest = _scores("density, scikit-learn's trees", X_train, X_test, seed)
            keep = kept_share(depth_train)
            Z, Z_test = (torch.as_tensor(X, dtype=torch.float32) for X in (X_train, X_test))

            def part(ranking, share, Z=Z, Z_test=Z_test, X_train=X_train, seed=seed):
                scorer, ref = knn_reference(X_train, ranking, share, seed)
                return scorer.training_distances(Z, ref).numpy(), scorer(Z_test).numpy(), ref

            net = p["net_train"]
            with_forest = Blend.fit(net, forest[0])(net, forest[0])
            refs = {"the network's keep share (the default)": part(net, keep),
                    "the blend's keep share": part(with_forest, keep),
                    "the network's half": part(net, 0.5),
                    "the blend's half": part(with_forest, 0.5),
                    "the network's, twice the estimate out": part(net, max(0.5, 1.0 - 2.0 * (1.0 - keep)))}
            worst = max(worst, float(np.abs(refs["the network's keep share (the default)"][1] - p["knn_test"]).max()))
            for key, (knn_train, knn_test, ref) in refs.items():
                s = Blend.fit(net, forest[0], knn_train)(p["net_test"], forest[1], knn_test)
                per[key][(ds, seed)] = (average_precision_score(y, s), roc_auc_score(y, s))
                purity[key].append(p["y_train"][ref].mean())
    print(f"{argv[1]}: {len(per[next(iter(per))])} runs; the rebuilt default part against the stored one: largest "
          f"difference {worst:.1e}; mean AUC-PR / AUC-ROC, and the reference rows' anomaly share")
    for key, v in per.items():
        mean = mean_over_datasets(v)
        print(f"{key:40s} {mean[0]:.3f} / {mean[1]:.3f}   {np.mean(purity[key]):.4f}")


if __name__ == "__main__":
    run_main(main)
