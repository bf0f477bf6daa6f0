"""Mean AUC-PR / AUC-ROC of the default with and without noisy-copy scoring, from noisy.py's files (reads labels).

    python3 docs/results/noisy_scoring/report.py NPZ_DIR BASELINE_RESULTS_CSV

BASELINE_RESULTS_CSV: a committed bench results.csv of the same setting and split, for IForest's rows.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import blended, print_ahead_behind, print_variant_table, variant_rows  # noqa: E402


def variants(d) -> dict:
    return {"default": d["blend_test"], "network": d["net_test"],
            "network, mean over noisy copies": d["noisymean_test"],
            "network, geometric mean over noisy copies": d["noisygeo_test"],
            "blend: noisy mean + forest": blended(d, d["noisymean_train"], d["noisymean_test"]),
            "blend: noisy geometric mean + forest": blended(d, d["noisygeo_train"], d["noisygeo_test"])}


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(f"usage: {sys.argv[0]} NPZ_DIR BASELINE_RESULTS_CSV")
    rows = variant_rows(sys.argv[1], sys.argv[2], "iforest", variants)
    print_variant_table(rows)
    for name in ("blend: noisy mean + forest", "blend: noisy geometric mean + forest"):
        print_ahead_behind(rows, name, "default")


if __name__ == "__main__":
    main()
