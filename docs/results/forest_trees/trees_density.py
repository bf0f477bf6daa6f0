"""The forest's size again, for the density reading (issue 11, thirty-ninth pass): the forest alone, 100 against 300
trees of 256 rows, each read by density (``score.forest_metric: density``, ``IsolationScorer.from_forest``), on the
bench's split and scaler, 26 datasets x seeds 0-2 (``report.alone_table``).

    python3 docs/results/forest_trees/trees_density.py unsup paper > docs/results/forest_trees/trees_density_unsup_paper.txt

The question: a leaf's density is a noisier reading than its depth, so more trees might pay more than the twenty-third
pass's +0.003 / +0.000 by depth.
"""
import sys
from pathlib import Path

import torch
from sklearn.ensemble import IsolationForest

from offline_train.isolation import IsolationScorer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import alone_table  # noqa: E402

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "adbench"


def scores(key, X_train, X_test, seed):
    trees, rows = key
    forest = IsolationForest(n_estimators=trees, max_samples=min(rows, len(X_train)), random_state=seed, n_jobs=1)
    scorer = IsolationScorer.from_forest(forest.fit(X_train), X_train, metric="density")
    return scorer(torch.as_tensor(X_test, dtype=torch.float32)).numpy()


if __name__ == "__main__":
    torch.set_num_threads(1)
    alone_table(sys.argv[1], sys.argv[2], str(DATA),
                {(t, 256): f"density, {t:4d} trees of 256 rows" for t in (100, 300)}, scores)
