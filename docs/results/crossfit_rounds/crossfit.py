"""Cross-fitted first refinement round (diagnosis only; reads labels for the report, never for a decision).

The default's first refinement round (a quarter of the step budget) asks the network which training rows look
normal, but the network has trained on those rows: on the paper split a small dataset is resampled to 1000 rows,
so each anomaly appears several times and the network memorises it. Here that one decision is made out of fold:
the rows are split into two folds that keep identical rows together, an auxiliary network (same architecture,
same hyperparameters, a fresh initialisation) learns each fold's share of the warm start's core for the same
quarter budget, and each row is ranked by the network that never saw it (ranks within the fold, so the two
networks' scales need not agree). The main network then goes on as in the default (later rounds in-sample).
Cost: two more quarter-budget trainings (+50% training steps).

Writes variants.py's per-row format (blend, net and forest parts on the test and training rows), so report.py and
ablation26.py read it. From the repository root, two workers:
    python3 docs/results/crossfit_rounds/crossfit.py unsup paper 0 0 2 runs/crossfit &
    python3 docs/results/crossfit_rounds/crossfit.py unsup paper 0 1 2 runs/crossfit
Arguments: setting, split, seed, worker index, worker count, output folder, optionally a comma list of dataset stems.
"""
import copy
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import rankdata

torch.set_num_threads(1)
import offline_train.detector as D  # noqa: E402
from offline_train.config import TrainSettings  # noqa: E402
from offline_train.evaluation.methods import make_kdsm  # noqa: E402
from offline_train.refine import Refinement, lowest, row_scores  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ablation_snapshots"))
from perrow import parts, trainings  # noqa: E402

train_kwargs, first_round = {}, {}
_train = D.train_score_net


def recording_train(Z, sigmas, net, **kw):
    train_kwargs.update(Z=Z, sigmas=sigmas, kw=kw)
    return _train(Z, sigmas, net, **kw)


D.train_score_net = recording_train


def folds_of(Z: np.ndarray, seed: int) -> np.ndarray:
    """0/1 fold of each row; identical rows share a fold (the paper split's resampled copies)."""
    _, group = np.unique(Z, axis=0, return_inverse=True)
    return np.random.default_rng(seed).permutation(group.max() + 1)[group.ravel()] % 2


class CrossFitRefinement(Refinement):
    def __call__(self, net):
        if self.rounds_:  # later rounds: in-sample, as in the default
            return super().__call__(net)
        Z, kw = train_kwargs["Z"], dict(train_kwargs["kw"])
        fold = folds_of(Z, kw["seed"])
        core = np.zeros(len(Z), bool)
        core[self.start_rows() if self.start_rows() is not None else slice(None)] = True
        rank = np.empty(len(Z))
        rng_state = torch.get_rng_state()  # the main network's noise stream goes on as if nothing happened
        for f in (0, 1):
            aux = copy.deepcopy(net)
            for m in aux.modules():
                if m is not aux and hasattr(m, "reset_parameters"):
                    m.reset_parameters()
            kw.update(steps=self.at[0], rows=np.flatnonzero(core & (fold != f)), reselect=None, reselect_at=(),
                      progress=False, on_log=None, seed=kw["seed"] + 1 + f)
            _train(Z, train_kwargs["sigmas"], aux, **kw)
            aux.eval()
            held = fold == f
            rank[held] = rankdata(row_scores(aux, self._Zt[torch.as_tensor(held)])) / held.sum()
        torch.set_rng_state(rng_state)
        rows = lowest(rank, self.keep_)
        self.rounds_.append({"kept": round(len(rows) / len(Z), 4), "crossfit": True})
        first_round["rows"] = rows
        return rows


D.Refinement = CrossFitRefinement

if __name__ == "__main__":
    settings = TrainSettings()
    for f, seed, Xtr, Xte, sc, sp, y in trainings(sys.argv, settings.data.scale_discrete):
        t0 = time.time()
        det = make_kdsm("default", settings, seed).fit(Xtr, scaler=sc)
        res = {"y_test": sp.y_test, "y_train": y[sp.train_idx], "round1_rows": first_round.pop("rows")}
        np.savez(f, **res, **parts(det, Xtr, Xte))
        print(f.stem, f"{time.time() - t0:.0f}s", det.train_summary_.refine, flush=True)
