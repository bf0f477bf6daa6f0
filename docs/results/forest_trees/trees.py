"""The isolation forest's size (issue 11, target 5): AUC-PR / AUC-ROC of the forest alone by number of trees.

The default's forest is scikit-learn's IsolationForest with its defaults (100 trees of 256 rows,
``offline_train.isolation.fit_forest``). This measures other sizes on the benchmark's contaminated paper split,
the same splits and scaler as ``kdsm bench adbench`` (``offline_train.evaluation.runner._prepared``), the forest
fitted on the training rows and scoring the test rows.

    OMP_NUM_THREADS=1 python3 docs/results/forest_trees/trees.py run 100,300,1000 0,1,2 > trees_100_300_1000.txt
    python3 docs/results/forest_trees/trees.py summary 25,50,100,300,1000 trees_25_50.txt trees_100_300_1000.txt

``run`` prints one line per dataset and seed: the dataset, the seed, then AUC-PR AUC-ROC per size, separated by
``|``. ``summary`` joins such files by (dataset, seed) and prints the mean per seed and over all rows.
"""

import sys
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "adbench"


def run(trees: list[int], seeds: list[int]) -> None:
    from sklearn.ensemble import IsolationForest
    from sklearn.metrics import average_precision_score, roc_auc_score

    from offline_train.evaluation.runner import _prepared, dataset_paths

    for path in dataset_paths(DATA):
        for seed in seeds:
            X, split, scaler = _prepared(path, "unsup", "paper", seed, False)
            Ztr, Zte = scaler.transform(X[split.train_idx]), scaler.transform(X[split.test_idx])
            cells = []
            for t in trees:
                s = -IsolationForest(n_estimators=t, random_state=seed, n_jobs=1).fit(Ztr).score_samples(Zte)
                cells.append(f"{average_precision_score(split.y_test, s):.4f} {roc_auc_score(split.y_test, s):.4f}")
            print(path.stem, seed, " | ".join(cells), flush=True)


def summary(files: list[str], sizes: list[int]) -> None:
    rows: dict[tuple[str, str], list[float]] = {}
    for f in files:
        for line in Path(f).read_text().splitlines():
            name, seed, *rest = line.split()
            rows.setdefault((name, seed), []).extend(float(x) for x in rest if x != "|")
    table = np.array([rows[k] for k in sorted(rows)])
    seeds = sorted({k[1] for k in rows})
    if table.shape[1] != 2 * len(sizes):
        sys.exit(f"summary: {table.shape[1] // 2} sizes in the files, {len(sizes)} named")
    print("sizes", " ".join(str(s) for s in sizes), "(AUC-PR / AUC-ROC)")
    for seed in seeds:
        m = np.array([rows[k] for k in sorted(rows) if k[1] == seed]).mean(0)
        print(f"seed {seed} ({len(rows) // len(seeds)} datasets):", "  ".join(f"{m[2*i]:.4f} / {m[2*i+1]:.4f}" for i in range(len(sizes))))
    m = table.mean(0)
    print(f"all {len(table)} runs:", "  ".join(f"{m[2*i]:.4f} / {m[2*i+1]:.4f}" for i in range(len(sizes))))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "run":
        run([int(t) for t in sys.argv[2].split(",")], [int(s) for s in sys.argv[3].split(",")])
    elif len(sys.argv) >= 4 and sys.argv[1] == "summary":
        summary(sys.argv[3:], [int(t) for t in sys.argv[2].split(",")])
    else:
        sys.exit("usage: trees.py run TREES SEEDS | trees.py summary TREES FILE...  (TREES, SEEDS: comma lists)")
