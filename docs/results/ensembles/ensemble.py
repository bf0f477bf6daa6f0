"""Ensembles of the default over training seeds and noise scales, from per-row files (diagnosis only; reads labels).

Each run pairs the default's own per-row file (../ablation_snapshots/variants.py: the network ``net`` and the forest
of training seed SEED) with members.py's files of the same split: ``seed1000`` (training seed SEED + 1000) and
``sigma1`` (``sigma.base`` 1.0, training seed SEED, so its forest is the default's, which is checked). The networks
are averaged as the geometric mean of their scores (their log scores averaged, the scale the blend standardises) and
blended with a forest exactly as the default's score is (``offline_train.blend.Blend``: the larger z-score).

    python3 docs/results/ensembles/ensemble.py SETTING SPLIT OUT.json BASE_DIR:SEED1000_DIR:SIGMA1_DIR [...]
    python3 docs/results/ensembles/ensemble.py summary OUT.json [OUT.json ...]

SETTING and SPLIT select the files (named DATASET_SETTING_SPLIT_SEED.npz); a run missing a member's file is skipped.
"""
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import blended, dataset_seed, lg, npz_files, score_cli  # noqa: E402


def geo(*scores):
    return np.exp(np.mean([lg(s) for s in scores], axis=0))


def run(setting, split, dirs):
    res = {}
    for triple in dirs:
        if triple.count(":") != 2:
            raise SystemExit(f"{sys.argv[0]}: {triple!r} is not BASE_DIR:SEED1000_DIR:SIGMA1_DIR")
        base, s1000, sig1 = triple.split(":")
        for f in npz_files([base], f"*_{setting}_{split}_*.npz"):
            name = Path(f).name
            if not (Path(s1000, name).exists() and Path(sig1, name).exists()):
                continue
            ds, seed = dataset_seed(f)
            d, a, b = np.load(f), np.load(Path(s1000, name)), np.load(Path(sig1, name))
            assert np.array_equal(d["y_test"], a["y_test"]) and np.array_equal(d["y_test"], b["y_test"]), name
            assert np.allclose(d["forest_test"], b["forest_test"]), f"{name}: the sigma1 member's forest differs"
            forests = {"forest_train": (d["forest_train"] + a["forest_train"]) / 2,
                       "forest_test": (d["forest_test"] + a["forest_test"]) / 2}
            v = {"default": d["blend_test"], "network alone": d["net_test"], "forest alone": d["forest_test"],
                 "the default at training seed + 1000": a["blend_test"],
                 "the default with sigma.base 1.0": b["blend_test"],
                 "2 seeds: geo(net, net+1000), forest": blended(d, geo(d["net_train"], a["net_train"]),
                                                                geo(d["net_test"], a["net_test"])),
                 "2 seeds: geo(net, net+1000), mean of 2 forests": blended(
                     forests, geo(d["net_train"], a["net_train"]), geo(d["net_test"], a["net_test"])),
                 "2 noise scales: geo(net, net sigma 1.0), forest": blended(
                     d, geo(d["net_train"], b["net_train"]), geo(d["net_test"], b["net_test"])),
                 "3 networks: geo(net, net+1000, net sigma 1.0), forest": blended(
                     d, geo(d["net_train"], a["net_train"], b["net_train"]),
                     geo(d["net_test"], a["net_test"], b["net_test"])),
                 "3 networks, mean of 2 forests": blended(
                     forests, geo(d["net_train"], a["net_train"], b["net_train"]),
                     geo(d["net_test"], a["net_test"], b["net_test"]))}
            res[f"{ds}|{seed}"] = {nm: (ap(d["y_test"], s), roc(d["y_test"], s)) for nm, s in v.items()}
    if not res:
        raise SystemExit(f"{sys.argv[0]}: no run has both members' files in {' '.join(dirs)}")
    return res


if __name__ == "__main__":
    score_cli(run)
