"""Per-row scores of the clean-history profile (the bench's ``kdsm``) and of KNN (diagnosis only; "Twenty-first pass").

For each dataset: the published K-DSM (``configs/clean-history.yaml``: no refinement, no teacher, the network's
score alone; the bench's ``kdsm`` method, ``make_kdsm("kdsm", ...)``) trained on the bench's split and scaler, and
PyOD's KNN (``method="largest"``, k 5 as the bench's baseline, and k 10) on the same standardised rows; both score the
training and the test rows. ``report.py clean`` tries KNN as a second part of that profile's score. Arguments as
``../ablation_snapshots/variants.py``; from the repository root, two workers:

    python3 docs/results/extra_parts/kdsm_knn.py semi paper 0 0 2 runs/kdsm_knn &
    python3 docs/results/extra_parts/kdsm_knn.py semi paper 0 1 2 runs/kdsm_knn; wait
"""
import sys
import time
from pathlib import Path

import numpy as np
import torch
from pyod.models.knn import KNN

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from perrow import trainings  # noqa: E402

from offline_train.config import TrainSettings  # noqa: E402
from offline_train.evaluation.methods import make_kdsm  # noqa: E402


def main() -> None:
    settings = TrainSettings()
    for f, seed, Xtr, Xte, sc, sp, _ in trainings(sys.argv, settings.data.scale_discrete):
        t0 = time.time()
        det = make_kdsm("kdsm", settings, seed).fit(Xtr, scaler=sc)
        res = {"y_test": sp.y_test, "kdsm_test": det.decision_function(Xte), "kdsm_train": det.decision_function(Xtr)}
        Ztr, Zte = sc.transform(Xtr), sc.transform(Xte)
        for k in (5, 10):
            m = KNN(n_neighbors=k, method="largest").fit(Ztr)
            res[f"knn{k}_train"], res[f"knn{k}_test"] = m.decision_scores_, m.decision_function(Zte)
        np.savez(f, **res)
        print(f.stem, f"{time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
