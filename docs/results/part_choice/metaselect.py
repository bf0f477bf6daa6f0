"""A part chosen per training set by a selector learnt on other tasks (issue 11, diagnosis only; the selector learns
from labels of the *other* tasks, as meta-learnt outlier model selection does, and reads none of the task it picks for).

``features`` scores choice.py's five parts on each run and saves label-free features of the training set and of the
parts' training scores (the rows' and columns' counts, the forest's contamination estimate, each part's skewness,
kurtosis and share above z 2, the Spearman correlation of every pair of parts) with each part's test AUC-PR and
AUC-ROC (for the report). ``evaluate`` fits, for each part, a regressor from the features to the part's metric minus
the mean of the candidates' (ridge on standardised features, or a random forest), and picks the part with the
highest prediction: leave one dataset out over the first files (every seed of a dataset left out together), then
fitted on all of them and applied to the ``--held`` file.

    python3 docs/results/part_choice/metaselect.py features OUT.json NPZ_DIR [NPZ_DIR ...]
    python3 docs/results/part_choice/metaselect.py evaluate FEATURES.json [FEATURES.json ...] --held HELD.json
"""
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from scipy.stats import kurtosis, skew, spearmanr
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import RidgeCV
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from choice import parts  # noqa: E402
from report import rebuilt_runs, seed_averaged, standardise  # noqa: E402

PARTS = ("net", "forest", "knn_netcore", "knn_fcore50", "ecod")
CANDIDATES = {"three parts": PARTS[:3], "five parts": PARTS}


def features(d, Ztr, p) -> dict:
    f = {"log_rows": np.log(len(Ztr)), "log_columns": np.log(Ztr.shape[1]),
         "forest_estimate": np.mean(d["forest_train"] > 0.5)}
    for k in PARTS:
        z = standardise(p[k][0], p[k][0])
        f[f"skew {k}"], f[f"log kurtosis {k}"], f[f"above z 2 {k}"] = skew(z), np.log(kurtosis(z) + 3), np.mean(z > 2)
    for i, a in enumerate(PARTS):
        for b in PARTS[i + 1:]:
            f[f"spearman {a} {b}"] = spearmanr(p[a][0], p[b][0])[0]
    return {k: float(v) for k, v in f.items()}


def save_features(out, dirs):
    res = {}
    for ds, seed, d, y_test, Ztr, Zte in rebuilt_runs("unsup", "paper", dirs):
        p = parts(d, Ztr, Zte, seed)
        res[f"{ds}|{seed}"] = {"features": features(d, Ztr, p),
                               "metrics": {k: (ap(y_test, p[k][1]), roc(y_test, p[k][1])) for k in PARTS},
                               "default": (ap(y_test, d["blend_test"]), roc(y_test, d["blend_test"]))}
        print(ds, seed, flush=True)
    with open(out, "w") as fh:
        json.dump(res, fh, indent=0)


def load(path) -> dict:
    """A ``features`` file; a missing or unreadable one exits with one line."""
    try:
        with open(path) as fh:
            runs = json.load(fh)
        if not all({"features", "metrics", "default"} <= r.keys() for r in runs.values()):
            raise ValueError("not a features file")
        return runs
    except (OSError, ValueError, AttributeError) as e:
        raise SystemExit(f"{sys.argv[0]}: cannot read {path}: {e}") from None


def protocol_mean(per_run: dict):
    """Mean over datasets of each dataset's mean over its seeds, of {"dataset|seed": (AUC-PR, AUC-ROC)}."""
    return np.mean(list(seed_averaged({(k.split("|")[0], k): v for k, v in per_run.items()}).values()), 0)


def regressor(kind):
    if kind == "ridge":
        return make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-2, 3, 20)))
    return RandomForestRegressor(200, min_samples_leaf=3, random_state=0)


def picks(train: dict, score: dict, cand, metric: int, kind: str) -> dict:
    """{run of score: the candidate part with the highest predicted metric}, the regressors fitted on train's runs."""
    names = sorted(next(iter(train.values()))["features"])
    X = np.array([[r["features"][n] for n in names] for r in train.values()])
    Y = np.array([[r["metrics"][c][metric] for c in cand] for r in train.values()])
    Y -= Y.mean(1, keepdims=True)
    Xs = np.array([[r["features"][n] for n in names] for r in score.values()])
    pred = np.column_stack([regressor(kind).fit(X, Y[:, j]).predict(Xs) for j in range(len(cand))])
    return {k: cand[i] for k, i in zip(score, pred.argmax(1), strict=True)}


def evaluate(paths, held_path):
    runs = {}
    for p in paths:
        runs.update(load(p))
    held = load(held_path)
    print(f"{len(runs)} runs to learn from (leave one dataset out), {len(held)} held-out runs; mean AUC-PR / AUC-ROC")
    a, b = (protocol_mean({k: r["default"] for k, r in rs.items()}) for rs in (runs, held))
    print(f"{'the default':44s} {a[0]:.3f} / {a[1]:.3f}   held out {b[0]:.3f} / {b[1]:.3f}")
    datasets = sorted({k.split("|")[0] for k in runs})
    for cname, cand in CANDIDATES.items():
        for metric, mname in ((1, "AUC-ROC"), (0, "AUC-PR")):
            for kind in ("ridge", "forest"):
                lodo = {}
                for ds in datasets:
                    train = {k: r for k, r in runs.items() if k.split("|")[0] != ds}
                    lodo.update(picks(train, {k: r for k, r in runs.items() if k.split("|")[0] == ds}, cand, metric, kind))
                on_held = picks(runs, held, cand, metric, kind)
                a = protocol_mean({k: runs[k]["metrics"][c] for k, c in lodo.items()})
                b = protocol_mean({k: held[k]["metrics"][c] for k, c in on_held.items()})
                most = ", ".join(f"{c} {n}" for c, n in Counter(on_held.values()).most_common(3))
                label = f"{cname}, learns {mname}, {kind}"
                print(f"{label:44s} {a[0]:.3f} / {a[1]:.3f}   held out {b[0]:.3f} / {b[1]:.3f}   (held-out picks: {most})")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "features":
        save_features(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 5 and sys.argv[1] == "evaluate" and sys.argv[-2] == "--held":
        evaluate(sys.argv[2:-2], sys.argv[-1])
    else:
        raise SystemExit(f"usage: {sys.argv[0]} features OUT.json NPZ_DIR [NPZ_DIR ...] | "
                         "evaluate FEATURES.json [FEATURES.json ...] --held HELD.json")
