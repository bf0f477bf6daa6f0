"""The default with its forest part read by density beside the bench's baselines, under issue 11's protocol.

    python3 protocol.py PER_ROW_DIR[,PER_ROW_DIR ...] DATA_DIR RESULTS.csv [RESULTS.csv ...]

Reads the default's per-row files (``../score_space/scorespace.py``) of every folder named, rebuilds the default's
forest on each run's training rows (the bench's split and scaler) and puts its depth reading (scikit-learn's score,
``score.forest_metric: depth``) or its density reading (``IsolationScorer.from_forest(..., metric="density")``, the
default since this pass) in the blend's forest part; the network's and the k-NN part's scores are the files' (the
forest's reading changes neither: the warm start ranks by depth, the k-NN part's reference by the network). Files
written before the density reading hold the depth blend, later ones the density blend; the stored row checks that.
Baselines come from the bench's results.csv rows of the same datasets and seeds. Averages each dataset over its seeds, then the datasets; prints mean
AUC-PR / AUC-ROC, on how many datasets each row is above IForest's bench row (3 decimals), each dataset's change from
depth to density, and, where every dataset has the same seeds, each seed's means. Labels are read only for the metrics.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import (  # noqa: E402
    ahead,
    baseline_rows,
    knn_training_distances,
    per_row_runs,
    run_main,
    seed_averaged,
)
from variants import _scores  # noqa: E402

BASELINES = ("iforest", "ecod", "knn", "lof")


def main(argv):
    if len(argv) < 4:
        raise SystemExit("usage: " + __doc__.strip().splitlines()[2].strip())
    from sklearn.metrics import average_precision_score, roc_auc_score

    from offline_train.blend import Blend

    per = defaultdict(dict)
    for folder in argv[1].split(","):
        for _, ds, seed, X_train, X_test, y, p in per_row_runs(folder, argv[2]):
            scores = {"the default (stored)": p["blend_test"]}
            forests = {"forest by depth (before)": _scores("scikit-learn (default)", X_train, X_test, seed),
                       "forest by density (now)": _scores("density, scikit-learn's trees", X_train, X_test, seed)}
            # the library's moments read the training distances of the rows the default keeps
            knn_train = knn_training_distances(p["net_train"], X_train, seed, forests["forest by depth (before)"][0])
            for key, (f_train, f_test) in forests.items():
                scores[key] = Blend.fit(p["net_train"], f_train, knn_train)(p["net_test"], f_test, p["knn_test"])
            for key, s in scores.items():
                per[key][(ds, seed)] = (average_precision_score(y, s), roc_auc_score(y, s))
    keys = set(per["the default (stored)"])
    for b in BASELINES:
        rows = baseline_rows(argv[3:], b)
        if all(k in rows for k in keys):
            per[b] = {k: rows[k] for k in keys}
    if "iforest" not in per:
        raise SystemExit(f"{argv[0]}: no complete iforest rows for these runs in {' '.join(argv[3:])}")
    m = {nm: seed_averaged(v) for nm, v in per.items()}
    print(f"{len(keys)} runs, {len(m['iforest'])} datasets; mean AUC-PR / AUC-ROC; 'above IForest' = datasets above "
          "IForest's bench row, AUC-PR / AUC-ROC")
    for nm in per:
        mean = np.mean(list(m[nm].values()), 0)
        a = ahead(m[nm], m["iforest"])
        print(f"{nm:32s} {mean[0]:.3f} / {mean[1]:.3f}   above IForest {a[0]:2d} / {a[1]:2d}")
    before, now = m["forest by depth (before)"], m["forest by density (now)"]
    print("per dataset, density minus depth (seed-averaged), by AUC-ROC:")
    for ds in sorted(now, key=lambda d: now[d][1] - before[d][1]):
        d = now[ds] - before[ds]
        print(f"  {ds:22s} {d[0]:+.3f} / {d[1]:+.3f}   (depth {before[ds][0]:.3f} / {before[ds][1]:.3f})")
    up = [(sum(now[ds][i] - before[ds][i] > 5e-4 for ds in now), sum(now[ds][i] - before[ds][i] < -5e-4 for ds in now))
          for i in (0, 1)]
    print(f"  up / down by more than 0.0005: AUC-PR {up[0][0]} / {up[0][1]}, AUC-ROC {up[1][0]} / {up[1][1]}")
    seeds = sorted({s for _, s in keys})
    if len(seeds) > 1 and len(keys) == len({ds for ds, _ in keys}) * len(seeds):
        print("per seed (mean over the datasets):")
        for nm in per:
            cells = [np.mean([v for (_, s), v in per[nm].items() if s == seed], 0) for seed in seeds]
            print(f"  {nm:30s} " + "   ".join(f"seed {seed} {c[0]:.3f} / {c[1]:.3f}" for seed, c in zip(seeds, cells, strict=True)))


if __name__ == "__main__":
    run_main(main)
