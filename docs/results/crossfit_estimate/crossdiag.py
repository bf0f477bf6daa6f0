"""Diagnosis (reads labels, for this report only): does a cross-fitted K-DSM score see the contamination that the
isolation forest's estimate misses (docs/contaminated-passes.md, "Second pass")?

For every dataset's training set of the paper split, seed 0, clean (semi) and contaminated (unsup): two K-DSM
models (the published method: EMA teacher on, refinement off, 800 steps), each trained on one half of the rows and
scoring the other half, so no row is scored by a model that learnt it. From the held-out scores alone: the share of
rows above median + k * MAD of the log scores (k = 2, 3, 4), and the held-out AUC-PR / AUC-ROC against the labels.
Run from the repo root (one worker per dataset share; torch on one thread each):
    python3 docs/results/crossfit_estimate/crossdiag.py WORKER N_WORKERS
then merge with ``python3 docs/results/crossfit_estimate/crossdiag.py merge``."""
import glob
import json
import os
import sys

import numpy as np
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from offline_train.config import OptimConfig, RefineConfig
from offline_train.data import load_npz
from offline_train.detector import KDSM
from offline_train.evaluation.protocol import make_split

OUT = "docs/results/crossfit_estimate"
KS = (2.0, 3.0, 4.0)


def held_out_scores(Z, seed=0):
    rng = np.random.default_rng(seed)
    fold = rng.permutation(len(Z)) % 2
    s = np.empty(len(Z))
    for f in (0, 1):
        m = KDSM(train=OptimConfig(steps=800, seed=seed), refine=RefineConfig(enabled=False))
        m.fit(Z[fold != f])
        s[fold == f] = m.decision_function(Z[fold == f])
    return s


def main(worker, workers):
    torch.set_num_threads(1)
    paths = sorted(glob.glob("../shared/data/adbench/*.npz"))[worker::workers]
    rows = []
    for p in paths:
        ds = os.path.basename(p)[:-4]
        X, y = load_npz(p)
        for setting in ("semi", "unsup"):
            sp = make_split(y, setting, "paper", 0)
            Z, ytr = X[sp.train_idx], y[sp.train_idx]
            s = held_out_scores(Z)
            ls = np.log(np.maximum(s - s.min(), 0) + 1e-6 * (np.ptp(s) + 1e-12))
            med, mad = np.median(ls), np.median(np.abs(ls - np.median(ls))) * 1.4826 + 1e-12
            r = dict(ds=ds, setting=setting, n=len(Z), true=float(ytr.mean()),
                     **{f"k{k:g}": float((ls > med + k * mad).mean()) for k in KS})
            if 0 < ytr.sum() < len(ytr):
                r.update(ap=float(average_precision_score(ytr, s)), roc=float(roc_auc_score(ytr, s)))
            rows.append(r)
            print(json.dumps(r), flush=True)
    json.dump(rows, open(f"{OUT}/part{worker}.json", "w"))


def merge():
    rows = [r for f in sorted(glob.glob(f"{OUT}/part*.json")) for r in json.load(open(f))]
    json.dump(rows, open(f"{OUT}/crossdiag.json", "w"), indent=1)
    iso = {(r["ds"], r["setting"]): r["s0.5"] for r in json.load(open("docs/results/isolation_estimate/isodiag.json"))}
    print(f"{'dataset':16s} {'set':5s} {'true':>6s} {'iso':>6s} " + " ".join(f"{'k' + format(k, 'g'):>6s}" for k in KS))
    for r in sorted(rows, key=lambda r: (r["ds"], r["setting"])):
        print(f"{r['ds'][:16]:16s} {r['setting']:5s} {r['true']:6.3f} {iso[(r['ds'], r['setting'])]:6.3f} "
              + " ".join(f"{r[f'k{k:g}']:6.3f}" for k in KS))
    for setting in ("semi", "unsup"):
        sel = [r for r in rows if r["setting"] == setting]
        print(f"{setting}: mean true {np.mean([r['true'] for r in sel]):.3f}, iso {np.mean([iso[(r['ds'], setting)] for r in sel]):.3f}, "
              + ", ".join(f"k{k:g} {np.mean([r[f'k{k:g}'] for r in sel]):.3f}" for k in KS))
    un = [r for r in rows if r["setting"] == "unsup"]
    t = np.array([r["true"] for r in un])
    iso_corr = np.corrcoef(t, [iso[(r["ds"], "unsup")] for r in un])[0, 1]
    print(f"correlation with the true share (unsup): iso {iso_corr:.2f}, "
          + ", ".join(f"k{k:g} {np.corrcoef(t, [r[f'k{k:g}'] for r in un])[0, 1]:.2f}" for k in KS))
    # Does the estimate tell a contaminated training set from the clean one of the same dataset?
    semi = {r["ds"]: r for r in rows if r["setting"] == "semi"}
    for k in KS:
        up = sum(r[f"k{k:g}"] > semi[r["ds"]][f"k{k:g}"] for r in un)
        print(f"k{k:g}: contaminated estimate above the clean one on {up} of {len(un)} datasets")
    up = sum(iso[(r["ds"], "unsup")] > iso[(r["ds"], "semi")] for r in un)
    print(f"iso: contaminated estimate above the clean one on {up} of {len(un)} datasets")


if __name__ == "__main__":
    if len(sys.argv) < 2 or (sys.argv[1] != "merge" and len(sys.argv) < 3):
        raise SystemExit(f"usage: {sys.argv[0]} WORKER N_WORKERS | merge")
    if sys.argv[1] == "merge":
        merge()
    else:
        main(int(sys.argv[1]), int(sys.argv[2]))
