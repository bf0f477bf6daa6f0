"""Microseconds per row of the exported isolation forest's walk (``IsolationScorer.forward``), one torch thread.

A forest of scikit-learn's default size (100 trees of 256 rows) fitted on 5000 standard-normal rows of ``d``
features scores micro-batches of 2000 rows; the best of 7 timings of 5 batches is printed as one JSON line. Run it
with ``PYTHONPATH`` set to the tree whose ``offline_train`` is timed (``compare.sh`` does, alternating two trees).
"""

import json
import os
import sys
import time

import numpy as np
import torch
from sklearn.ensemble import IsolationForest

from offline_train.isolation import IsolationScorer

torch.set_num_threads(1)
out = {"tree": sys.argv[1] if len(sys.argv) > 1 else "", "load_avg_at_start": os.getloadavg()}
rng = np.random.default_rng(0)
for d in (6, 21):
    scorer = IsolationScorer.from_forest(IsolationForest(random_state=0).fit(rng.normal(size=(5000, d))))
    X = torch.as_tensor(rng.normal(size=(2000, d)), dtype=torch.float32)
    scorer(X)
    best = float("inf")
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(5):
            scorer(X)
        best = min(best, (time.perf_counter() - t0) / 5 / len(X) * 1e6)
    out[f"d={d} us/row"] = round(best, 2)
print(json.dumps(out))
