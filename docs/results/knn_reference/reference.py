"""The k-NN part's reference size (``score.knn_rows``) and k, rebuilt from per-row files (issue 11, forty-second pass).

Reads per-row files of ``../score_space/scorespace.py`` (the default's network, forest and k-NN parts on training and
test rows, the rows ``fit`` trained on and the keep share). For each file it rebuilds the k-NN part as the library
does (``offline_train.neighbours``: a seeded sample of at most R of the ``keep`` share of training rows the trained
network finds most normal, each row's distance to its k-th nearest, a reference row skipping itself) for each
(R, k) of ``SHAPES``, on the bench's split and scaler, and writes the original arrays plus ``knn_R_k_fit`` and
``knn_R_k_test`` to OUT_DIR. The first shape is the default's (512, 10): its rebuild must equal the stored part,
which the script checks. Labels are never read here.

    python3 docs/results/knn_reference/reference.py OUT_DIR DIR [DIR ...]
"""
import os
import sys
from pathlib import Path

import numpy as np
import torch

from offline_train.config import TrainSettings
from offline_train.detector import Z_BOUND
from offline_train.evaluation.runner import _prepared, dataset_paths
from offline_train.neighbours import NeighbourScorer, reference_rows
from offline_train.refine import lowest

torch.set_num_threads(1)
SHAPES = [(512, 10), (2048, 10), (2048, 40), (8192, 10), (8192, 160)]


def rebuild(Ztr, Zte, d, rows, k, seed):
    fit = d["fit_rows"]
    core = lowest(d["net_train"][fit], float(d["keep"]))
    ref = reference_rows(core, rows, seed)
    Zfit = torch.from_numpy(Ztr[fit])
    knn = NeighbourScorer.from_rows(Zfit.numpy()[ref], k)
    return knn.training_distances(Zfit, ref).numpy(), knn(torch.from_numpy(Zte)).numpy()


def main(argv):
    if len(argv) < 3:
        raise SystemExit(__doc__.strip().splitlines()[-1].strip())
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    paths = {p.stem: p for p in dataset_paths(Path(os.environ.get("ADBENCH", "../shared/data/adbench")))}
    scale_discrete = TrainSettings().data.scale_discrete
    for f in sorted(p for dd in argv[2:] for p in Path(dd).glob("*.npz")):
        dst = out / f.name
        if dst.exists():
            continue
        stem, setting, split, seed = f.stem.rsplit("_", 3)
        X, sp, sc = _prepared(paths[stem], setting, split, int(seed), scale_discrete)
        Ztr, Zte = (np.clip(sc.transform(X[i]), -Z_BOUND, Z_BOUND).astype(np.float32)
                    for i in (sp.train_idx, sp.test_idx))
        d = dict(np.load(f))
        for rows, k in SHAPES:
            fit_d, test_d = rebuild(Ztr, Zte, d, rows, k, int(seed))
            d[f"knn_{rows}_{k}_fit"], d[f"knn_{rows}_{k}_test"] = fit_d, test_d
        err = max(np.abs(d["knn_512_10_fit"] - d["knn_fit"]).max(), np.abs(d["knn_512_10_test"] - d["knn_test"]).max())
        if err > 1e-3:
            raise SystemExit(f"{f.name}: the default's k-NN part rebuilt differs from the stored one by {err:.2g}")
        np.savez_compressed(dst, **d)
        print(f.stem, f"rebuilt within {err:.1e}", flush=True)


if __name__ == "__main__":
    main(sys.argv)
