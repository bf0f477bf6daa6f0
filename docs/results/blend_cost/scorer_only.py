"""Scorer-only rows/s of kdsm bench stream's model (512x6, 6 features) and a cardio-sized one (21 features), blend on vs off, same process."""
import json
import os

import numpy as np
import torch

torch.set_num_threads(1)
from streamer.dev.bench_fixtures import bench_model
from streamer.dev.bench_stream import _scorer_only

out = {"load_avg_at_start": os.getloadavg(), "cpu_threads": 1}
for d, width, depth in ((6, 512, 6), (21, 256, 6)):
    m = bench_model(d, width, depth, "cpu")
    X = np.random.default_rng(0).normal(size=(60000, d))
    forest, blend = m.forest_, m.blend_
    res = {}
    for rnd in range(3):
        for name in ("network only", "blend (default)"):
            m.forest_, m.blend_ = (None, None) if name == "network only" else (forest, blend)
            res.setdefault(name, []).append(_scorer_only(m, X, 2000, repeats=2))
    out[f"{width}x{depth}, d={d}"] = {k: round(max(v)) for k, v in res.items()}
    out[f"{width}x{depth}, d={d}"]["ratio"] = round(max(res["blend (default)"]) / max(res["network only"]), 3)
    print(json.dumps(out), flush=True)
out["load_avg_at_end"] = os.getloadavg()
print(json.dumps(out, indent=1))
