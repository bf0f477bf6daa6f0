"""An upper bound for any choice between score parts: per run, the better part's AUC, picked with the labels.

Reads the per-run JSON files of knncore.py or forestcore.py ({"dataset|seed": {variant: [AUC-PR, AUC-ROC]}}) and
prints, for each set of parts, the mean over datasets (each dataset's mean over its seeds) of the per-run maximum of
each metric over the parts. No label-free rule that *selects* one part per training set can beat it; a blend can,
where it beats both parts on one run, which the blends measured mostly do not.

    python3 docs/results/forest_core/oracle.py JSON [JSON ...] --parts PART [PART ...] [--parts PART ...]
"""
import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import read_runs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--parts", nargs="+", action="append", required=True)
    a = ap.parse_args()
    runs = read_runs(a.files)
    missing = sorted({p for v in runs.values() for parts in a.parts for p in parts if p not in v})
    if missing:
        raise SystemExit(f"{sys.argv[0]}: no part {', '.join(map(repr, missing))} in every run")
    print(f"{len(runs)} runs; mean AUC-PR / AUC-ROC of the per-run best part (labels pick it: a bound, not a detector)")
    for parts in a.parts:
        by = defaultdict(list)
        for key, v in runs.items():
            by[key.split("|")[0]].append([max(v[p][i] for p in parts) for i in (0, 1)])
        pr, rc = np.mean([np.mean(m, 0) for m in by.values()], 0)
        print(f"best of {' | '.join(parts)}: {pr:.3f} / {rc:.3f} ({len(by)} datasets)")


if __name__ == "__main__":
    main()
