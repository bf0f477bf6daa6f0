"""Per-row scores of the default on its usual standardised rows and on rank-Gaussianised rows (diagnosis only).

Gaussianising: per column, every distinct training value maps to the normal quantile of its mid-rank, values
between two training values are interpolated linearly, and beyond the training range the map goes on linearly
with slope 1 / (the column's standard deviation), so a value outside the range keeps its distance in standardised
units instead of being clipped. Fitted on the training rows only; the default then trains on the mapped rows with a
scaler fitted on them (its forest too sees the mapped rows). Both trainings use the bench's split and seed. From the
repository root, two workers:

    python3 docs/results/gauss_input/gauss.py unsup paper 0 0 2 runs/gauss &
    python3 docs/results/gauss_input/gauss.py unsup paper 0 1 2 runs/gauss

Arguments as ../ablation_snapshots/variants.py (setting, split, seed, worker index, worker count, output folder,
optionally a comma list of dataset stems). report.py reads the files. ``GAUSS_METHOD=kdsm`` trains the bench's
``kdsm`` method (the clean-history profile: no trimming, no forest) instead of the default.
"""
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.special import ndtri

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from perrow import parts, trainings  # noqa: E402

from offline_train.config import TrainSettings  # noqa: E402
from offline_train.evaluation.methods import make_kdsm  # noqa: E402
from offline_train.scaler import Scaler  # noqa: E402


class Gaussianise:
    """Per-column monotone map of the training values onto normal quantiles, linear beyond their range."""

    def fit(self, X: np.ndarray) -> "Gaussianise":
        self.columns_ = []
        for x in X.T:
            values, counts = np.unique(x, return_counts=True)
            mid_rank = (np.cumsum(counts) - counts / 2) / len(x)
            z = ndtri(mid_rank) if len(values) > 1 else np.zeros(1)
            self.columns_.append((values, z, x.std() or 1.0))
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        out = np.empty(X.shape, np.float64)
        for j, (values, z, sd) in enumerate(self.columns_):
            x = X[:, j]
            v = np.interp(x, values, z)
            v = np.where(x > values[-1], z[-1] + (x - values[-1]) / sd, v)
            out[:, j] = np.where(x < values[0], z[0] + (x - values[0]) / sd, v)
        return out


def main() -> None:
    settings = TrainSettings()
    method = os.environ.get("GAUSS_METHOD", "default")
    for f, seed, Xtr, Xte, sc, sp, _ in trainings(sys.argv, settings.data.scale_discrete):
        t0 = time.time()
        det = make_kdsm(method, settings, seed).fit(Xtr, scaler=sc)
        res = {"y_test": sp.y_test, **{f"raw_{k}": v for k, v in parts(det, Xtr, Xte).items() if v is not None}}
        t1 = time.time()
        g = Gaussianise().fit(Xtr)
        Gtr, Gte = g.transform(Xtr), g.transform(Xte)
        det = make_kdsm(method, settings, seed).fit(Gtr, scaler=Scaler.fit(Gtr, settings.data.scale_discrete))
        res.update({f"gauss_{k}": v for k, v in parts(det, Gtr, Gte).items() if v is not None})
        np.savez(f, **res)
        print(f.stem, f"raw {t1 - t0:.0f}s gaussianised {time.time() - t1:.0f}s", flush=True)


if __name__ == "__main__":
    main()
