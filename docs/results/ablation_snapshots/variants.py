"""Per-row scores of the default, its EMA teacher and its round snapshots, one training each (diagnosis only).

Saves the labels with the scores, for report.py. From the repository root, two workers:
    python3 docs/results/ablation_snapshots/variants.py unsup paper 0 0 2 runs/snap &
    python3 docs/results/ablation_snapshots/variants.py unsup paper 0 1 2 runs/snap
Arguments: setting, split, seed, worker index, worker count, output folder, optionally a comma list
of dataset stems. ``snapN`` is the network at the N-th refinement round (before it reselects rows):
snap0 at a quarter of the step budget, trained on the warm start's core only. With
KDSM_REFINE__ROUNDS=0 the network trains on the core throughout and is saved at the quarter points.
"""
import copy as _copy
import os
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch

torch.set_num_threads(1)
import offline_train.detector as D
import offline_train.train as T
from offline_train.config import TrainSettings
from offline_train.data import load_npz
from offline_train.evaluation.methods import make_kdsm
from offline_train.evaluation.runner import _prepared, dataset_paths
from offline_train.refine import Refinement

captured = {}
def deepcopy(obj, memo=None):
    c = _copy.deepcopy(obj, memo)
    captured["teacher"] = c
    return c
T.copy = types.SimpleNamespace(deepcopy=deepcopy)

class SnapRefinement(Refinement):
    def __init__(self, config, Z, steps, seed, device="cpu"):
        super().__init__(config, Z, steps, seed, device)
        self.hold = config.rounds == 0  # no rounds: snapshot at the quarter points, keep training on the core
        if self.hold:
            self.at = tuple(int(steps * i / 4) for i in (1, 2, 3))

    def __call__(self, net):
        captured.setdefault("snaps", []).append(_copy.deepcopy(net.state_dict()))
        if self.hold:
            return self.start_rows()
        return super().__call__(net)
D.Refinement = SnapRefinement

setting, split_mode, seed, wi, wn = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
out = Path(sys.argv[6]); out.mkdir(parents=True, exist_ok=True)
only = set(sys.argv[7].split(",")) if len(sys.argv) > 7 else None
paths = [p for p in dataset_paths(Path(os.environ.get("ADBENCH", "../shared/data/adbench"))) if not only or p.stem in only]
settings = TrainSettings()
for p in sorted(paths, key=lambda p: -np.load(p)["X"].size)[wi::wn]:  # largest first, every wn-th to this worker
    f = out / f"{p.stem}_{setting}_{split_mode}_{seed}.npz"
    if f.exists():
        continue
    captured.clear()
    X, sp, sc = _prepared(p, setting, split_mode, seed, settings.data.scale_discrete)  # the bench's split and scaler
    y = load_npz(p)[1]  # the training rows' labels, for the report only
    Xtr, Xte = X[sp.train_idx], X[sp.test_idx]
    t0 = time.time()
    det = make_kdsm("default", settings, seed).fit(Xtr, scaler=sc)
    res = {"y_test": sp.y_test, "y_train": y[sp.train_idx]}
    for part, Xp in (("test", Xte), ("train", Xtr)):
        pp = det.score_parts(Xp)
        res[f"blend_{part}"], res[f"net_{part}"], res[f"forest_{part}"] = pp.scores, pp.network, pp.forest
    final = _copy.deepcopy(det.net_.state_dict())
    states = {}
    if "teacher" in captured:
        tsd = captured["teacher"].state_dict()
        states["teacher"] = {k: (v if ("running" in k or "num_batches" in k) else tsd[k]) for k, v in final.items()}
    for i, s in enumerate(captured.get("snaps", [])):
        states[f"snap{i}"] = s
    for name, sd in states.items():
        det.net_.load_state_dict(sd); det.net_.eval()
        for part, Xp in (("test", Xte), ("train", Xtr)):
            res[f"{name}_{part}"] = det.score_parts(Xp).network
    det.net_.load_state_dict(final)
    np.savez(f, **res)
    print(p.stem, setting, split_mode, seed, f"{time.time()-t0:.0f}s", flush=True)
