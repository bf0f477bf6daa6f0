"""The default with and without its k-NN part beside the bench's baselines, under issue 11's protocol (diagnosis).

Reads per-run JSON files of ``kchoice.py`` (the default's two-part score, its parts and the three-part score for
several k, from the same trainings) and the committed ``kdsm bench adbench`` results.csv files of the baselines on
the same split; keeps the runs of the protocol (seed 0 on every dataset, seeds 1-2 where the JSON files have them:
the 11 datasets under 1000 rows), averages each dataset over its seeds, then the datasets. Prints mean AUC-PR /
AUC-ROC and on how many datasets each row is above IForest's and KNN's bench rows (3 decimals). Where every dataset
has the same seeds (3 seeds everywhere, the twenty-ninth pass), it also prints each seed's means.

    python3 docs/results/knn_part/protocol.py PARTS.json[,PARTS.json ...] RESULTS.csv [RESULTS.csv ...]
"""
import csv
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import ahead, read_runs, seed_averaged  # noqa: E402

ROWS = {"default": "the default's two parts", "max3 k 10": "with the k-NN part (k 10, the new default)",
        "max3 k 5": "  k 5", "max3 k 20": "  k 20", "max3 k 40": "  k 40", "network alone": "the network alone"}
BASELINES = ("iforest", "ecod", "knn", "lof", "kdsm")


def main(argv):
    if len(argv) < 3:
        raise SystemExit(__doc__.strip().splitlines()[-1].strip())
    runs = read_runs(argv[1].split(","))
    keys = {tuple(k.split("|")) for k in runs}
    keys = {(ds, int(s)) for ds, s in keys}
    per = defaultdict(dict)
    for (ds, seed) in keys:
        for nm, m in runs[f"{ds}|{seed}"].items():
            per[nm][(ds, seed)] = m
    for path in argv[2:]:
        try:
            with open(path) as fh:
                rows = list(csv.DictReader(fh))
        except OSError as e:
            raise SystemExit(f"{argv[0]}: cannot read {path}: {e}") from None
        for r in rows:
            if r["method"] in BASELINES and r["status"] == "ok" and (r["dataset"], int(r["seed"])) in keys:
                per[r["method"]][(r["dataset"], int(r["seed"]))] = (float(r["aucpr"]), float(r["aucroc"]))
    m = {nm: seed_averaged(v) for nm, v in per.items() if len(v) == len(keys)}  # complete rows only
    missing = [b for b in ("iforest", "knn") if b not in m]
    if missing:
        raise SystemExit(f"{argv[0]}: no complete {', '.join(missing)} rows for these runs in {' '.join(argv[2:])}")
    print(f"{len(keys)} runs, {len(m['default'])} datasets; mean AUC-PR / AUC-ROC; 'above' = datasets above IForest's "
          "and KNN's bench rows, AUC-PR / AUC-ROC")
    for nm in [*ROWS, *BASELINES]:
        if nm in m:
            mean = np.mean(list(m[nm].values()), 0)
            a, b = ahead(m[nm], m["iforest"]), ahead(m[nm], m["knn"])
            print(f"{ROWS.get(nm, nm):45s} {mean[0]:.3f} / {mean[1]:.3f}   above IForest {a[0]:2d} / {a[1]:2d}"
                  f"   above KNN {b[0]:2d} / {b[1]:2d}")
    seeds = sorted({s for _, s in keys})
    if len(seeds) > 1 and len(keys) == len({ds for ds, _ in keys}) * len(seeds):  # every dataset at every seed
        print("per seed (mean over the datasets):")
        for nm in ("max3 k 10", "default", *BASELINES):
            if nm in m:
                cells = [np.mean([v for (_, s), v in per[nm].items() if s == seed], 0) for seed in seeds]
                print(f"  {ROWS.get(nm, nm).strip():43s} " + "   ".join(
                    f"seed {seed} {c[0]:.3f} / {c[1]:.3f}" for seed, c in zip(seeds, cells, strict=True)))


if __name__ == "__main__":
    main(sys.argv)
