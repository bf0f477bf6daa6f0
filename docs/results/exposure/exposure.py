"""The default with the rows each refinement round leaves out used as exposed outliers (diagnosis only).

Latent outlier exposure (Qiu et al. 2022) in the default's terms: the rows a refinement round leaves out are not only
dropped from the denoising loss, they are pushed to score high. From the first round on, each step also scores a
quarter batch of the left-out rows on the clean row (batch norm on its running statistics, so they never enter its
batch statistics) and adds ``relu(m - log ||f(z)||)``, averaged, to the loss: ``m`` is the log score of the highest
row the round kept, so a left-out row is pushed only while it scores below the round's cut. One setting, not
tuned: weight 1, a quarter batch, the cut as margin. One training per dataset, the bench's split and seed; the
shipped code is patched here only. From the repository root, two workers:

    python3 docs/results/exposure/exposure.py unsup paper 0 0 2 runs/exposure &
    python3 docs/results/exposure/exposure.py unsup paper 0 1 2 runs/exposure

Arguments as ../ablation_snapshots/perrow.py. report.py reads the files.
"""
import sys
import time
from pathlib import Path

import numpy as np
import torch

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from perrow import parts, trainings  # noqa: E402

import offline_train.train as train_module  # noqa: E402
from offline_train import refine as refine_module  # noqa: E402
from offline_train.config import TrainSettings  # noqa: E402
from offline_train.evaluation.methods import make_kdsm  # noqa: E402

WEIGHT, SHARE = 1.0, 0.25


class Exposed:
    """The rows the latest round left out, and the round's cut (log score of the highest kept row)."""

    rows: torch.Tensor | None = None
    Z: torch.Tensor | None = None
    margin = 0.0
    gen = torch.Generator().manual_seed(0)
    rounds: list = []


_round, _loss = refine_module.Refinement.__call__, train_module.dsm_loss


def exposing_round(self, net):
    kept = _round(self, net)
    scores = refine_module.row_scores(net, self._Zt)
    left = np.setdiff1d(np.arange(len(scores)), kept)
    Exposed.rows = torch.as_tensor(left, dtype=torch.long) if len(left) else None
    Exposed.Z = self._Zt
    Exposed.margin = float(np.log(max(scores[kept].max(), 1e-6)))
    Exposed.rounds.append(len(left))
    return kept


def exposing_loss(net, x, sigmas, copies, autocast):
    loss = _loss(net, x, sigmas, copies, autocast)
    if Exposed.rows is None:
        return loss
    k = max(2, int(SHARE * len(x)))
    za = Exposed.Z[Exposed.rows[torch.randint(len(Exposed.rows), (k,), generator=Exposed.gen)]]
    norms = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    for m in norms:
        m.eval()  # running statistics: the left-out rows never enter batch norm's statistics
    with autocast():
        out = net(za)
    for m in norms:
        m.train()
    log_norm = out.float().norm(dim=1).clamp_min(1e-6).log()
    return loss + WEIGHT * torch.relu(Exposed.margin - log_norm).mean()


refine_module.Refinement.__call__ = exposing_round
train_module.dsm_loss = exposing_loss


def main() -> None:
    settings = TrainSettings()
    for f, seed, Xtr, Xte, sc, sp, _ in trainings(sys.argv, settings.data.scale_discrete):
        t0 = time.time()
        Exposed.rows, Exposed.rounds, Exposed.gen = None, [], torch.Generator().manual_seed(seed)
        det = make_kdsm("default", settings, seed).fit(Xtr, scaler=sc)
        np.savez(f, y_test=sp.y_test, left_out=np.asarray(Exposed.rounds), **parts(det, Xtr, Xte))
        print(f.stem, f"{time.time() - t0:.0f}s", Exposed.rounds, flush=True)


if __name__ == "__main__":
    main()
