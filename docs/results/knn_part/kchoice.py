"""Which k the k-NN part reads (issue 11, twenty-seventh pass; diagnosis only).

The ablation of ``score.knn_k``, as ``refsize.py`` ablates ``score.knn_rows``: for each per-row file of
../score_space/scorespace.py (the default's training; the part does not change training) it rebuilds the bench's
split and scaler and scores the larger of three z-scores, the third the distance to the k-th nearest of a seeded
sample of at most 512 rows the trained network keeps, for k in 5, 10 (the default), 20 and 40. Labels feed only the
report.

    python3 docs/results/knn_part/kchoice.py SETTING SPLIT OUT.json NPZ_DIR [NPZ_DIR ...]
    python3 docs/results/knn_part/kchoice.py summary OUT.json [OUT.json ...]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from refsize import three_parts  # noqa: E402
from report import score_cli  # noqa: E402

if __name__ == "__main__":
    score_cli(lambda setting, split, dirs: three_parts(
        setting, split, dirs, [(f"max3 k {k}", 512, k) for k in (5, 10, 20, 40)]))
