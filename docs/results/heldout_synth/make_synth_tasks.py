"""A second set of tasks the default was never tuned on: river's synthetic stream generators (issue 11, target 5).

Built after the twenty-fifth pass named a candidate found by looking at the 26 datasets *and* the 20 held-out tasks of
../heldout/: that candidate needs data that neither choice saw. Each generator's class labels give one task per class,
the class the anomaly, downsampled to 5% of the normal rows (a fixed draw per task), as ../heldout/make_tasks.py does:
Waveform (21 numeric features, 3 classes), RandomRBF (10 features, 5 classes around 50 centroids) and Agrawal
(9 features, some of them integer codes of categories; two labelling functions, 2 classes each). 2,000 rows are drawn
from each generator with fixed seeds. Writes ``<k>_<name>.npz`` (keys X, y; 1 = anomaly) for ``ADBENCH=``.

python3 docs/results/heldout_synth/make_synth_tasks.py OUT_DIR
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "heldout"))
from make_tasks import main, one_task_per_class  # noqa: E402  (../heldout/make_tasks.py: the same task rule)

ROWS = 2000


def _draw(stream) -> tuple[np.ndarray, np.ndarray]:
    rows = list(itertools.islice(stream, ROWS))
    keys = list(rows[0][0])
    return np.array([[float(x[k]) for k in keys] for x, _ in rows]), np.array([str(y) for _, y in rows])


def sources():
    from river.datasets import synth

    yield "waveform", _draw(synth.Waveform(seed=7))
    yield "rbf", _draw(synth.RandomRBF(seed_model=7, seed_sample=8, n_classes=5, n_features=10, n_centroids=50))
    for fn in (1, 4):
        yield f"agrawal{fn}", _draw(synth.Agrawal(classification_function=fn, seed=7))


def tasks():
    """Yield (name, X, y) for every task, deterministic."""
    yield from one_task_per_class(sources(), 2000)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], tasks, Path(__file__).name))
