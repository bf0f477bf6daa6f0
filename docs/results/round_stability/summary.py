"""The round-stability statistics of ``stability.py``: clean against contaminated training sets, per dataset.

    python3 docs/results/round_stability/summary.py runs/stab > docs/results/round_stability/summary.txt
"""
import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

STATS = ("jaccard_consecutive", "jaccard_first_last", "spearman_first_last", "out_every_round")


def main(folder: str) -> None:
    runs = {p.stem: json.loads(p.read_text()) for p in Path(folder).glob("*.json")}
    pairs = [(runs[k.replace("_unsup_", "_semi_")], v) for k, v in sorted(runs.items())
             if "_unsup_" in k and k.replace("_unsup_", "_semi_") in runs]
    share = np.array([u["true_share"] for _, u in pairs])
    print(f"{len(pairs)} datasets, paper split, seed 0: each trained on its clean (semi) and contaminated (unsup) "
          "training set; the default's three refinement rounds")
    left = np.array([[c["left_out"][-1], u["left_out"][-1]] for c, u in pairs])
    print(f"left out by the last round: clean {left[:, 0].mean():.3f}, contaminated {left[:, 1].mean():.3f} "
          f"(true share {share.mean():.3f})")
    print(f"{'statistic':22s} {'clean':>6s} {'contam.':>7s}  contaminated above clean  Spearman with the true share"
          "  ROC AUC, contaminated vs clean over all training sets")
    for name in STATS:
        c, u = np.array([p[0][name] for p in pairs]), np.array([p[1][name] for p in pairs])
        auc = roc_auc_score(np.r_[np.zeros(len(c)), np.ones(len(u))], np.r_[c, u])
        print(f"{name:22s} {c.mean():6.3f} {u.mean():7.3f}  {int(np.sum(u > c)):2d} / {len(pairs)}"
              f"                  {spearmanr(u, share)[0]:+.2f}                         {auc:.3f}")


if __name__ == "__main__":
    main(sys.argv[1])
