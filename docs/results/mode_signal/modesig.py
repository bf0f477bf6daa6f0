"""Does contamination show as a dense mode among the rows an isolation forest isolates? (diagnosis only)

On clean history the rows a forest isolates should be a sparse tail: far from the bulk *and* far from each other.
Anomalies that come as a group (a second mode) are isolated from the bulk yet close to each other. Four label-free
statistics of each standardised training set (exact copies removed: the paper split resamples small datasets), for
each dataset's clean (semi) and contaminated (unsup) training set, same split and seed:

- rho(forest,knn): Spearman correlation of the forest's isolation and the 10-th nearest-neighbour distance;
- dense among isolated: share of the forest's top fifth whose 10-NN distance is below the median row's;
- knn ratio top/all: median 10-NN distance of the top fifth over that of all rows;
- flagged self/rest: median over the top fifth of (5-NN distance among the top fifth) / (5-NN distance to the rest).

A statistic that told the two apart would move the same way on the contaminated set of nearly every dataset.
It reads no labels; the pairing of clean and contaminated sets is what the diagnosis knows and a detector does not.

    python3 docs/results/mode_signal/modesig.py paper 0 > docs/results/mode_signal/paper_seed0.txt
    python3 docs/results/mode_signal/modesig.py clean 0 > docs/results/mode_signal/clean_seed0.txt
    python3 docs/results/heldout/make_tasks.py runs/heldout_data    # the 20 held-out tasks
    python3 docs/results/mode_signal/modesig.py clean 0 runs/heldout_data > docs/results/mode_signal/heldout_clean_seed0.txt
"""
import glob
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr
from sklearn.ensemble import IsolationForest
from sklearn.neighbors import NearestNeighbors

from offline_train.evaluation.runner import _prepared


def stats(Z):
    Zu = np.unique(Z, axis=0)
    f = -IsolationForest(random_state=0).fit(Zu).score_samples(Zu)  # higher = more isolated
    k = min(10, len(Zu) - 1)
    dk = NearestNeighbors(n_neighbors=k + 1).fit(Zu).kneighbors(Zu)[0][:, -1]  # the first neighbour is the row
    top = f >= np.quantile(f, 0.8)
    F, R = Zu[top], Zu[~top]
    kk = min(5, len(F) - 1)
    d_ff = NearestNeighbors(n_neighbors=kk + 1).fit(F).kneighbors(F)[0][:, -1]  # among the top fifth
    d_fr = NearestNeighbors(n_neighbors=kk).fit(R).kneighbors(F)[0][:, -1]  # from the top fifth to the rest
    return {"rho(forest,knn)": spearmanr(f, dk)[0], "dense among isolated": float(np.mean(dk[top] <= np.median(dk))),
            "knn ratio top/all": float(np.median(dk[top]) / np.median(dk)),
            "flagged self/rest": float(np.median(d_ff / (d_fr + 1e-12)))}


def main(argv: list[str]) -> int:
    if not 2 <= len(argv) <= 3 or argv[0] not in ("paper", "clean") or not argv[1].isdigit():
        print(f"usage: {Path(__file__).name} paper|clean SEED [DATA_DIR]", file=sys.stderr)
        return 1
    split, seed = argv[0], int(argv[1])
    data = Path(argv[2]) if len(argv) > 2 else Path(__file__).resolve().parents[4] / "shared" / "data" / "adbench"
    files = sorted(glob.glob(str(data / "*.npz")))
    if not files:
        print(f"no .npz file in {data}", file=sys.stderr)
        return 1
    print(f"clean / contaminated training set, {split} split, seed {seed}")
    rows = []
    for f in files:
        pair = {}
        for setting in ("semi", "unsup"):
            X, sp, sc = _prepared(Path(f), setting, split, seed, False)
            pair[setting] = stats(np.clip(sc.transform(X[sp.train_idx]), -1e4, 1e4))
        rows.append(pair)
        print(f"{Path(f).stem:18s}", "  ".join(f"{k} {pair['semi'][k]:.3f} / {pair['unsup'][k]:.3f}" for k in pair["semi"]),
              flush=True)
    print()
    for k in rows[0]["semi"]:
        c, u = np.array([r["semi"][k] for r in rows]), np.array([r["unsup"][k] for r in rows])
        print(f"{k:24s} clean {c.mean():.3f} contaminated {u.mean():.3f}  contaminated above clean "
              f"{int((u > c).sum())}/{len(rows)}  below {int((u < c).sum())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
