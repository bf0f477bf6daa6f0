"""Means and per-dataset counts of the Twenty-first pass's scores (labels read for the report only).

    python3 docs/results/extra_parts/report.py contaminated DEFAULT_DIR CLASSICAL_DIR   # unsup_paper_seed0.txt
    python3 docs/results/extra_parts/report.py clean KDSM_KNN_DIR                       # semi_paper_seed0.txt

``contaminated``: the default's two parts (``raw_net_*``, ``raw_forest_*`` of ``../gauss_input/gauss.py``'s files)
with each classical detector of ``classical.py`` as a third part. ``clean``: the clean-history profile's network
(``kdsm_*``) with KNN (``knn5_*``, ``knn10_*``) as a second part. Each part is a z-score over the training rows (the
network's and KNN's on the log scale, as ``offline_train/blend.py`` does, or as it is: ``raw``); parts are combined
by their mean or their maximum.
"""
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score


def z(train: np.ndarray, test: np.ndarray, log: bool) -> np.ndarray:
    if log:
        train, test = np.log(np.maximum(train, 1e-12)), np.log(np.maximum(test, 1e-12))
    sd = train.std()
    return (test - train.mean()) / (sd if sd > 0 else 1.0)


def contaminated(a: dict, b: dict) -> dict:
    net, forest = z(a["raw_net_train"], a["raw_net_test"], True), z(a["raw_forest_train"], a["raw_forest_test"], False)
    out = {"the default (max of network, forest)": a["raw_blend_test"]}
    for name in ("ecod", "copod", "hbos"):
        c = z(b[f"{name}_train"], b[f"{name}_test"], False)
        out[f"{name} alone"] = b[f"{name}_test"]
        out[f"max(network, forest, {name})"] = np.maximum.reduce([net, forest, c])
        out[f"mean(network, forest, {name})"] = (net + forest + c) / 3
        out[f"max(network, mean(forest, {name}))"] = np.maximum(net, (forest + c) / 2)
    three = [z(b[f"{n}_train"], b[f"{n}_test"], False) for n in ("ecod", "copod", "hbos")]
    out["mean(network, forest, ecod, copod, hbos)"] = (net + forest + sum(three)) / 5
    out["max(network, mean(forest, ecod, copod, hbos))"] = np.maximum(net, (forest + sum(three)) / 4)
    return out


def clean(a: dict, _b: dict) -> dict:
    net = z(a["kdsm_train"], a["kdsm_test"], True)
    out = {"clean-history profile (network alone)": a["kdsm_test"]}
    for k in (5, 10):
        out[f"knn k{k} alone"] = a[f"knn{k}_test"]
        for form in ("log", "raw"):
            knn = z(a[f"knn{k}_train"], a[f"knn{k}_test"], form == "log")
            out[f"mean(network, knn k{k}) {form}"] = (net + knn) / 2
            out[f"max(network, knn k{k}) {form}"] = np.maximum(net, knn)
    return out


def main() -> None:
    modes = {"contaminated": (contaminated, 4), "clean": (clean, 3)}
    if len(sys.argv) < 2 or sys.argv[1] not in modes or len(sys.argv) != modes[sys.argv[1]][1]:
        raise SystemExit(__doc__.strip().splitlines()[2].strip() + "\n" + __doc__.strip().splitlines()[3].strip())
    combine = modes[sys.argv[1]][0]
    dirs = [Path(d) for d in sys.argv[2:]]
    for d in dirs:
        if not d.is_dir():
            raise SystemExit(f"report.py: no folder {d}")
    files = sorted(dirs[0].glob("*.npz"))
    if not files:
        raise SystemExit(f"report.py: no per-row files in {dirs[0]}")
    rows = {}
    for f in files:
        a = dict(np.load(f))
        b = a
        if len(dirs) > 1:
            other = dirs[1] / f.name
            if not other.exists():
                raise SystemExit(f"report.py: {other} is missing (the two folders must hold the same runs)")
            b = dict(np.load(other))
            if not np.array_equal(a["y_test"], b["y_test"]):
                raise SystemExit(f"report.py: {f.name}: the two folders' test rows differ")
        y = a["y_test"]
        rows[f.stem] = {k: (average_precision_score(y, v), roc_auc_score(y, v)) for k, v in combine(a, b).items()}
    names = list(next(iter(rows.values())))
    first = np.array([rows[d][names[0]] for d in rows])
    print(f"{len(rows)} datasets; mean AUC-PR / AUC-ROC; ahead / behind = datasets above / below '{names[0]}'")
    for n in names:
        m = np.array([rows[d][n] for d in rows])
        ahead, behind = (m > first).sum(axis=0), (m < first).sum(axis=0)
        print(f"{n:48s} {m[:, 0].mean():.3f} / {m[:, 1].mean():.3f}   "
              f"AUC-PR {ahead[0]:2d} / {behind[0]:2d}, AUC-ROC {ahead[1]:2d} / {behind[1]:2d}")


if __name__ == "__main__":
    main()
