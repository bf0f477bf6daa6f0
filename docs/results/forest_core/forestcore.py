"""The isolation forest part refitted on a training core (diagnosis only; reads labels).

The default's score is the larger of two z-scores: the network's (trained on the rows the refinement keeps) and
the warm start's isolation forest's, which is fitted on *every* training row, anomalies included. "Tenth pass"
(docs/contaminated.md) found that a k-NN distance to a core beats IForest on contaminated history; this asks
whether the forest part gains the same way when it is refitted on the rows the default already trusts.

For each variants.py file (docs/results/ablation_snapshots/) it rebuilds the bench's split and scaler, checks
that scikit-learn's forest on every standardised training row (seed = the run's seed) gives the file's
``forest_train`` (the default's own part), refits a forest with the same settings on a core and scores the
training and test rows with it, alone and in the default's blend (the larger z-score, z over the training rows).

Cores: ``netcore`` = the share 1 - (forest's contamination estimate) of training rows the trained network finds
most normal (what the refinement keeps), ``fcore50`` = the warm start's core (the forest's least isolated half),
``netcore∩fcore`` = the rows in both.

    python3 docs/results/forest_core/forestcore.py SETTING SPLIT OUT.json NPZ_DIR [NPZ_DIR ...]
    python3 docs/results/forest_core/forestcore.py summary OUT.json [OUT.json ...]
"""
import glob
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import ahead, dataset_seed, lg, seed_averaged, standardise  # noqa: E402


def run(setting, split, out, dirs):
    from offline_train.config import TrainSettings
    from offline_train.evaluation.runner import _prepared
    from offline_train.isolation import fit_forest

    data = Path("../shared/data/adbench")
    scale_discrete = TrainSettings().data.scale_discrete
    res = {}
    for f in sum((sorted(glob.glob(f"{d}/*.npz")) for d in dirs), []):
        ds, seed = dataset_seed(f)
        d = np.load(f)
        X, sp, sc = _prepared(data / f"{ds}.npz", setting, split, seed, scale_discrete)
        Ztr, Zte = np.clip(sc.transform(X[sp.train_idx]), -1e4, 1e4), np.clip(sc.transform(X[sp.test_idx]), -1e4, 1e4)
        gap = float(np.max(np.abs(-fit_forest(Ztr, seed).score_samples(Ztr) - d["forest_train"])))
        assert gap < 1e-6, f"{f}: the rebuilt forest is not the default's (max gap {gap:g})"
        est = min(float(np.mean(d["forest_train"] > 0.5)), 0.5)  # the default's estimate (refine.max_drop 0.5)
        n = len(Ztr)
        netcore = np.argsort(d["net_train"], kind="stable")[: max(2, int(np.ceil(n * (1 - est))))]
        fcore = np.argsort(d["forest_train"], kind="stable")[: max(2, int(np.ceil(n * 0.5)))]
        cores = {"netcore": np.sort(netcore), "fcore50": np.sort(fcore), "netcore&fcore": np.intersect1d(netcore, fcore)}
        zn = standardise(lg(d["net_train"]), lg(d["net_test"]))
        zf = standardise(d["forest_train"], d["forest_test"])
        v = {"default": d["blend_test"], "network alone": d["net_test"], "forest alone": d["forest_test"]}
        for cname, core in cores.items():
            iso = fit_forest(Ztr[core], seed)
            ftr, fte = -iso.score_samples(Ztr), -iso.score_samples(Zte)
            zc = standardise(ftr, fte)
            v[f"forest alone on {cname}"] = fte
            v[f"max(net, forest on {cname})"] = np.maximum(zn, zc)
            v[f"max(net, forest, forest on {cname})"] = np.max([zn, zf, zc], axis=0)
            v[f"max(net, mean(forest, forest on {cname}))"] = np.maximum(zn, (zf + zc) / 2)
        res[f"{ds}|{seed}"] = {nm: (ap(sp.y_test, s), roc(sp.y_test, s)) for nm, s in v.items()}
        print(ds, seed, flush=True)
    json.dump(res, open(out, "w"), indent=0)


def summary(paths):
    """Mean over datasets of each dataset's mean over its seeds; 'ahead' counts datasets above the forest part."""
    res = {}
    for p in paths:
        res.update(json.load(open(p)))
    per = defaultdict(dict)  # variant -> {(dataset, seed): (AUC-PR, AUC-ROC)}
    for key, v in res.items():
        ds, seed = key.split("|")
        for nm, m in v.items():
            per[nm][(ds, int(seed))] = m
    m = {nm: seed_averaged(r) for nm, r in per.items()}
    print(f"{len(res)} runs, {len(m['default'])} datasets; 'ahead' = datasets where the variant's mean is above the "
          "forest part's (PyOD's IForest, same seed), AUC-PR / AUC-ROC")
    for nm in m:
        mean = np.mean(list(m[nm].values()), 0)
        pr, rc = ahead(m[nm], m["forest alone"])
        print(f"{nm:48s} {mean[0]:.3f} / {mean[1]:.3f}  ahead {pr:2d} / {rc:2d}")


if __name__ == "__main__":
    if len(sys.argv) < 3 or (sys.argv[1] != "summary" and len(sys.argv) < 5):
        raise SystemExit(f"usage: {sys.argv[0]} SETTING SPLIT OUT.json NPZ_DIR [NPZ_DIR ...] | summary OUT.json [OUT.json ...]")
    if sys.argv[1] == "summary":
        summary(sys.argv[2:])
    else:
        run(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
