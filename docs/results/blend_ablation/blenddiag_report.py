"""Means of each part and each way of blending them, from blenddiag_run.py's files.

python3 docs/results/blend_ablation/blenddiag_report.py runs/blend unsup_paper unsup_clean
"""
import glob
import sys

import numpy as np
from scipy.stats import rankdata
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc


def z(tr, te, log=False):
    if log: tr, te = np.log(tr + 1e-12), np.log(te + 1e-12)
    return (te - tr.mean()) / (tr.std() + 1e-12)
def rz(tr, te, log=False):
    if log: tr, te = np.log(tr + 1e-12), np.log(te + 1e-12)
    med = np.median(tr); mad = np.median(np.abs(tr - med)) * 1.4826 + 1e-12
    return (te - med) / mad
def ecdf(tr, te):
    s = np.sort(tr); return np.searchsorted(s, te, side="right") / len(s) + 1e-3 * z(tr, te)
def combos(d):
    k, i, e = (d["k_train"], d["k_test"]), (d["if_train"], d["if_test"]), (d["ec_train"], d["ec_test"])
    out = {"kdsm": k[1], "iforest": i[1], "ecod": e[1]}
    out["rank(k,if) test"] = rankdata(k[1]) + rankdata(i[1])
    out["z(logk)+z(if)"] = z(*k, log=True) + z(*i)
    out["z(k)+z(if)"] = z(*k) + z(*i)
    out["rz(logk)+rz(if)"] = rz(*k, log=True) + rz(*i)
    out["ecdf(k)+ecdf(if)"] = ecdf(*k) + ecdf(*i)
    out["z(logk)+z(if)+z(ec)"] = z(*k, log=True) + z(*i) + z(*e)
    out["max z"] = np.maximum(z(*k, log=True), z(*i))
    return out
for cfg in (sys.argv[2:] if __name__ == "__main__" else []):
    files = sorted(glob.glob(f"{sys.argv[1]}/*_{cfg}_0.npz"))
    res = {}
    for f in files:
        d = np.load(f)
        for name, s in combos(d).items():
            res.setdefault(name, []).append((ap(d["y_test"], s), roc(d["y_test"], s)))
    print(f"== {cfg}: {len(files)} datasets")
    base = np.array(res["iforest"])
    for name, v in res.items():
        v = np.array(v)
        print(f"{name:24s} {v[:,0].mean():.3f} {v[:,1].mean():.3f}  ahead of IF on PR {int((v[:,0]>base[:,0]).sum())}  ROC {int((v[:,1]>base[:,1]).sum())}")
