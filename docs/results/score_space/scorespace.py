"""Per-row network outputs f(x) of the default, one training per dataset (issue 11, diagnosis only).

Saves, per dataset and seed, the default's blend, its parts (two, or three with the k-NN part, the default since the
twenty-eighth pass), the network's output vectors f(x), for the training and test rows, with the labels (report
only). ``read.py`` then compares reads of the output vectors.
``knn_`` holds the k-NN part's plain distances, where a reference row's nearest is itself; the library fits the
blend's moments on training distances that skip it, which ``report.knn_training_distances`` rebuilds from these files;
since the forty-first pass the files also hold them (``knn_fit``, for the rows ``fit`` trained on: ``fit_rows``, as it
holds out a calibration share) and the share of rows the refinement keeps (``keep``): what ``../kept_moments/moments.py``
rebuilds the blend from.
From the repository root, two one-thread workers:
    for w in 0 1; do python3 docs/results/score_space/scorespace.py unsup paper 0 $w 2 runs/ss & done; wait
Arguments: those of ``../ablation_snapshots/perrow.py``.
"""
import sys
import time
from pathlib import Path

import numpy as np
import torch

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from perrow import trainings  # noqa: E402

from offline_train.config import TrainSettings  # noqa: E402
from offline_train.evaluation.methods import make_kdsm  # noqa: E402
from offline_train.refine import WarmStart  # noqa: E402

settings = TrainSettings()
for f, seed, Xtr, Xte, sc, sp, y in trainings(sys.argv, settings.data.scale_discrete):
    t0 = time.time()
    det = make_kdsm("default", settings, seed).fit(Xtr, scaler=sc)
    rc = det.refine_config  # the keep share exactly as Refinement computed it (the summary rounds it)
    Xfit, Xcal = det._holdout_split(Xtr)  # fit holds out calibration rows; the network and the blend see the rest
    fit_rows = np.ones(len(Xtr), bool) if len(Xcal) == 0 else ~det._holdout_mask_fn()(0, len(Xtr))
    keep = 1.0 - min(WarmStart(det.scaler_.transform(Xfit), det.train_config.seed, rc.threshold).contamination_,
                     rc.max_drop)
    assert abs(keep - det.train_summary_.refine["keep"]) < 1e-4
    res = {"y_test": sp.y_test, "y_train": y[sp.train_idx], "keep": keep, "fit_rows": fit_rows}
    for part, Xp in (("test", Xte), ("train", Xtr)):
        pp = det.score_parts(Xp)
        res.update({f"blend_{part}": pp.scores, f"net_{part}": pp.network, f"forest_{part}": pp.forest,
                    f"F_{part}": pp.outputs, **({f"knn_{part}": pp.knn} if pp.knn is not None else {})})
    if det.neighbours_ is not None:  # the library's training distances (a reference row skips itself): what Blend.fit saw
        res["knn_fit"] = det._fit_neighbours(Xfit, res["net_train"][fit_rows], keep)
    np.savez_compressed(f, **res)
    print(f.stem, f"{time.time() - t0:.0f}s", flush=True)
