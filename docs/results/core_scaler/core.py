"""Per-row scores of the default trained with a scaler fitted on the warm start's core (diagnosis only).

The default standardises every column with the mean and standard deviation of all training rows, anomalies
included: a column where the contamination lies far out gets a wide standard deviation, so the normal rows
crowd into a narrow band of it and the network's noise, in standardised units, is coarse exactly there. This
variant fits the scaler on the rows the warm start's forest keeps (the ``1 - estimate`` share it finds least
isolated, the share the refinement rounds train on), so the normal rows have unit spread in every column. A
column constant on the core keeps the scale of all rows (a unit scale in raw units would blow it up), and so do
the {0,1} / {-1,0,1} columns the bench leaves unscaled. The
forest splits each column uniformly between its minimum and maximum, so its scores do not depend on the scaler;
only the network's input changes. From the repository root, two workers:

    python3 docs/results/core_scaler/core.py unsup paper 0 0 2 runs/core &
    python3 docs/results/core_scaler/core.py unsup paper 0 1 2 runs/core

Arguments as ../ablation_snapshots/variants.py (setting, split, seed, worker index, worker count, output folder,
optionally a comma list of dataset stems). The default on the bench's scaler is not retrained here unless
``CORE_WITH_DEFAULT=1``: report.py reads its per-row scores (``raw_*``) from the files of ../gauss_input (the same
split, seed and code path) or, with that variable, from these files themselves.
"""
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from perrow import parts, trainings  # noqa: E402

from offline_train.config import TrainSettings  # noqa: E402
from offline_train.evaluation.methods import make_kdsm  # noqa: E402
from offline_train.refine import Refinement  # noqa: E402
from offline_train.scaler import Scaler  # noqa: E402


def core_scaler(Xtr: np.ndarray, sc: Scaler, settings: TrainSettings, seed: int) -> tuple[Scaler, float]:
    """The scaler refitted on the warm start's core, and the share of rows in that core."""
    # The default's own warm start and share (the step budget does not bear on either).
    refine = Refinement(settings.refine, sc.transform(Xtr), steps=1, seed=seed)
    keep = refine.keep_
    core = Scaler.fit(Xtr[refine.warm_.core(keep)], scale_discrete=True)  # every column's own moments on the core
    # Columns constant on the core, and {0,1}/{-1,0,1} columns the bench passes through, keep the bench's scale.
    as_is = core.constant_ | (sc.discrete_ & (not settings.data.scale_discrete))
    std = np.where(as_is, sc.std_, core.std_)
    mean = np.where(as_is, sc.mean_, core.mean_)
    return Scaler(mean, std, sc.discrete_.copy(), sc.constant_.copy()), keep


def main() -> None:
    settings = TrainSettings()
    for f, seed, Xtr, Xte, sc, sp, _ in trainings(sys.argv, settings.data.scale_discrete):
        t0 = time.time()
        res = {"y_test": sp.y_test}
        if os.environ.get("CORE_WITH_DEFAULT") == "1":
            det = make_kdsm("default", settings, seed).fit(Xtr, scaler=sc)
            res.update({f"raw_{k}": v for k, v in parts(det, Xtr, Xte).items() if v is not None})
        sc2, keep = core_scaler(Xtr, sc, settings, seed)
        det = make_kdsm("default", settings, seed).fit(Xtr, scaler=sc2)
        res.update({"keep": keep, **{f"core_{k}": v for k, v in parts(det, Xtr, Xte).items() if v is not None}})
        np.savez(f, **res)
        print(f.stem, f"keep {keep:.3f} trained in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
