"""Are the rows each refinement round leaves out the same from round to round? (issue 11, diagnosis only).

If anomalies in the history stay out round after round while a clean history's tail drifts in and out, how stable
the left-out set is would tell contaminated history from clean. This trains the default (``make_kdsm("default")``,
the library's code path) once per dataset with the bench's split and scaler, records each refinement round's row
scores and the rows it keeps (by wrapping ``offline_train.refine``), and saves per training: the Jaccard overlap of
the left-out sets of consecutive rounds and of the first and last, the Spearman correlation of the first and last
round's scores, the share of the last round's left-out rows that every round left out, and the true contamination
share of the training rows (labels give only that share).
From the repository root, two one-thread workers per setting:
    for w in 0 1; do python3 docs/results/round_stability/stability.py unsup paper 0 $w 2 runs/stab & done; wait
    for w in 0 1; do python3 docs/results/round_stability/stability.py semi paper 0 $w 2 runs/stab & done; wait
then ``summary.py runs/stab``. Arguments: those of ``../ablation_snapshots/perrow.py``.
"""
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from perrow import trainings  # noqa: E402

import offline_train.refine as refine  # noqa: E402
from offline_train.config import TrainSettings  # noqa: E402
from offline_train.evaluation.methods import make_kdsm  # noqa: E402

scores_log, rows_log = [], []
_row_scores, _call = refine.row_scores, refine.Refinement.__call__


def _logged_scores(net, Z, chunk=65536):
    s = _row_scores(net, Z, chunk)
    scores_log.append(s)
    return s


def _logged_call(self, net):
    rows = _call(self, net)
    rows_log.append(np.asarray(rows))
    return rows


refine.row_scores, refine.Refinement.__call__ = _logged_scores, _logged_call


def jaccard(a: set, b: set) -> float:
    return len(a & b) / max(1, len(a | b))


settings = TrainSettings()
for f, seed, Xtr, Xte, sc, sp, y in trainings(sys.argv, settings.data.scale_discrete):
    t0 = time.time()
    scores_log.clear()
    rows_log.clear()
    make_kdsm("default", settings, seed).fit(Xtr, scaler=sc)  # the rounds are logged by the wrappers above
    n = len(scores_log[0])
    out = [set(range(n)) - set(r.tolist()) for r in rows_log]  # the rows each round leaves out
    res = {"dataset": f.stem, "rows": n, "rounds": len(out), "left_out": [len(o) / n for o in out],
           "true_share": float(np.mean(y[sp.train_idx])),
           "jaccard_consecutive": float(np.mean([jaccard(a, b) for a, b in zip(out[:-1], out[1:], strict=True)])),
           "jaccard_first_last": jaccard(out[0], out[-1]),
           "spearman_first_last": float(spearmanr(scores_log[0], scores_log[-1])[0]),
           "out_every_round": len(set.intersection(*out)) / max(1, len(out[-1]))}
    f.with_suffix(".json").write_text(json.dumps(res))
    print(f.stem, f"{time.time() - t0:.0f}s", json.dumps({k: v for k, v in res.items() if k != "dataset"}), flush=True)
