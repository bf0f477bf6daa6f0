"""Thirty-eighth pass, diagnosis: would the warm start's core be purer ranked by the forest's density reading?

    python3 core.py SETTING SPLIT SEEDS DATA_DIR [DATASET,...]     # SEEDS: a comma list, e.g. 0 or 1,2

The warm start (``offline_train.refine.WarmStart``) fits the default's forest on the standardised training rows
(the bench's split and scaler) and trains the network first on the half it ranks least isolated, by depth; the
contamination estimate (the share of depth scores over 0.5) sets the share the rounds keep. For each training set
this prints the share of anomalies among the training rows, in the half-core and in the kept share when the same
trees rank by depth, by density (``IsolationScorer.from_forest(..., metric="density")``) and by the sum of the two
readings' ranks; and each ranking's AUC-ROC / AUC-PR over the training rows. Labels are read for this diagnosis only:
the default never sees them.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from scipy.stats import rankdata
from sklearn.metrics import average_precision_score, roc_auc_score

from offline_train.data import load_npz
from offline_train.evaluation.runner import _prepared, dataset_paths
from offline_train.isolation import IsolationScorer, fit_forest
from offline_train.refine import lowest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import kept_share, run_main  # noqa: E402

READINGS = ("depth", "density", "rank sum")


def main(argv):
    if len(argv) < 5:
        raise SystemExit("usage: " + __doc__.strip().splitlines()[2].strip())
    setting, split, seeds, data = argv[1], argv[2], [int(s) for s in argv[3].split(",")], Path(argv[4])
    only = set(argv[5].split(",")) if len(argv) > 5 else None
    paths, rows = dataset_paths(data), []
    print(f"{setting} {split}, seeds {argv[3]}: anomaly share of the training rows; per reading: of the half-core, "
          "of the kept share, and its AUC-ROC / AUC-PR over the training rows")
    for path in paths:
        if only and path.stem not in only:
            continue
        labels = load_npz(path)[1]  # for this diagnosis only
        for seed in seeds:
            X, sp, scaler = _prepared(path, setting, split, seed, False)
            y = labels[sp.train_idx]
            if not y.any():
                continue
            Z = scaler.transform(X[sp.train_idx])
            forest = fit_forest(Z, seed)
            depth = -forest.score_samples(Z)
            density = IsolationScorer.from_forest(forest, Z, "density")(torch.as_tensor(Z, dtype=torch.float32)).numpy()
            keep = kept_share(depth)  # refine.keep: auto, as the default sets it
            row = [y.mean()]
            for s in (depth, density, rankdata(depth) + rankdata(density)):
                row += [y[lowest(s, 0.5)].mean(), y[lowest(s, keep)].mean(),
                        roc_auc_score(y, s), average_precision_score(y, s)]
            rows.append(row)
            print(f"{path.stem:18s} {seed} {row[0]:.3f} | " + " | ".join(
                "{:.3f} {:.3f} {:.3f} / {:.3f}".format(*row[1 + 4 * i:5 + 4 * i]) for i in range(3)))
    mean = np.mean(rows, axis=0)
    print(f"mean over {len(rows)} training sets: anomaly share {mean[0]:.4f}")
    for i, name in enumerate(READINGS):
        print("{:9s} half-core {:.4f}, kept share {:.4f}, AUC-ROC / AUC-PR {:.3f} / {:.3f}".format(
            name, *mean[1 + 4 * i:5 + 4 * i]))


if __name__ == "__main__":
    run_main(main)
