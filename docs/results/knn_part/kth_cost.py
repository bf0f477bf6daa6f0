"""Why the k-NN part picks its k-th distance with numpy's introselect on CPU (twenty-sixth pass).

Times ``NeighbourScorer`` (blocks of 256 rows: one matrix product, then ``np.partition``) against the same blocks
with torch's ``topk``, batches of 2,000 rows, k 10, 512 and 2,048 reference rows, 6 and 21 features, one torch
thread, the median of 15 rounds after 3 warm-up rounds. Prints one line per case and writes them to OUT.

    python3 docs/results/knn_part/kth_cost.py OUT.txt
"""
import os
import sys
from pathlib import Path

import numpy as np
import torch

from offline_train.neighbours import NeighbourScorer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "part_choice"))
from knn_cost import timed  # noqa: E402

if len(sys.argv) != 2:
    raise SystemExit(f"usage: {sys.argv[0]} OUT.txt")
if not os.path.isdir(os.path.dirname(os.path.abspath(sys.argv[1]))):  # say so before the timing, not after it
    raise SystemExit(f"{sys.argv[0]}: no folder for {sys.argv[1]}")
torch.set_num_threads(1)
rng = np.random.default_rng(0)


def per_row_us(search) -> float:
    return timed(search, 2000, 15)[0]


lines = [f"load average at the start {os.getloadavg()[0]:.2f}; one torch thread; batches of 2000 rows, k 10"]
for d in (6, 21):
    for refs in (512, 2048):
        knn = NeighbourScorer.from_rows(rng.normal(size=(refs, d)), 10)
        x = torch.from_numpy(rng.normal(size=(2000, d)).astype(np.float32))

        def by_topk(knn=knn, x=x):
            out = []
            for z in x.split(256):
                d2 = torch.addmm(knn.reference_sq, z, knn.reference.T, alpha=-2).add_((z * z).sum(1, keepdim=True))
                out.append(d2.clamp_(min=0).topk(knn.k, dim=1, largest=False).values[:, -1])
            return torch.cat(out)
        lines.append(f"{d} features, {refs} references: introselect {per_row_us(lambda knn=knn, x=x: knn(x)):.2f} us a row, "
                     f"topk {per_row_us(by_topk):.2f} us a row")
        print(lines[-1], flush=True)
try:
    with open(sys.argv[1], "w") as fh:
        fh.write("\n".join(lines) + "\n")
except OSError as e:
    raise SystemExit(f"{sys.argv[0]}: cannot write {sys.argv[1]}: {e.strerror or e}") from None
