"""Do the default's three parts agree more on contaminated training rows than on clean ones? (issue 11, diagnosis).

If anomalies in the history are outliers to every part while a clean history's tail is each part's own, the parts'
agreement over the training rows would tell contaminated history from clean, and the default could trim only the
former. This reads the per-row files of ``../score_space/scorespace.py`` for the same datasets trained on clean
(semi) and contaminated (unsup) history, paper split, and compares, per dataset, the Spearman correlation of each
pair of parts over the training rows and the Jaccard overlap of their top 10%. Labels give only the true share.
From the repository root, after the per-row runs (``scorespace.py unsup paper 0`` and ``semi paper 0``):
    python3 docs/results/part_agreement/agree.py runs/pc_unsup runs/pc_semi > docs/results/part_agreement/agree.txt
"""
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

PARTS = {"f": "forest_train", "n": "net_train", "k": "knn_train"}
PAIRS = ("fn", "fk", "nk")


def top(s: np.ndarray, share: float = 0.1) -> set:
    return set(np.argsort(-s)[:max(1, int(share * len(s)))])


def agreement(d) -> dict:
    out = {}
    for a, b in PAIRS:
        x, y = d[PARTS[a]], d[PARTS[b]]
        out[f"Spearman {a}-{b}"] = spearmanr(x, y)[0]
        tx, ty = top(x), top(y)
        out[f"top-10% Jaccard {a}-{b}"] = len(tx & ty) / len(tx | ty)
    return out


def main(unsup_dir: str, semi_dir: str) -> None:
    rows = []
    for fu in sorted(Path(unsup_dir).glob("*_unsup_paper_0.npz")):
        fs = Path(semi_dir) / fu.name.replace("_unsup_", "_semi_")
        if fs.exists():
            du = np.load(fu)
            rows.append((du["y_train"].mean(), agreement(np.load(fs)), agreement(du)))
    share = np.array([r[0] for r in rows])
    print(f"{len(rows)} datasets, paper split, seed 0; f = isolation forest, n = network, k = k-NN part; over the training rows")
    print(f"{'statistic':26s} {'clean':>6s} {'contam.':>7s}  contaminated above clean  Spearman with the true share")
    for name in rows[0][1]:
        c, u = np.array([r[1][name] for r in rows]), np.array([r[2][name] for r in rows])
        print(f"{name:26s} {c.mean():6.3f} {u.mean():7.3f}  {int(np.sum(u > c)):2d} / {len(rows)}"
              f"                  {spearmanr(u, share)[0]:+.2f}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
