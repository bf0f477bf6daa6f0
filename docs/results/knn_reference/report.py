"""The blend with each k-NN reference shape of ``reference.py``, reported through ``../part_combination/combine.py``.

Every blend is fitted on the training rows ``fit`` trained on (labels feed only the report): the network's and the
forest's stored parts and the rebuilt k-NN part of the shape (R reference rows, k-th nearest).

    python3 docs/results/knn_reference/report.py OUT.json RESULTS.csv[,RESULTS.csv ...] DIR [DIR ...]
"""
import json
import sys
from pathlib import Path

import numpy as np
from reference import SHAPES

from offline_train.blend import Blend

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "part_combination"))
import combine  # noqa: E402


def blend(rows, k):
    def score(d):
        m = d["fit_rows"]
        return Blend.fit(d["net_train"][m], d["forest_train"][m], d[f"knn_{rows}_{k}_fit"])(
            d["net_test"], d["forest_test"], d[f"knn_{rows}_{k}_test"])
    return score


VARIANTS = {"the default's stored score": lambda d: d["blend_test"]}
VARIANTS.update({f"blend, R {rows}, k {k}": blend(rows, k) for rows, k in SHAPES})
VARIANTS.update({f"k-NN alone, R {rows}, k {k}": (lambda r, kk: lambda d: d[f"knn_{r}_{kk}_test"])(rows, k)
                 for rows, k in SHAPES})

BASE, WIDE = "blend, R 512, k 10", "blend, R 2048, k 10"


def main(argv):
    combine.main(argv, VARIANTS)
    per = json.loads(Path(argv[1]).read_text()).values()
    m = {name: {ds: np.mean([v[name] for v in per if v["dataset"] == ds], 0) for ds in {v["dataset"] for v in per}}
         for name in (BASE, WIDE)}
    print(f"\nper dataset where they differ, AUC-PR / AUC-ROC: {BASE} (the default) -> {WIDE}")
    for ds in sorted(m[BASE], key=lambda ds: m[WIDE][ds][0] - m[BASE][ds][0]):
        if np.abs(m[WIDE][ds] - m[BASE][ds]).max() >= 5e-4:
            print(f"{ds:22s} {m[BASE][ds][0]:.3f} / {m[BASE][ds][1]:.3f} -> {m[WIDE][ds][0]:.3f} / {m[WIDE][ds][1]:.3f}"
                  f"   {m[WIDE][ds][0] - m[BASE][ds][0]:+.3f}")


if __name__ == "__main__":
    main(sys.argv)
