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
import sys
import time
import types

import numpy as np
import torch

torch.set_num_threads(1)
from perrow import parts, trainings

import offline_train.detector as D
import offline_train.train as T
from offline_train.config import TrainSettings
from offline_train.evaluation.methods import make_kdsm
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

settings = TrainSettings()
for f, seed, Xtr, Xte, sc, sp, y in trainings(sys.argv, settings.data.scale_discrete):
    captured.clear()
    t0 = time.time()
    det = make_kdsm("default", settings, seed).fit(Xtr, scaler=sc)
    res = {"y_test": sp.y_test, "y_train": y[sp.train_idx], **parts(det, Xtr, Xte)}
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
    print(f.stem, f"{time.time()-t0:.0f}s", flush=True)
