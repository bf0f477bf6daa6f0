"""Mean AUC-PR / AUC-ROC of the default on standardised and on Gaussianised rows, from gauss.py's files (reads labels).

    python3 docs/results/gauss_input/report.py NPZ_DIR BASELINE_RESULTS_CSV [BASELINE_METHOD]

BASELINE_RESULTS_CSV: a committed bench results.csv of the same setting and split, for BASELINE_METHOD's rows
(default iforest). Files of ``GAUSS_METHOD=kdsm`` runs have no forest: their score is the network's.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import print_ahead_behind, print_variant_table, variant_rows  # noqa: E402

from offline_train.blend import Blend  # noqa: E402


def variants(d) -> dict:
    v = {"score": d["raw_blend_test"], "score, Gaussianised": d["gauss_blend_test"]}
    if "raw_forest_train" in d:
        v.update({"network": d["raw_net_test"], "network, Gaussianised": d["gauss_net_test"],
                  "Gaussianised network + standard forest": Blend.fit(d["gauss_net_train"], d["raw_forest_train"])(
                      d["gauss_net_test"], d["raw_forest_test"])})
    return v


def main() -> None:
    if len(sys.argv) not in (3, 4):
        raise SystemExit(f"usage: {sys.argv[0]} NPZ_DIR BASELINE_RESULTS_CSV [BASELINE_METHOD]")
    rows = variant_rows(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else "iforest", variants)
    print_variant_table(rows)
    print_ahead_behind(rows, "score, Gaussianised", "score")


if __name__ == "__main__":
    main()
