"""Thirty-fourth pass (docs/contaminated-passes.md): DIF, the deep isolation forest, alone and as a fourth part.

Two steps, one script:

    python3 as_part.py fit SETTING SPLIT SEED OUTDIR DATASET.npz ...   # DIF and IForest per row, same split as the bench
    python3 as_part.py table PER_ROW_DIR OUTDIR TAG                    # against the default's per-row parts

``fit`` fits DIF and IForest as the bench builds them (``methods._baseline``) on the bench's split and scaler
(``runner._prepared``), one torch thread, and saves each row's training and test
scores. ``table`` reads those files beside the default's per-row files (``../score_space/scorespace.py``: the network,
forest and k-NN parts of one training of the default) and prints, per dataset and on average, AUC-PR / AUC-ROC of the
default, IForest, DIF, DIF as a fourth part of the default's score (the larger of four z-scores, each standardised over
the training rows by ``offline_train.blend.Blend``, the fourth as the blend standardises the forest) and DIF in
the forest's place. Labels are read only for the metrics.
"""
from __future__ import annotations

import glob
import os
import sys
import time
import warnings

import numpy as np


def fit(setting: str, split: str, seed: int, out: str, files: list[str]) -> None:
    import torch

    from offline_train.evaluation.methods import _baseline
    from offline_train.evaluation.runner import _prepared

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    os.makedirs(out, exist_ok=True)
    for path in files:
        name = os.path.basename(path)[:-4]
        dst = f"{out}/{name}_{setting}_{split}_{seed}.npz"
        if os.path.exists(dst):
            continue
        X, sp, scaler = _prepared(path, setting, split, seed, False)  # the bench's split and scaler
        Xtr, Xte = scaler.transform(X[sp.train_idx]), scaler.transform(X[sp.test_idx])
        res = {"y_test": sp.y_test}
        for key in ("dif", "iforest"):
            t0 = time.perf_counter()
            model = _baseline(key, seed, Xtr).fit(Xtr)  # the bench's own construction of each baseline
            res[f"{key}_train"], res[f"{key}_test"] = model.decision_function(Xtr), model.decision_function(Xte)
            res[f"{key}_seconds"] = time.perf_counter() - t0
        np.savez(dst, **res)
        print(name, f"dif {res['dif_seconds']:.1f} s, iforest {res['iforest_seconds']:.1f} s", flush=True)


def _standardise(train: np.ndarray, test: np.ndarray) -> np.ndarray:
    """A new part's z-score, as ``offline_train.blend.Blend`` standardises the forest's: by its training-row moments."""
    return (test - train.mean()) / (train.std() + 1e-12)


def table(per_row: str, dif_dir: str, tag: str) -> None:
    from sklearn.metrics import average_precision_score, roc_auc_score

    from offline_train.blend import Blend

    results = []
    files = sorted(glob.glob(f"{dif_dir}/*_{tag}.npz"))
    if not files:
        raise ValueError(f"no {dif_dir}/*_{tag}.npz files")
    for f in files:
        name = os.path.basename(f)[: -len(tag) - 5]
        g = f"{per_row}/{name}_{tag}.npz"
        if not os.path.exists(g):
            continue
        d, p = np.load(f), np.load(g)
        y = d["y_test"]
        assert (y == p["y_test"]).all(), f"{name}: the per-row files are of different splits"
        blend = Blend.fit(p["net_train"], p["forest_train"], p["knn_train"])  # the library's z-scores of the three parts
        zn, zf, zk = blend.z_scores(p["net_test"], p["forest_test"], p["knn_test"])
        zd = _standardise(d["dif_train"], d["dif_test"])
        scores = {"default": p["blend_test"], "iforest": d["iforest_test"], "dif": d["dif_test"],
                  "default + dif": np.maximum.reduce([zn, zf, zk, zd]), "dif for the forest": np.maximum.reduce([zn, zk, zd])}
        results.append((name, {k: (average_precision_score(y, s), roc_auc_score(y, s)) for k, s in scores.items()}))
    keys = list(results[0][1])
    print(f"{'dataset (AUC-PR / AUC-ROC)':28s}" + "".join(f"{k:>20s}" for k in keys))
    for name, r in results:
        print(f"{name:28s}" + "".join(f"{r[k][0]:>12.3f} / {r[k][1]:.3f}" for k in keys))
    print(f"{f'mean ({len(results)} datasets)':28s}"
          + "".join(f"{np.mean([r[k][0] for _, r in results]):>12.3f} / {np.mean([r[k][1] for _, r in results]):.3f}" for k in keys))
    for k in keys:
        ahead = [sum(r[k][i] > r["iforest"][i] for _, r in results) for i in (0, 1)]
        print(f"{k}: ahead of IForest on {ahead[0]} / {ahead[1]} of {len(results)}")


if __name__ == "__main__":
    if not ((sys.argv[1:2] == ["fit"] and len(sys.argv) >= 7) or (sys.argv[1:2] == ["table"] and len(sys.argv) == 5)):
        raise SystemExit("usage:\n" + "\n".join(line for line in __doc__.splitlines() if "python3" in line))
    try:
        if sys.argv[1] == "fit":
            fit(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6:])
        else:
            table(sys.argv[2], sys.argv[3], sys.argv[4])
    except (OSError, ValueError, KeyError) as e:  # a missing or unreadable file, a bad number: one line, no traceback
        raise SystemExit(f"{os.path.basename(__file__)}: {e}") from None
