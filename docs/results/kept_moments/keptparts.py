"""Per-row parts of the default and the rows it keeps, one training per dataset (issue 11, forty-first pass).

Saves, per dataset and seed, the default's stored score and its three parts on the training and test rows, the
k-NN part's training distances as the library fits the blend's moments on them (a reference row skips itself), the
share of training rows the refinement keeps (``keep``) and the labels (report only). ``moments.py`` then rebuilds
the blend with each part's moments taken over the kept rows instead of every training row. ``fit_rows`` marks the
training rows ``fit`` trained on (it holds out a calibration share); ``knn_fit`` is for those rows.
From the repository root, two one-thread workers:
    for w in 0 1; do python3 docs/results/kept_moments/keptparts.py unsup paper 0 $w 2 runs/km_unsup & done; wait
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
    warm = WarmStart(det.scaler_.transform(Xfit), det.train_config.seed, rc.threshold)
    keep = 1.0 - min(warm.contamination_, rc.max_drop)
    assert abs(keep - det.train_summary_.refine["keep"]) < 1e-4
    res = {"y_test": sp.y_test, "y_train": y[sp.train_idx], "keep": keep, "fit_rows": fit_rows}
    for part, Xp in (("test", Xte), ("train", Xtr)):
        pp = det.score_parts(Xp)
        res.update({f"blend_{part}": pp.scores, f"net_{part}": pp.network, f"forest_{part}": pp.forest,
                    f"knn_{part}": pp.knn})
    # The library's training distances (a reference row skips itself): what Blend.fit saw.
    res["knn_fit"] = det._fit_neighbours(Xfit, res["net_train"][fit_rows], keep)
    np.savez_compressed(f, **res)
    print(f.stem, f"{time.time() - t0:.0f}s", flush=True)
