"""Mean AUC-PR / AUC-ROC of the default with and without noisy-copy scoring, from noisy.py's files (reads labels).

    python3 docs/results/noisy_scoring/report.py NPZ_DIR BASELINE_RESULTS_CSV

BASELINE_RESULTS_CSV: a committed bench results.csv of the same setting and split, for IForest's rows.
"""
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import baseline_rows, blended, dataset_seed, npz_files  # noqa: E402


def variants(d) -> dict:
    return {"default": d["blend_test"], "network": d["net_test"],
            "network, mean over noisy copies": d["noisymean_test"],
            "network, geometric mean over noisy copies": d["noisygeo_test"],
            "blend: noisy mean + forest": blended(d, d["noisymean_train"], d["noisymean_test"]),
            "blend: noisy geometric mean + forest": blended(d, d["noisygeo_train"], d["noisygeo_test"])}


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(f"usage: {sys.argv[0]} NPZ_DIR BASELINE_RESULTS_CSV")
    base = baseline_rows([sys.argv[2]])
    rows = {}
    for f in npz_files([sys.argv[1]]):
        d = np.load(f)
        key = dataset_seed(f)
        rows[key] = {k: (ap(d["y_test"], s), roc(d["y_test"], s)) for k, s in variants(d).items()}
        if key in base:
            rows[key]["iforest"] = base[key]
    names = list(next(iter(rows.values())))
    print("dataset|seed".ljust(22) + "".join(f"{i}".rjust(14) for i in range(len(names))))
    for (ds, seed), r in sorted(rows.items()):
        print(f"{ds}|{seed}".ljust(22) + "".join(f"{r[n][0]:.3f}/{r[n][1]:.3f}".rjust(14) for n in names if n in r))
    print(f"\n{len(rows)} runs; mean AUC-PR / AUC-ROC (column number: variant)")
    for i, n in enumerate(names):
        m = np.mean([r[n] for r in rows.values() if n in r], 0)
        print(f"{i}: {n:44s} {m[0]:.3f} / {m[1]:.3f}")
    for n in names[4:6]:
        pairs = [(r[n], r["default"]) for r in rows.values()]
        ahead = [sum(round(a[i], 3) > round(b[i], 3) for a, b in pairs) for i in (0, 1)]
        behind = [sum(round(a[i], 3) < round(b[i], 3) for a, b in pairs) for i in (0, 1)]
        print(f"{n}: ahead of / behind the default (3 decimals) on {ahead[0]} / {behind[0]} (AUC-PR) and "
              f"{ahead[1]} / {behind[1]} (AUC-ROC) of {len(rows)} runs")


if __name__ == "__main__":
    main()
