"""Ways of combining the default's three parts (issue 11, thirtieth pass; diagnosis only).

Reads per-row files of ``../score_space/scorespace.py`` (the default's score and parts on training and test rows).

Every combination is fitted on the training rows' part scores alone (labels feed only the report). Each dataset's
figures are averaged over the seeds its files have (issue 11's protocol: seed 0 everywhere, seeds 1-2 on the small
datasets), then the datasets. Prints, per variant, mean AUC-PR / AUC-ROC and on how many datasets it is above
IForest's committed bench rows of the same split and seeds (3 decimals), and writes every file's figures to a JSON file.

    python3 docs/results/part_combination/combine.py OUT.json RESULTS.csv[,RESULTS.csv ...] DIR [DIR ...]
"""
import csv
import json
import sys
from pathlib import Path

import numpy as np
from scipy.special import log_ndtr
from sklearn.metrics import average_precision_score, roc_auc_score

TINY = 1e-12


def z_parts(d, part):
    """Each part's z-score by its training rows' mean and standard deviation (the network's on the log scale)."""
    out = []
    for name, f in (("net", lambda a: np.log(a + TINY)), ("forest", lambda a: a), ("knn", lambda a: a)):
        tr, te = f(d[f"{name}_train"].astype(float)), f(d[f"{name}_{part}"].astype(float))
        out.append((te - tr.mean()) / (tr.std() + TINY))
    return np.stack(out)


def robust_z(d, part):
    out = []
    for name, f in (("net", lambda a: np.log(a + TINY)), ("forest", lambda a: a), ("knn", lambda a: a)):
        tr, te = f(d[f"{name}_train"].astype(float)), f(d[f"{name}_{part}"].astype(float))
        med = np.median(tr)
        mad = np.median(np.abs(tr - med)) * 1.4826 + TINY
        out.append((te - med) / mad)
    return np.stack(out)


def emp_tail(d, part):
    """-log of each part's empirical tail probability among the training rows, (1 + #train >= s) / (n + 1)."""
    out = []
    for name in ("net", "forest", "knn"):
        tr = np.sort(d[f"{name}_train"].astype(float))
        n = len(tr)
        ge = n - np.searchsorted(tr, d[f"{name}_{part}"].astype(float), side="left")
        out.append(-np.log((1 + ge) / (n + 1)))
    return np.stack(out)


VARIANTS = {
    "the default's stored score": lambda d: d["blend_test"],
    "max z (the default, rebuilt)": lambda d: z_parts(d, "test").max(0),
    "Fisher, Gaussian tails": lambda d: -log_ndtr(-z_parts(d, "test")).sum(0),
    "Fisher, empirical tails": lambda d: emp_tail(d, "test").sum(0),
    "max of empirical tails": lambda d: emp_tail(d, "test").max(0) + 1e-6 * z_parts(d, "test").max(0),
    "L2 of positive z": lambda d: np.sqrt((np.maximum(z_parts(d, "test"), 0) ** 2).sum(0)),
    "mean z": lambda d: z_parts(d, "test").mean(0),
    "max robust z": lambda d: robust_z(d, "test").max(0),
    "Fisher, Gaussian tails of robust z": lambda d: -log_ndtr(-robust_z(d, "test")).sum(0),
    "network alone": lambda d: d["net_test"],
    "forest alone": lambda d: d["forest_test"],
    "k-NN alone": lambda d: d["knn_test"],
}


def main(argv, variants=VARIANTS):
    """``variants``: name -> function of a per-row file giving the test rows' scores (``../kept_moments/moments.py``
    passes its own)."""
    if len(argv) < 4:
        raise SystemExit(__doc__.strip().splitlines()[-1].strip())
    out, results, dirs = Path(argv[1]), argv[2].split(","), argv[3:]
    iforest = {}
    for path in results:
        with open(path) as fh:
            iforest.update({(r["dataset"], int(r["seed"]), r["setting"], r["split"]): (float(r["aucpr"]),
                            float(r["aucroc"])) for r in csv.DictReader(fh)
                            if r["method"] == "iforest" and r["status"] == "ok"})
    per = {}
    for f in sorted(p for d in dirs for p in Path(d).glob("*.npz")):
        ds, setting, split, seed = f.stem.rsplit("_", 3)
        d = np.load(f)
        y = d["y_test"]
        per[f.stem] = {"dataset": ds, "iforest": iforest.get((ds, int(seed), setting, split))}
        for name, fn in variants.items():
            s = fn(d)
            per[f.stem][name] = (float(average_precision_score(y, s)), float(roc_auc_score(y, s)))
    out.write_text(json.dumps(per, indent=1))
    if any(v["iforest"] is None for v in per.values()):
        raise SystemExit(f"{argv[0]}: no IForest row for " + ", ".join(k for k, v in per.items() if v["iforest"] is None))
    datasets = sorted({v["dataset"] for v in per.values()})
    print(f"{len(per)} trainings, {len(datasets)} datasets (each averaged over its seeds); mean AUC-PR / AUC-ROC; "
          "'above' = datasets above IForest's bench rows, AUC-PR / AUC-ROC")
    for name in [*variants, "iforest"]:
        m = {ds: np.mean([v[name] for v in per.values() if v["dataset"] == ds], 0) for ds in datasets}
        f = {ds: np.mean([v["iforest"] for v in per.values() if v["dataset"] == ds], 0) for ds in datasets}
        mean = np.mean(list(m.values()), 0)
        above = [sum(round(m[ds][i], 3) > round(f[ds][i], 3) for ds in datasets) for i in (0, 1)]
        print(f"{name:38s} {mean[0]:.3f} / {mean[1]:.3f}   above IForest {above[0]:2d} / {above[1]:2d}")


if __name__ == "__main__":
    main(sys.argv)
