"""The paper's published means over the datasets of a folder: every method of ../shared/reference/*.tsv.

python3 docs/results/baselines_wide/published.py ../shared/data/adbench ../shared/reference > docs/results/baselines_wide/published-26.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

from offline_train.evaluation.report import load_reference
from offline_train.evaluation.runner import short_name


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not Path(argv[0]).is_dir() or not Path(argv[1]).is_dir():
        print(f"usage: {Path(__file__).name} DATA_DIR REFERENCE_DIR (two folders)", file=sys.stderr)
        return 1
    names = sorted(short_name(p.stem).lower() for p in Path(argv[0]).glob("*.npz"))
    if not names:
        print(f"no .npz file in {argv[0]}", file=sys.stderr)
        return 1
    print(f"the paper's figures, mean over the {len(names)} datasets of {argv[0]}")
    for setting in ("unsup", "semi"):
        try:
            ref = load_reference(Path(argv[1]), setting)
        except (OSError, ValueError) as e:
            print(f"cannot read the {setting} tables in {argv[1]}: {type(e).__name__} {e}", file=sys.stderr)
            return 1
        for metric in ("aucpr", "aucroc"):
            table = Path(argv[1]) / f"{setting}_{metric}.tsv"
            if metric not in ref:
                print(f"no reference table {table}", file=sys.stderr)
                return 1
            try:
                means = {m: sum(v[n] for n in names) / len(names) for m, v in ref[metric].items()}
            except KeyError as e:
                print(f"{table} has no figure for dataset {e}", file=sys.stderr)
                return 1
            best = max(means, key=means.get)
            print(f"{setting} {metric}: " + ", ".join(f"{m} {v:.3f}" for m, v in means.items()) + f"  (best: {best})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
