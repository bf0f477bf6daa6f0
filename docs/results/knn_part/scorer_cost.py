"""Scorer-only rows/s with and without the k-NN part (issue 11, target 4; twenty-sixth pass).

``kdsm bench stream``'s model (512x6 on 6 features) and the ``fast`` profile's network on 21 features (256x6), each
trained as ``streamer.dev.bench_fixtures.bench_model`` trains it but with ``score.knn`` on (512 reference rows, k 10),
then scored three ways in the same process, one torch thread, micro-batches of 2000 rows from a worker thread as the
stream scores them (``streamer.dev.bench_stream._scorer_only``): the network alone, the default's blend (network and
forest) and the blend with the k-NN part. Best of three rounds; writes the JSON to OUT.

    python3 docs/results/knn_part/scorer_cost.py OUT.json
"""
import json
import os
import sys

import numpy as np
import torch

from offline_train.blend import Blend
from offline_train.config import ModelConfig, OptimConfig, ScoreConfig
from offline_train.detector import KDSM
from streamer.dev.bench_stream import _scorer_only

if len(sys.argv) != 2:
    raise SystemExit(f"usage: {sys.argv[0]} OUT.json")
if not os.path.isdir(os.path.dirname(os.path.abspath(sys.argv[1]))):  # say so before the timing, not after it
    raise SystemExit(f"{sys.argv[0]}: no folder for {sys.argv[1]}")
torch.set_num_threads(1)
out = {"load_avg_at_start": os.getloadavg(), "cpu_threads": 1, "batch": 2000}
for d, width, depth in ((6, 512, 6), (21, 256, 6)):
    train = np.random.default_rng(0).normal(size=(4000, d))  # bench_model's data and seed
    m = KDSM(model=ModelConfig(width=width, depth=depth), train=OptimConfig(steps=20, device="cpu", seed=0),
             score=ScoreConfig(knn=True)).fit(train)
    X = np.random.default_rng(1).normal(size=(60000, d))
    forest, neighbours, blend3 = m.forest_, m.neighbours_, m.blend_
    blend2 = Blend(blend3.network_mean, blend3.network_std, blend3.forest_mean, blend3.forest_std)
    forms = {"network only": (None, None, None), "blend (default)": (forest, None, blend2),
             "blend + k-NN part": (forest, neighbours, blend3)}
    res = {}
    for _ in range(3):
        for name, parts in forms.items():
            m.forest_, m.neighbours_, m.blend_ = parts
            res.setdefault(name, []).append(_scorer_only(m, X, 2000, repeats=2))
    row = {k: round(max(v)) for k, v in res.items()}
    row["reference rows"] = int(neighbours.reference.shape[0])
    row["k-NN / network"] = round(row["blend + k-NN part"] / row["network only"], 3)
    row["blend / network"] = round(row["blend (default)"] / row["network only"], 3)
    out[f"{width}x{depth}, d={d}"] = row
    print(json.dumps({f"{width}x{depth}, d={d}": row}), flush=True)
out["load_avg_at_end"] = os.getloadavg()
with open(sys.argv[1], "w") as fh:
    json.dump(out, fh, indent=1)
