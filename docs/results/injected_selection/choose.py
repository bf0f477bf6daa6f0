"""Pick one part per training set by how well it ranks injected rows above the training rows (thirty-third pass).

Reads the per-row files of ``inject.py`` (one folder per set of tasks) and prints, per folder, the mean
AUC-PR / AUC-ROC on the test rows of: the default (the blend), each part alone, each label-free choice, and the label
oracle that picks the best candidate per file. Labels feed the report only. Usage:
    python3 docs/results/injected_selection/choose.py runs/inj [runs/inj_small ...] > summary.txt
A choice picks, per training set, the candidate (the blend, the network, the forest, the k-NN part) with the highest
ROC AUC of injected rows against the training rows, averaged over the kinds it names; ties go to the blend.
"""
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

CANDIDATES = ("blend", "net", "forest", "knn")
KINDS = ("global", "dependency", "local")  # the keys of inject.py's ``injected``
RULES = {"all three kinds": KINDS, "dependency and local": ("dependency", "local"),
         "dependency": ("dependency",), "local": ("local",),
         "global": ("global",)}  # added after the first four were read: the mass-volume criterion's uniform rows


def injected_auc(z, cand: str, kind: str) -> float:
    """ROC AUC of candidate ``cand``'s scores: the injected rows of ``kind`` against the training rows."""
    train, injected = z[f"{cand}_train"], z[f"{cand}_{kind}"]
    return float(roc_auc_score(np.r_[np.zeros(len(train)), np.ones(len(injected))], np.r_[train, injected]))


def report(files: list[Path]) -> None:
    rows, seen = {}, {c: {k: [] for k in KINDS} for c in CANDIDATES}
    for f in files:
        z = np.load(f)
        test = {c: (average_precision_score(z["y_test"], z[f"{c}_test"]), roc_auc_score(z["y_test"], z[f"{c}_test"]))
                for c in CANDIDATES}
        r = {c: test[c] for c in CANDIDATES}
        by_kind = {c: {k: injected_auc(z, c, k) for k in KINDS} for c in CANDIDATES}  # once per file
        for c in CANDIDATES:
            for k in KINDS:
                seen[c][k].append(by_kind[c][k])
        for name, kinds in RULES.items():
            auc = {c: np.mean([by_kind[c][k] for k in kinds]) for c in CANDIDATES}
            pick = max(CANDIDATES, key=lambda c: (auc[c], c == "blend"))
            r[f"choice: {name}"] = test[pick] + (pick,)
        r["oracle (labels)"] = max(test.values(), key=lambda t: t[0] + t[1])
        rows[f.stem] = r
    names = list(next(iter(rows.values())))
    print(f"{len(rows)} files")
    print(f"{'':28s} {'AUC-PR':>7s} {'AUC-ROC':>7s}  above the forest (PR / ROC)  picks")
    for n in names:
        pr = np.mean([r[n][0] for r in rows.values()])
        roc = np.mean([r[n][1] for r in rows.values()])
        up = sum(r[n][0] > r["forest"][0] for r in rows.values())
        uroc = sum(r[n][1] > r["forest"][1] for r in rows.values())
        picks = ""
        if n.startswith("choice"):
            got = [r[n][2] for r in rows.values()]
            picks = " ".join(f"{c} {got.count(c)}" for c in CANDIDATES)
        print(f"{n:28s} {pr:7.3f} {roc:7.3f}  {up:2d} / {uroc:2d}                     {picks}")
    print("mean ROC AUC of injected rows against the training rows (what the choices read):")
    for c in CANDIDATES:
        print(f"  {c:8s}" + "".join(f"  {k} {np.mean(v):.3f}" for k, v in seen[c].items()))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__.split("Usage:")[1].split("A choice")[0].strip())
    for folder in sys.argv[1:]:
        print(f"== {folder}")
        report(sorted(Path(folder).glob("*.npz")))
