"""Thirty-fifth pass (docs/contaminated-passes.md): subsampled k-NN ensembles, alone and as a part of the default.

    python3 vsknn.py fit SETTING SPLIT SEED PER_ROW_DIR OUTDIR DATA_DIR WORKER WORKERS   # the ensembles' scores per row
    python3 vsknn.py table PER_ROW_DIR OUTDIR TAG                                       # against the default's parts

Aggarwal and Sathe ("Theoretical foundations and algorithms for outlier ensembles", SIGKDD Explorations 2015) average
a k-NN distance over many small random subsamples of the training rows: a small reference set thins out anomalies that
come in groups, the way an isolation forest's 256-row samples do, without first deciding which rows are normal. Two
forms, fixed before they were measured: 25 members, k = 5, each member's distances standardised over the training rows
and averaged; the reference of each member is 256 rows (``s256``) or, their "variable subsampling", a size drawn
uniformly between 50 and 1,000 rows (``vs``). ``fit`` uses the bench's split and scaler (``runner._prepared``)
of each dataset that has a per-row file of the default (``../score_space/scorespace.py``); ``table`` prints each
dataset's AUC-PR / AUC-ROC of the default, its forest and k-NN parts, both ensembles, and each ensemble as a fourth part
(the larger of four z-scores: the default's three from ``offline_train.blend.Blend``, the fourth standardised as the
blend standardises the forest) or in the k-NN part's place.
Labels are read only for the metrics.
"""
from __future__ import annotations

import glob
import os
import sys

import numpy as np

MEMBERS, K = 25, 5


def _kth_distance(queries: np.ndarray, reference: np.ndarray, k: int) -> np.ndarray:
    import torch

    q, r = torch.as_tensor(queries, dtype=torch.float32), torch.as_tensor(reference, dtype=torch.float32)
    out = [torch.cdist(q[i:i + 4096], r).topk(min(k, len(r)), dim=1, largest=False).values[:, -1]
           for i in range(0, len(q), 4096)]
    return torch.cat(out).double().numpy()


def ensemble(X_train: np.ndarray, X_test: np.ndarray, rng: np.random.Generator, variable: bool):
    """The ensemble's mean standardised k-NN distance of the training rows and of the test rows."""
    n = len(X_train)
    train, test = np.zeros(n), np.zeros(len(X_test))
    for _ in range(MEMBERS):
        size = int(rng.integers(min(50, n), min(1000, n) + 1)) if variable else min(256, n)
        reference = X_train[rng.choice(n, size, replace=False)]
        d_train, d_test = _kth_distance(X_train, reference, K), _kth_distance(X_test, reference, K)
        mu, sd = d_train.mean(), d_train.std() + 1e-12
        train += (d_train - mu) / sd
        test += (d_test - mu) / sd
    return train / MEMBERS, test / MEMBERS


def fit(setting: str, split: str, seed: int, per_row: str, out: str, data: str, worker: int, workers: int) -> None:
    import torch

    from offline_train.evaluation.runner import _prepared

    torch.set_num_threads(1)
    os.makedirs(out, exist_ok=True)
    tag = f"{setting}_{split}_{seed}"
    files = sorted(glob.glob(f"{per_row}/*_{tag}.npz"))
    if not files:
        raise ValueError(f"no {per_row}/*_{tag}.npz files")
    for f in files[worker::workers]:
        name = os.path.basename(f)[: -len(tag) - 5]
        dst = f"{out}/{name}_{tag}.npz"
        if os.path.exists(dst):
            continue
        X, sp, scaler = _prepared(f"{data}/{name}.npz", setting, split, seed, False)  # the bench's split and scaler
        assert (np.load(f)["y_test"] == sp.y_test).all(), f"{name}: not the per-row file's split"
        X_train, X_test = scaler.transform(X[sp.train_idx]), scaler.transform(X[sp.test_idx])
        res = {"y_test": sp.y_test}
        for key, variable in (("vs", True), ("s256", False)):
            res[f"{key}_train"], res[f"{key}_test"] = ensemble(X_train, X_test, np.random.default_rng(seed), variable)
        np.savez(dst, **res)
        print(name, flush=True)


def _standardise(train: np.ndarray, test: np.ndarray) -> np.ndarray:
    """A new part's z-score, as ``offline_train.blend.Blend`` standardises the forest's: by its training-row moments."""
    return (test - train.mean()) / (train.std() + 1e-12)


def table(per_row: str, ens_dir: str, tag: str) -> None:
    from sklearn.metrics import average_precision_score, roc_auc_score

    from offline_train.blend import Blend

    results = []
    files = sorted(glob.glob(f"{ens_dir}/*_{tag}.npz"))
    if not files:
        raise ValueError(f"no {ens_dir}/*_{tag}.npz files")
    for f in files:
        name = os.path.basename(f)[: -len(tag) - 5]
        e, p = np.load(f), np.load(f"{per_row}/{name}_{tag}.npz")
        y = e["y_test"]
        blend = Blend.fit(p["net_train"], p["forest_train"], p["knn_train"])  # the library's z-scores of the three parts
        zn, zf, zk = blend.z_scores(p["net_test"], p["forest_test"], p["knn_test"])
        zv, zs = _standardise(e["vs_train"], e["vs_test"]), _standardise(e["s256_train"], e["s256_test"])
        scores = {"default": p["blend_test"], "forest": p["forest_test"], "k-NN part": p["knn_test"], "vs": e["vs_test"],
                  "s256": e["s256_test"], "default + vs": np.maximum.reduce([zn, zf, zk, zv]),
                  "default + s256": np.maximum.reduce([zn, zf, zk, zs]), "vs for k-NN part": np.maximum.reduce([zn, zf, zv])}
        results.append((name, {k: (average_precision_score(y, s), roc_auc_score(y, s)) for k, s in scores.items()}))
    keys = list(results[0][1])
    print(f"{'AUC-PR / AUC-ROC':22s}" + "".join(f"{k:>18s}" for k in keys))
    for name, r in results:
        print(f"{name:22s}" + "".join(f"{r[k][0]:>10.3f} / {r[k][1]:.3f}" for k in keys))
    print(f"{f'mean ({len(results)})':22s}"
          + "".join(f"{np.mean([r[k][0] for _, r in results]):>10.3f} / {np.mean([r[k][1] for _, r in results]):.3f}" for k in keys))
    print(f"{'ahead of the forest':22s}"
          + "".join(f"{sum(r[k][0] > r['forest'][0] for _, r in results):>10d} / {sum(r[k][1] > r['forest'][1] for _, r in results):<5d}"
                    for k in keys))


if __name__ == "__main__":
    if not ((sys.argv[1:2] == ["fit"] and len(sys.argv) >= 10) or (sys.argv[1:2] == ["table"] and len(sys.argv) == 5)):
        raise SystemExit("usage:\n" + "\n".join(line for line in __doc__.splitlines() if "python3" in line))
    try:
        if sys.argv[1] == "fit":
            fit(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7], int(sys.argv[8]), int(sys.argv[9]))
        else:
            table(sys.argv[2], sys.argv[3], sys.argv[4])
    except (OSError, ValueError, KeyError) as e:  # a missing or unreadable file, a bad number: one line, no traceback
        raise SystemExit(f"{os.path.basename(__file__)}: {e}") from None
