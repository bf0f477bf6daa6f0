"""The fortieth pass's table: the default with ``refine.strata`` 10 against the default and the baselines, seed 0.

    python3 docs/results/strata/table.py semi docs/results/strata/bench_semi_paper_seed0.csv > docs/results/strata/table_semi_paper_seed0.txt
    python3 docs/results/strata/table.py unsup docs/results/strata/bench_unsup_paper_seed0.csv > docs/results/strata/table_unsup_paper_seed0.txt

The strata rows are the bench's (``KDSM_REFINE__STRATA=10 kdsm bench adbench``) where it ran, else the diagnosis's
(``strata_diag.py``, ``diag_SETTING_paper_seed0.csv``); a dataset in both is the check that the two are one code path.
The default's rows are real bench runs on the same 2-core AMD EPYC VM; the baselines' come from the committed runs.
"""
import csv
import sys
from pathlib import Path

import numpy as np

here = Path(__file__).resolve().parent
results = here.parent
setting, bench_csv = sys.argv[1], sys.argv[2]
default_csv = {"semi": results / "ablation_3seeds_small/default_semi_paper_seed0_amd.csv",
               "unsup": results / "unsup_paper_amd_seed0/results.csv"}[setting]
baseline_csv = {"semi": results / "semi_paper_fast/results.csv", "unsup": results / "unsup_paper_fast/results.csv"}[setting]


def rows(path, method=None):
    out = {}
    for r in csv.DictReader(open(path)):
        if r.get("seed", "0") == "0" and (method is None or r.get("method") == method) and r.get("status", "ok") == "ok":
            out[r["dataset"]] = (float(r["aucpr"]), float(r["aucroc"]))
    return out


diag = rows(here / f"diag_{setting}_paper_seed0.csv")
bench = rows(bench_csv, "default")
strata = {**diag, **bench}
default = rows(default_csv, "default")
iforest_amd = rows(default_csv, "iforest") or rows(baseline_csv, "iforest")
baselines = {m: rows(baseline_csv, m) for m in ("iforest", "ecod", "knn", "lof", "kdsm")}
baselines["iforest"] = iforest_amd
names = sorted(strata, key=lambda d: strata[d][0] - default[d][0])
print(f"{setting}, paper split, seed 0: {len(strata)} datasets (diagnosis {len(set(diag) - set(bench))}, bench {len(bench)})")
print(f"{'dataset':22s} {'strata 10':>13s} {'default':>13s} {'diff PR':>8s} " + " ".join(f"{m:>7s}" for m in baselines))
for d in names:
    s, b = strata[d], default[d]
    print(f"{d:22s} {s[0]:.3f} / {s[1]:.3f} {b[0]:.3f} / {b[1]:.3f} {s[0] - b[0]:+8.3f} "
          + " ".join(f"{baselines[m].get(d, (np.nan,))[0]:7.3f}" for m in baselines))
common = [d for d in names if d in default]
S, B = np.array([strata[d] for d in common]), np.array([default[d] for d in common])
print(f"mean over {len(common)}: strata 10 {S[:, 0].mean():.3f} / {S[:, 1].mean():.3f}, "
      f"default {B[:, 0].mean():.3f} / {B[:, 1].mean():.3f}; strata ahead on {(S[:, 0] > B[:, 0]).sum()} / "
      f"{(S[:, 1] > B[:, 1]).sum()}, behind on {(S[:, 0] < B[:, 0]).sum()} / {(S[:, 1] < B[:, 1]).sum()}")
for m, r in baselines.items():
    if all(d in r for d in common):
        M = np.array([r[d] for d in common])
        print(f"  {m:8s} {M[:, 0].mean():.3f} / {M[:, 1].mean():.3f}; strata ahead of it on "
              f"{(S[:, 0] > M[:, 0]).sum()} / {(S[:, 1] > M[:, 1]).sum()}, the default on "
              f"{(B[:, 0] > M[:, 0]).sum()} / {(B[:, 1] > M[:, 1]).sum()}")
for d in sorted(set(diag) & set(bench)):
    print(f"one code path: {d} diagnosis {diag[d][0]:.6f} / {diag[d][1]:.6f}, bench {bench[d][0]:.6f} / {bench[d][1]:.6f}")
