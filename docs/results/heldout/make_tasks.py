"""Anomaly-detection tasks from datasets bundled inside installed packages: data the default was never tuned on.

Each multi-class table gives one task per class, ADBench's way for its classification sources (ODDS'
optdigits, pendigits): that class is the anomaly, downsampled to 5% of the normal rows (at least 10, a fixed
draw per task), every other class is normal. Sources, all read from files inside the wheels on this machine:
river's ImageSegments (2310 x 18, 7 classes), Phishing (1250 x 9) and Bananas (5300 x 2), scikit-learn's digits
(1797 x 64; digit 0 is left out: it is the anomaly of ADBench's optdigits, one of the 26). Writes ``<k>_<name>.npz``
(keys X, y; 1 = anomaly) for ``kdsm bench adbench --data-dir``.

python3 docs/results/heldout/make_tasks.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

SHARE = 0.05


def _river(name: str) -> tuple[np.ndarray, np.ndarray]:
    from river import datasets

    rows = list(getattr(datasets, name)())
    keys = list(rows[0][0])
    return np.array([[float(x[k]) for k in keys] for x, _ in rows]), np.array([str(y) for _, y in rows])


def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    keep = y != 0
    return X[keep].astype(float), y[keep].astype(str)


def one_task_per_class(sources, seed_base: int):
    """Yield (name, X, y) for each class of each (source, (X, labels)): that class the anomaly, downsampled to SHARE of
    the normal rows (at least 10; the draw seeded by seed_base + the class's index), every other class normal."""
    for source, (X, labels) in sources:
        for i, cls in enumerate(sorted(set(labels))):
            normal, anomalous = np.flatnonzero(labels != cls), np.flatnonzero(labels == cls)
            n_anom = min(len(anomalous), max(10, round(SHARE * len(normal))))
            picked = np.random.default_rng(seed_base + i).choice(anomalous, n_anom, replace=False)
            idx = np.r_[normal, np.sort(picked)]
            y = np.r_[np.zeros(len(normal), int), np.ones(n_anom, int)]
            yield f"{source}-{cls}".replace(" ", "_"), X[idx], y


def tasks():
    """Yield (name, X, y) for every task, deterministic."""
    yield from one_task_per_class((("segment", _river("ImageSegments")), ("phishing", _river("Phishing")),
                                   ("banana", _river("Bananas")), ("digits", _digits())), 1000)


def main(argv: list[str], tasks=tasks, script: str = Path(__file__).name) -> int:
    """Write every task of tasks() to OUT_DIR as <k>_<name>.npz; one line and 1 on a bad call or an unwritable folder."""
    if len(argv) != 1:
        print(f"usage: {script} OUT_DIR", file=sys.stderr)
        return 1
    out = Path(argv[0])
    try:
        out.mkdir(parents=True, exist_ok=True)
        for k, (name, X, y) in enumerate(tasks(), start=1):
            np.savez(out / f"{k}_{name}.npz", X=X, y=y)
            print(f"{k}_{name}: {X.shape[0]} rows x {X.shape[1]}, {int(y.sum())} anomalies")
    except OSError as e:
        print(f"cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
