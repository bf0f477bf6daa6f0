"""The cross-fitted first round against the default, from per-row files (reads labels: report only).

    python3 docs/results/crossfit_rounds/report.py CROSSFIT_DIR DEFAULT_DIR [DEFAULT_DIR ...]

CROSSFIT_DIR: crossfit.py's files; DEFAULT_DIR: variants.py's files of the default for the same dataset-seeds (their
``snap0_train`` is the default's network at its first round, so its in-sample choice of rows can be rebuilt).
Prints, per dataset (mean over its seeds), AUC-PR / AUC-ROC of both scores and the share of anomalies among the
rows each first round keeps, then the means and IForest's, and the share the default's second and third rounds keep.
"""
import glob
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "ablation_snapshots"))
from report import ahead, baseline_rows, dataset_seed, seed_averaged  # noqa: E402

from offline_train.refine import lowest  # noqa: E402

IFOREST = [HERE.parent / "unsup_paper_fast" / "results.csv", HERE.parent / "baselines_seeds12" / "unsup_paper" / "results.csv"]
USAGE = f"usage: {sys.argv[0]} CROSSFIT_DIR DEFAULT_DIR [DEFAULT_DIR ...]"


def default_shares(d) -> list:
    """Anomaly share of the training rows, then of the rows the default keeps at each of its 3 rounds (rebuilt from
    the round snapshots: ``refine.keep`` auto, the forest's estimate at ``threshold`` 0.5, ``max_drop`` 0.5)."""
    keep = 1.0 - min(float(np.mean(d["forest_train"] > 0.5)), 0.5)
    y = d["y_train"]
    return [y.mean()] + [y[lowest(d[f"snap{r}_train"], keep)].mean() for r in (0, 1, 2)]


SHARES = ("all training rows", "default", "default, round 2", "default, round 3")
if len(sys.argv) < 3:
    raise SystemExit(USAGE)
default_files = {dataset_seed(f): f for d in sys.argv[2:] for f in glob.glob(f"{d}/*_unsup_paper_*.npz")}
runs, kept_anomalies = defaultdict(dict), defaultdict(lambda: defaultdict(list))
for f in sorted(glob.glob(f"{sys.argv[1]}/*_unsup_paper_*.npz")):
    key = dataset_seed(f)
    if key not in default_files:
        continue
    c, d = np.load(f), np.load(default_files[key])
    for name, z in (("default", d), ("cross-fitted first round", c)):
        runs[name][key] = (ap(z["y_test"], z["blend_test"]), roc(z["y_test"], z["blend_test"]))
        runs[name + ", network part"][key] = (ap(z["y_test"], z["net_test"]), roc(z["y_test"], z["net_test"]))
    for name, share in zip(SHARES, default_shares(d), strict=True):  # the default's later rounds: where its rows go after the first
        kept_anomalies[name][key[0]].append(share)
    kept_anomalies["cross-fitted first round"][key[0]].append(d["y_train"][c["round1_rows"]].mean())
if not runs:
    raise SystemExit(USAGE + " (no dataset-seed has a per-row file in both)")
runs["IForest"] = {k: v for k, v in baseline_rows(IFOREST).items() if k in runs["default"]}

per_ds = {n: seed_averaged(r) for n, r in runs.items()}
datasets = sorted(per_ds["default"])
print(f"contaminated paper split, {len(datasets)} datasets, {len(runs['default'])} dataset-seeds; AUC-PR / AUC-ROC "
      "(mean over each dataset's seeds); anomaly share: all training rows -> kept by the default's first round -> "
      "kept by the cross-fitted one")
print("| dataset | seeds | default | cross-fitted | IForest | anomaly share of the rows kept |")
print("|---|---|---|---|---|---|")
for ds in datasets:
    share = " -> ".join(f"{np.mean(kept_anomalies[n][ds]):.3f}"
                        for n in ("all training rows", "default", "cross-fitted first round"))
    cells = [f"{per_ds[n][ds][0]:.3f} / {per_ds[n][ds][1]:.3f}" for n in ("default", "cross-fitted first round", "IForest")]
    print(f"| {ds} | {len(kept_anomalies['default'][ds])} | " + " | ".join(cells) + f" | {share} |")
print()
print("| score | mean AUC-PR / AUC-ROC | ahead of the default (PR / ROC) | ahead of IForest (PR / ROC) |")
print("|---|---|---|---|")
for name, r in per_ds.items():
    m = np.mean(list(r.values()), 0)
    vs_default = "" if name == "default" else " / ".join(map(str, ahead(r, per_ds["default"])))
    vs_forest = "" if name == "IForest" else " / ".join(map(str, ahead(r, per_ds["IForest"])))
    print(f"| {name} | {m[0]:.3f} / {m[1]:.3f} | {vs_default} | {vs_forest} |")
for n in (*SHARES, "cross-fitted first round"):
    print(f"mean anomaly share, {n}: {np.mean([np.mean(v) for v in kept_anomalies[n].values()]):.4f}")
every = np.mean([default_shares(np.load(f)) for f in default_files.values()], 0)  # cross-fitted or not
print(f"the default over all {len(default_files)} dataset-seeds of DEFAULT_DIR, mean anomaly share: "
      + ", ".join(f"{n} {v:.4f}" for n, v in zip(("all training rows", "round 1", "round 2", "round 3"), every, strict=True)))
