"""Per-row scores of one more training of the default on the same split: an ensemble member (diagnosis only).

The issue's ideas list ensembles over seeds and over noise scales. A member is the default's own code path on the
bench's split and scaler for SEED, trained with seed SEED + MEMBER_SEED_OFFSET (default 1000) and whatever the
environment sets (``KDSM_SIGMA__BASE=1.0`` for a wider noise scale). It saves the network's and the forest's scores
of the training and test rows, for ensemble.py. From the repository root, two workers:

    MEMBER_SEED_OFFSET=1000 python3 docs/results/ensembles/members.py unsup paper 0 0 2 runs/seed1000 &
    MEMBER_SEED_OFFSET=1000 python3 docs/results/ensembles/members.py unsup paper 0 1 2 runs/seed1000

Arguments as ../ablation_snapshots/variants.py (setting, split, seed, worker index, worker count, output folder,
optionally a comma list of dataset stems).
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

settings = TrainSettings()
offset = int(os.environ.get("MEMBER_SEED_OFFSET", "1000"))
for f, seed, Xtr, Xte, sc, sp, y in trainings(sys.argv, settings.data.scale_discrete):
    t0 = time.time()
    det = make_kdsm("default", settings, seed + offset).fit(Xtr, scaler=sc)
    np.savez(f, y_test=sp.y_test, **parts(det, Xtr, Xte))
    print(f.stem, f"{time.time() - t0:.0f}s", flush=True)
