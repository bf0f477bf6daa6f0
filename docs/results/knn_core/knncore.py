"""A k-nearest-neighbour distance to the training core as a third score part (diagnosis only; reads labels).

For each variants.py file (docs/results/ablation_snapshots/) it rebuilds the bench's split and scaler, fits a
k-NN reference on a core of the standardised training rows and scores the test rows by the distance to their
k-th nearest reference row, alone and combined with the default's two parts (the network's log score and the
isolation forest's score, each a z-score over the training rows, as offline_train.blend does).

Cores: ``netcore`` = the share 1 - (forest's contamination estimate) of training rows the trained network finds
most normal (what the refinement keeps), ``fcore50`` = the warm start's core (the forest's least isolated half),
``all`` = every training row (the KNN baseline). The reference is a seeded sample of at most 2048 core rows; a
training row in the reference skips itself (its (k+1)-th neighbour), so training and test rows are scored alike.
The knn part is standardised on the log scale (``log``) or as it is (``raw``).

    python3 docs/results/knn_core/knncore.py SETTING SPLIT OUT.json NPZ_DIR [NPZ_DIR ...]
    python3 docs/results/knn_core/knncore.py summary OUT.json [OUT.json ...]    # means, as protocol.py takes them
"""
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc
from sklearn.neighbors import NearestNeighbors

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import cores, default_parts, lg, rebuilt_runs, score_cli, standardise  # noqa: E402

MAX_REF = 2048


def kth_distance(Ztr, Zte, core, k, seed, max_ref=MAX_REF):
    """k-th nearest distances of training rows (reference rows skip themselves) and test rows to a core sample."""
    ref = core if len(core) <= max_ref else np.sort(np.random.default_rng(seed).choice(core, max_ref, replace=False))
    k = min(k, len(ref) - 1)
    nn = NearestNeighbors(n_neighbors=k + 1).fit(Ztr[ref])
    d_tr = nn.kneighbors(Ztr, k + 1)[0]
    in_ref = np.zeros(len(Ztr), bool)
    in_ref[ref] = True
    return np.where(in_ref, d_tr[:, k], d_tr[:, k - 1]), nn.kneighbors(Zte, k)[0][:, -1]


def run(setting, split, dirs):
    res = {}
    for ds, seed, d, y_test, Ztr, Zte in rebuilt_runs(setting, split, dirs):
        cores_ = {**cores(d), "all": np.arange(len(Ztr))}
        zn, zf, v = default_parts(d)
        v["mean(net,forest)"] = (zn + zf) / 2
        for cname, core in cores_.items():
            for k in (5, 10):
                dtr, dte = kth_distance(Ztr, Zte, core, k, seed)
                nm = f"k{k}/{cname}"
                v[f"knn alone {nm}"] = dte
                for how, tr, te in (("log", lg(dtr), lg(dte)), ("raw", dtr, dte)):
                    zk = standardise(tr, te)
                    v[f"max3 {how} {nm}"] = np.max([zn, zf, zk], axis=0)
                    v[f"mean3 {how} {nm}"] = np.mean([zn, zf, zk], axis=0)
                    v[f"max(net,knn) {how} {nm}"] = np.maximum(zn, zk)
                    v[f"max(net,mean(forest,knn)) {how} {nm}"] = np.maximum(zn, (zf + zk) / 2)
        res[f"{ds}|{seed}"] = {nm: (ap(y_test, s), roc(y_test, s)) for nm, s in v.items()}
        print(ds, seed, flush=True)
    return res


if __name__ == "__main__":
    score_cli(run)
