"""The paper's published means over the datasets of a folder: every method of ../shared/reference/*.tsv.

python3 docs/results/baselines_wide/published.py ../shared/data/adbench ../shared/reference > docs/results/baselines_wide/published-26.txt
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not Path(argv[0]).is_dir() or not Path(argv[1]).is_dir():
        print(f"usage: {Path(__file__).name} DATA_DIR REFERENCE_DIR (two folders)", file=sys.stderr)
        return 1
    names = sorted(re.sub(r"^\d+_", "", p.stem).lower() for p in Path(argv[0]).glob("*.npz"))
    if not names:
        print(f"no .npz file in {argv[0]}", file=sys.stderr)
        return 1
    print(f"the paper's figures, mean over the {len(names)} datasets of {argv[0]}")
    for setting in ("unsup", "semi"):
        for metric in ("aucpr", "aucroc"):
            path = Path(argv[1]) / f"{setting}_{metric}.tsv"
            try:
                rows = {r["dataset"].lower(): r for r in csv.DictReader(path.open(), delimiter="\t")}
                picked = [rows[n] for n in names]
                methods = [c for c in next(iter(rows.values())) if c != "dataset"]
                means = {m: sum(float(r[m]) for r in picked) / len(picked) for m in methods}
            except (OSError, KeyError, ValueError, StopIteration) as e:
                print(f"cannot read {path}: {type(e).__name__} {e}", file=sys.stderr)
                return 1
            best = max(means, key=means.get)
            print(f"{setting} {metric}: " + ", ".join(f"{m} {v:.3f}" for m, v in means.items()) + f"  (best: {best})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
