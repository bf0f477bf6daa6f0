"""Which part to trust, per training set: a label oracle's bound and two label-free choices (issue 11, diagnosis only;
the oracle reads labels, the choices do not).

For each ``scorespace.py`` file (../score_space/) the bench's split and scaler are rebuilt, and five parts are scored
on the test rows: the default's two (``net``, the network's log score; ``forest``, the warm start's isolation forest),
the distance to the 10th nearest row of a core (``knn_netcore``: the rows the trained network keeps; ``knn_fcore50``:
the forest's least isolated half; both on the log scale, as ../knn_core/knncore.py scores them) and ECOD fitted on
every training row. Cores as in ../ablation_snapshots/report.py.

For each set of parts (the choices only where a set has three or more: between two parts, agreement with "the
others" is symmetric and picks nothing):
- ``oracle SET``: on each run, the best AUC-PR and the best AUC-ROC of the set's parts (each metric picks its own
  part, so this is an upper bound on any choice of one part per training set);
- ``central SET``: the part whose training scores agree most with the other parts' (the mean Spearman correlation;
  the consensus family of internal strategies in Ma, Zhao, Zhang and Akoglu, "A large-scale study on unsupervised
  outlier model selection", 2021/2023);
- ``pseudo SET``: the part whose training ranking best finds the top 5% of the other parts' mean z-score (average
  precision against those pseudo-labels).

    python3 docs/results/part_choice/choice.py unsup paper OUT.json NPZ_DIR [NPZ_DIR ...]
    python3 docs/results/part_choice/choice.py summary OUT.json [OUT.json ...]
"""
import sys
from pathlib import Path

import numpy as np
from pyod.models.ecod import ECOD
from scipy.stats import spearmanr
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "knn_core"))
from knncore import kth_distance  # noqa: E402
from report import cores, lg, rebuilt_runs, score_cli, standardise  # noqa: E402

SETS = {
    "net+forest": ("net", "forest"),
    "net+forest+knn_netcore": ("net", "forest", "knn_netcore"),
    "net+forest+knn_fcore50": ("net", "forest", "knn_fcore50"),
    "net+forest+knn_netcore+knn_fcore50": ("net", "forest", "knn_netcore", "knn_fcore50"),
    "all five": ("net", "forest", "knn_netcore", "knn_fcore50", "ecod"),
}
PSEUDO_SHARE = 0.05


def parts(d, Ztr, Zte, seed):
    """{part: (training scores, test scores)}, larger = more anomalous."""
    c = cores(d)
    out = {"net": (lg(d["net_train"]), lg(d["net_test"])), "forest": (d["forest_train"], d["forest_test"])}
    for name in ("netcore", "fcore50"):
        tr, te = kth_distance(Ztr, Zte, c[name], 10, seed)
        out[f"knn_{name}"] = (lg(tr), lg(te))
    ecod = ECOD().fit(Ztr)
    out["ecod"] = (ecod.decision_scores_, ecod.decision_function(Zte))
    return out


def central(train: dict) -> str:
    """The part whose training scores have the highest mean Spearman correlation with the others'."""
    names = list(train)
    return max(names, key=lambda a: np.mean([spearmanr(train[a], train[b])[0] for b in names if b != a]))


def pseudo(train: dict) -> str:
    """The part whose training ranking best finds the top PSEUDO_SHARE of the other parts' mean z-score."""
    z = {k: standardise(v, v) for k, v in train.items()}

    def agreement(a):
        others = np.mean([z[b] for b in z if b != a], axis=0)
        return ap(others >= np.quantile(others, 1 - PSEUDO_SHARE), z[a])
    return max(z, key=agreement)


def run(setting, split, dirs):
    res = {}
    for ds, seed, d, y_test, Ztr, Zte in rebuilt_runs(setting, split, dirs):
        p = parts(d, Ztr, Zte, seed)
        m = {k: (ap(y_test, te), roc(y_test, te)) for k, (_, te) in p.items()}
        v = {"default": (ap(y_test, d["blend_test"]), roc(y_test, d["blend_test"])), "forest alone": m["forest"], **m}
        picks = []
        for name, s in SETS.items():
            v[f"oracle {name}"] = (max(m[k][0] for k in s), max(m[k][1] for k in s))
            if len(s) < 3:
                continue
            train = {k: p[k][0] for k in s}
            for how, choose in (("central", central), ("pseudo", pseudo)):
                k = choose(train)
                v[f"{how} {name}"] = m[k]
                picks.append(f"{how} {name}: {k}")
        res[f"{ds}|{seed}"] = v
        print(ds, seed, "; ".join(picks), flush=True)
    return res


if __name__ == "__main__":
    score_cli(run)
