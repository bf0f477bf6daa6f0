"""Mean AUC-PR / AUC-ROC of the default with the bench's scaler and with the core's, from core.py's and
../gauss_input/gauss.py's files of the same runs (reads labels).

    python3 docs/results/core_scaler/report.py CORE_NPZ_DIR GAUSS_NPZ_DIR BASELINE_RESULTS_CSV [BASELINE_METHOD]

BASELINE_RESULTS_CSV: a committed bench results.csv of the same setting and split, for BASELINE_METHOD's rows
(default iforest).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import print_ahead_behind, print_variant_table, variant_rows  # noqa: E402


def variants(d) -> dict:
    return {"score": d["raw_blend_test"], "score, core scaler": d["core_blend_test"],
            "network": d["raw_net_test"], "network, core scaler": d["core_net_test"]}


def main() -> None:
    if len(sys.argv) not in (4, 5):
        raise SystemExit(f"usage: {sys.argv[0]} CORE_NPZ_DIR GAUSS_NPZ_DIR BASELINE_RESULTS_CSV [BASELINE_METHOD]")
    rows = variant_rows(sys.argv[1], sys.argv[3], sys.argv[4] if len(sys.argv) == 5 else "iforest", variants,
                        also=sys.argv[2])
    print_variant_table(rows)
    print_ahead_behind(rows, "score, core scaler", "score")
    print_ahead_behind(rows, "network, core scaler", "network")


if __name__ == "__main__":
    main()
