"""The per-row file loop that variants.py and ../crossfit_rounds/crossfit.py share (diagnosis only).

Arguments of either script: setting, split, seed, worker index, worker count, output folder, optionally a comma list
of dataset stems. ``trainings(argv)`` yields this worker's datasets (largest first, every n-th) that have no file yet,
each with the bench's split and scaler; ``parts(det, Xtr, Xte)`` is the default's score and its two parts on both.
"""
import os
from pathlib import Path

import numpy as np

from offline_train.data import load_npz
from offline_train.evaluation.runner import _prepared, dataset_paths


def trainings(argv, scale_discrete: bool):
    """(out file, seed, train rows, test rows, scaler, split, all labels) per dataset still to do."""
    usage = f"usage: {argv[0]} semi|unsup paper|clean SEED WORKER WORKERS OUT_DIR [DATASET,...]"
    if len(argv) < 7 or argv[1] not in ("semi", "unsup") or argv[2] not in ("paper", "clean"):
        raise SystemExit(usage)
    try:
        setting, split_mode, seed, wi, wn = argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5])
    except ValueError:
        raise SystemExit(usage) from None
    out = Path(argv[6])
    out.mkdir(parents=True, exist_ok=True)
    only = set(argv[7].split(",")) if len(argv) > 7 else None
    paths = [p for p in dataset_paths(Path(os.environ.get("ADBENCH", "../shared/data/adbench")))
             if not only or p.stem in only]
    for p in sorted(paths, key=lambda p: -np.load(p)["X"].size)[wi::wn]:  # largest first, every wn-th to this worker
        f = out / f"{p.stem}_{setting}_{split_mode}_{seed}.npz"
        if f.exists():
            continue
        X, sp, sc = _prepared(p, setting, split_mode, seed, scale_discrete)  # the bench's split and scaler
        y = load_npz(p)[1]  # the training rows' labels, for the report only
        yield f, seed, X[sp.train_idx], X[sp.test_idx], sc, sp, y


def parts(det, Xtr, Xte) -> dict:
    """``blend_``, ``net_`` and ``forest_`` scores of the test and training rows."""
    res = {}
    for part, Xp in (("test", Xte), ("train", Xtr)):
        pp = det.score_parts(Xp)
        res[f"blend_{part}"], res[f"net_{part}"], res[f"forest_{part}"] = pp.scores, pp.network, pp.forest
    return res
