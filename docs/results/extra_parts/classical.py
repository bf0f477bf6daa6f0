"""Per-row scores of four classical detectors on the bench's splits (issue 11, "Twenty-first pass"; diagnosis only).

ECOD, COPOD and HBOS (PyOD's defaults, as the bench's baselines run them: on the bench's scaler's output) are
fitted on each dataset's training rows and score its training and test rows. ``report.py contaminated`` reads these
files beside the default's own per-row files (``../gauss_input/gauss.py``'s ``raw_*`` scores, the same split and
seed) to try each detector as a third part of the default's score. From the repository root:

    python3 docs/results/extra_parts/classical.py unsup paper 0 runs/classical_unsup
"""
import sys
from pathlib import Path

import numpy as np
from pyod.models.copod import COPOD
from pyod.models.ecod import ECOD
from pyod.models.hbos import HBOS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from perrow import trainings  # noqa: E402

# PCA left out: on the standardised rows of fault and optdigits its scores are infinite (a zero-variance component).
DETECTORS = {"ecod": ECOD, "copod": COPOD, "hbos": HBOS}


def main() -> None:
    if len(sys.argv) != 5:
        raise SystemExit(f"usage: {sys.argv[0]} semi|unsup paper|clean SEED OUT_DIR")
    for f, _, Xtr, Xte, sc, sp, _ in trainings([sys.argv[0], *sys.argv[1:4], "0", "1", sys.argv[4]], False):
        Ztr, Zte = sc.transform(Xtr), sc.transform(Xte)
        res = {"y_test": sp.y_test}
        for name, cls in DETECTORS.items():
            m = cls().fit(Ztr)
            res[f"{name}_train"], res[f"{name}_test"] = m.decision_scores_, m.decision_function(Zte)
        np.savez(f, **res)
        print(f.stem, flush=True)


if __name__ == "__main__":
    main()
