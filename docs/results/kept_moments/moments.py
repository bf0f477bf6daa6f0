"""The blend's moments over the rows the default keeps, instead of every training row (issue 11, forty-first pass).

Reads per-row files of ``../score_space/scorespace.py``. The default standardises each of its three parts by the mean and standard
deviation over every training row, anomalies of contaminated history included: a part that separates those anomalies
well has its spread widened by them, so its z-scores shrink exactly where it sees most. The variant, fixed before any
run, takes each part's moments over the kept rows instead (the ``keep`` share the trained network scores lowest: the
pool the k-NN part's reference is drawn from), the same rows for all three parts. Everything is fitted on training
rows alone; labels feed only the report. ``../part_combination/combine.py`` does the reading and the report (each
dataset averaged over its seeds, issue 11's protocol; datasets above IForest's committed bench rows); this adds the
per-dataset change in AUC-PR.

    python3 docs/results/kept_moments/moments.py OUT.json RESULTS.csv[,RESULTS.csv ...] DIR [DIR ...]
"""
import json
import sys
from pathlib import Path

import numpy as np

from offline_train.blend import Blend
from offline_train.refine import lowest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "part_combination"))
import combine  # noqa: E402


def parts(d, rows: str):
    """(network, forest, k-NN) scores of the test rows, or of the training rows ``fit`` trained on."""
    if rows == "test":
        return d["net_test"], d["forest_test"], d["knn_test"]
    m = d["fit_rows"]
    return d["net_train"][m], d["forest_train"][m], d["knn_fit"]


def blend_over(d, which: str) -> np.ndarray:
    train = parts(d, "train")
    if which == "kept":
        kept = lowest(train[0], float(d["keep"]))
        train = tuple(p[kept] for p in train)
    return Blend.fit(*train)(*parts(d, "test"))


ALL, KEPT = "moments over every training row", "moments over the kept rows"
VARIANTS = {
    "the default's stored score": lambda d: d["blend_test"],
    ALL: lambda d: blend_over(d, "all"),
    KEPT: lambda d: blend_over(d, "kept"),
    "network alone": lambda d: d["net_test"],
    "forest alone": lambda d: d["forest_test"],
    "k-NN alone": lambda d: d["knn_test"],
}


def main(argv):
    if len(argv) < 4:
        raise SystemExit(__doc__.strip().splitlines()[-1].strip())
    combine.main(argv, VARIANTS)
    per = json.loads(Path(argv[1]).read_text()).values()
    m = {name: {ds: np.mean([v[name] for v in per if v["dataset"] == ds], 0) for ds in {v["dataset"] for v in per}}
         for name in (ALL, KEPT)}
    print(f"\nper dataset, AUC-PR / AUC-ROC: {ALL} -> {KEPT}")
    for ds in sorted(m[ALL], key=lambda ds: m[KEPT][ds][0] - m[ALL][ds][0]):
        print(f"{ds:22s} {m[ALL][ds][0]:.3f} / {m[ALL][ds][1]:.3f} -> {m[KEPT][ds][0]:.3f} / {m[KEPT][ds][1]:.3f}   "
              f"{m[KEPT][ds][0] - m[ALL][ds][0]:+.3f}")


if __name__ == "__main__":
    try:
        main(sys.argv)
    except (OSError, KeyError, ValueError) as e:
        raise SystemExit(f"{Path(sys.argv[0]).name}: {e}") from None
