"""Twelfth pass (docs/contaminated-passes.md): choose between the default's two parts per training set, label-free.

    python3 docs/results/part_selection/part_selection.py DIR [DIR ...]

DIR: per-row npz files of ``../ablation_snapshots/variants.py`` (``<id>_<dataset>_<setting>_<split>_<seed>.npz``,
the default's network and forest scores on the training and test rows). Files are grouped by setting and split.
Each part is standardised over the training rows by the blend's own ``Blend.z_scores`` (the network's score on the log scale). The
forms compared, all decided from the training rows only:

- ``max``: the default (the larger z-score);
- ``sum``: the z-scores summed;
- ``pick skew``: the part whose training z-scores have the larger skewness alone (a part that sees outliers in its
  own training scores has a heavier right tail);
- ``pick kurtosis``, ``pick tail``: the same choice by excess kurtosis, or by the share of training z-scores above 2.5;
- ``skew-weighted sum``: each part weighted by its positive skewness;
- ``skew-weighted max``: the larger z-score after scaling each part by its skewness over the larger skewness.

It reads labels, for this report only. Per setting and split: the mean over datasets of each dataset's mean over
its seeds, AUC-PR / AUC-ROC, then per seed, how often the network is picked, and datasets ahead of the forest part.
"""
import glob
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import kurtosis, skew
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

from offline_train.blend import Blend


def forms(d) -> tuple[dict, bool]:
    """Test scores of each form, and whether the skewness picks the network."""
    blend = Blend.fit(d["net_train"], d["forest_train"])  # the default's standardisation of its two parts
    ntr, ftr = blend.z_scores(d["net_train"], d["forest_train"])
    nte, fte = blend.z_scores(d["net_test"], d["forest_test"])
    sn, sf = skew(ntr), skew(ftr)
    wn, wf = max(sn, 0) + 1e-3, max(sf, 0) + 1e-3
    return {
        "max (the default)": np.maximum(nte, fte),
        "sum": nte + fte,
        "pick skew": nte if sn > sf else fte,
        "pick kurtosis": nte if kurtosis(ntr) > kurtosis(ftr) else fte,
        "pick tail": nte if (ntr > 2.5).mean() > (ftr > 2.5).mean() else fte,
        "skew-weighted sum": (wn * nte + wf * fte) / (wn + wf),
        "skew-weighted max": np.maximum(nte * wn / max(wn, wf), fte * wf / max(wn, wf)),
        "network": nte,
        "forest": fte,
    }, sn > sf


def main(dirs: list[str]) -> int:
    files = sorted(f for d in dirs for f in glob.glob(str(Path(d) / "*.npz")))
    if not files:
        print("part_selection.py: no npz files in " + ", ".join(dirs))
        return 1
    # {(setting, split): {form: {dataset: {seed: (AUC-PR, AUC-ROC)}}}}
    runs = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    picked = defaultdict(list)
    for f in files:
        stem = Path(f).stem.split("_")
        dataset, setting, split, seed = "_".join(stem[1:-3]), stem[-3], stem[-2], int(stem[-1])
        d = np.load(f)
        scores, network = forms(d)
        picked[(setting, split)].append(network)
        for name, s in scores.items():
            runs[(setting, split)][name][dataset][seed] = (ap(d["y_test"], s), roc(d["y_test"], s))
    for key, by_form in sorted(runs.items()):
        seeds = sorted({s for v in by_form["forest"].values() for s in v})
        n = sum(len(v) for v in by_form["forest"].values())
        print(f"\n{key[0]} {key[1]}: {len(by_form['forest'])} datasets, {n} runs (seeds {seeds}); "
              f"the skewness picks the network in {sum(picked[key])} of {n}")
        print("| form | mean | " + " | ".join(f"seed {s}" for s in seeds) + " | ahead of the forest part (PR / ROC) |")
        print("|---|---|" + "---|" * len(seeds) + "---|")
        forest = {ds: np.mean(list(v.values()), 0) for ds, v in by_form["forest"].items()}
        for name, by_ds in by_form.items():
            mean = np.mean([np.mean(list(v.values()), 0) for v in by_ds.values()], 0)
            per_seed = [np.mean([v[s] for v in by_ds.values() if s in v], 0) for s in seeds]
            means = {ds: np.mean(list(v.values()), 0) for ds, v in by_ds.items()}
            wins = [sum(means[ds][i] > forest[ds][i] for ds in means) for i in (0, 1)]
            print(f"| {name} | {mean[0]:.3f} / {mean[1]:.3f} | "
                  + " | ".join(f"{m[0]:.3f} / {m[1]:.3f}" for m in per_seed) + f" | {wins[0]} / {wins[1]} |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} DIR [DIR ...]")
    sys.exit(main(sys.argv[1:]))
