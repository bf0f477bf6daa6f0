"""Do label-free statistics of a training set tell clean history from contaminated? (diagnosis only; reads labels)

Pairs each dataset's clean (semi) and contaminated (unsup) training set of the paper split, seed 0, from
variants.py's files, and computes the tail and shape of three score distributions over the training rows: the
10-th nearest-neighbour distance (exact copies removed first: the paper split resamples small datasets), the
trained network's log score and the isolation forest's score. A statistic that measured contamination would be
higher on the contaminated set of nearly every dataset and rise with the true share.

    python3 docs/results/knn_core/cleansig.py SEMI_PAPER_DIR UNSUP_PAPER_DIR
"""
import glob
import sys
from pathlib import Path

import numpy as np
from scipy.stats import kurtosis, skew, spearmanr
from sklearn.neighbors import NearestNeighbors

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import dataset_seed, lg  # noqa: E402


def tail(a):
    """(q95 - q50) / (q50 - q05): how much longer the upper tail is than the lower."""
    q05, q50, q95 = np.quantile(a, [0.05, 0.5, 0.95])
    return (q95 - q50) / (q50 - q05 + 1e-12)


def stats(Z, d):
    Zu = np.unique(Z, axis=0)
    dk = NearestNeighbors(n_neighbors=11).fit(Zu).kneighbors(Zu)[0][:, -1]  # the first neighbour is the row itself
    ln, fo = lg(d["net_train"]), d["forest_train"]
    return {"knn tail": tail(dk), "knn skew (log)": skew(np.log(dk + 1e-9)), "network tail": tail(ln),
            "network skew": skew(ln), "network kurtosis": kurtosis(ln), "forest tail": tail(fo),
            "forest skew": skew(fo), "forest share > 0.5": float(np.mean(fo > 0.5))}


if __name__ == "__main__":
    from offline_train.evaluation.runner import _prepared

    data = Path("../shared/data/adbench")
    if len(sys.argv) < 3:
        raise SystemExit(f"usage: {sys.argv[0]} SEMI_PAPER_DIR UNSUP_PAPER_DIR")
    semi_dir, unsup_dir = sys.argv[1], sys.argv[2]
    rows = []
    for f in sorted(glob.glob(f"{unsup_dir}/*_0.npz")):
        ds, _ = dataset_seed(f)
        pair = {}
        for setting, path in (("semi", f"{semi_dir}/{ds}_semi_paper_0.npz"), ("unsup", f)):
            d = np.load(path)
            X, sp, sc = _prepared(data / f"{ds}.npz", setting, "paper", 0, False)
            pair[setting] = stats(np.clip(sc.transform(X[sp.train_idx]), -1e4, 1e4), d)
            pair[setting]["true share"] = float(d["y_train"].mean())
        rows.append(pair)
    print(f"{len(rows)} datasets, paper split, seed 0")
    print(f"{'statistic':20s} {'clean mean':>10s} {'contaminated':>12s}  contaminated above clean  "
          "Spearman with the true share")
    for k in rows[0]["semi"]:
        if k == "true share":
            continue
        c = np.array([r["semi"][k] for r in rows])
        u = np.array([r["unsup"][k] for r in rows])
        t = np.array([r["unsup"]["true share"] for r in rows])
        print(f"{k:20s} {c.mean():10.3f} {u.mean():12.3f}  {int((u > c).sum()):2d} / {len(rows)}"
              f"                  {spearmanr(u, t)[0]:+.2f}")
