"""Per-row scores of the default with the network's score averaged over noisy copies of each row (diagnosis only).

The network learns from rows with noise of its per-feature scales (``sigmas_``) added; its score is read on the
clean row. Here, besides the shipped score, each row (training and test) is also scored as the mean of
``||f(z + sigma * e)||`` over K draws of standard normal e (the same scales it trained at, K = 8, a fixed
generator), and as the geometric mean of the same. One training per dataset, the bench's split and seed. From the
repository root, two workers:

    python3 docs/results/noisy_scoring/noisy.py unsup paper 0 0 2 runs/noisy &
    python3 docs/results/noisy_scoring/noisy.py unsup paper 0 1 2 runs/noisy

Arguments as ../ablation_snapshots/variants.py. report.py reads the files.
"""
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

DRAWS = 8


@torch.no_grad()
def noisy_norms(det, X: np.ndarray, seed: int) -> np.ndarray:
    """(DRAWS, rows) network score norms of X's rows with the training noise added, in eval mode."""
    det.net_.eval()
    z = torch.from_numpy(det.standardise(X).astype(np.float32))
    sig = torch.from_numpy(np.asarray(det.sigmas_, np.float32))
    g = torch.Generator().manual_seed(seed)
    return np.stack([det.net_(z + sig * torch.randn(z.shape, generator=g)).double().norm(dim=1).numpy()
                     for _ in range(DRAWS)])


def main() -> None:
    settings = TrainSettings()
    for f, seed, Xtr, Xte, sc, sp, _ in trainings(sys.argv, settings.data.scale_discrete):
        t0 = time.time()
        det = make_kdsm("default", settings, seed).fit(Xtr, scaler=sc)
        res = {"y_test": sp.y_test, **parts(det, Xtr, Xte)}
        for part, Xp, s in (("train", Xtr, 1), ("test", Xte, 2)):
            n = noisy_norms(det, Xp, 1000 * seed + s)
            res[f"noisymean_{part}"] = n.mean(0)
            res[f"noisygeo_{part}"] = np.exp(np.log(n + 1e-12).mean(0))
        np.savez(f, **res)
        print(f.stem, f"{time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
