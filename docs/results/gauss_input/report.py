"""Mean AUC-PR / AUC-ROC of the default on standardised and on Gaussianised rows, from gauss.py's files (reads labels).

    python3 docs/results/gauss_input/report.py NPZ_DIR BASELINE_RESULTS_CSV [BASELINE_METHOD]

BASELINE_RESULTS_CSV: a committed bench results.csv of the same setting and split, for BASELINE_METHOD's rows
(default iforest). Files of ``GAUSS_METHOD=kdsm`` runs have no forest: their score is the network's.
"""
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import baseline_rows, dataset_seed, npz_files  # noqa: E402

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
    method = sys.argv[3] if len(sys.argv) == 4 else "iforest"
    base = baseline_rows([sys.argv[2]], method)
    rows = {}
    for f in npz_files([sys.argv[1]]):
        d = np.load(f)
        key = dataset_seed(f)
        rows[key] = {k: (ap(d["y_test"], s), roc(d["y_test"], s)) for k, s in variants(d).items()}
        if key in base:
            rows[key][method] = base[key]
    names = list(next(iter(rows.values())))
    print("dataset|seed".ljust(22) + "".join(f"{i}".rjust(14) for i in range(len(names))))
    for (ds, seed), r in sorted(rows.items()):
        print(f"{ds}|{seed}".ljust(22) + "".join(f"{r[n][0]:.3f}/{r[n][1]:.3f}".rjust(14) for n in names if n in r))
    print(f"\n{len(rows)} runs; mean AUC-PR / AUC-ROC (column number: variant)")
    for i, n in enumerate(names):
        m = np.mean([r[n] for r in rows.values() if n in r], 0)
        print(f"{i}: {n:40s} {m[0]:.3f} / {m[1]:.3f}")
    pairs = [(r["score, Gaussianised"], r["score"]) for r in rows.values()]
    print(f"the Gaussianised score ahead of the standardised one on {sum(g[0] > s[0] for g, s in pairs)} (AUC-PR) "
          f"and {sum(g[1] > s[1] for g, s in pairs)} (AUC-ROC) of {len(rows)} runs")


if __name__ == "__main__":
    main()
