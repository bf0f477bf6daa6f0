"""Mean AUC-PR / AUC-ROC of the default with outlier exposure, from exposure.py's files (reads labels: report only).

    python3 docs/results/exposure/report.py NPZ_DIR REFERENCE_TXT
    python3 docs/results/exposure/report.py protocol DEFAULT_CSV,... [METHOD@]BASELINE_CSV,... NPZ_DIR [NPZ_DIR ...]

REFERENCE_TXT: a per-run table of the same harness, setting, split and seed whose columns 0, 1 and the last are the
default as shipped, its network alone and IForest (../noisy_scoring/unsup_paper_seed0.txt). ``protocol``: the
issue's mean (each dataset's mean over its seeds, then the mean over datasets) of every run in the folders, against
the default's and a baseline's rows (IForest unless METHOD@ names another) of the same runs in committed bench
results.csv files (comma lists).
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ablation_snapshots"))
from report import ahead, baseline_rows, dataset_seed, npz_files, print_ahead_behind, seed_averaged  # noqa: E402
from sklearn.metrics import average_precision_score as ap  # noqa: E402
from sklearn.metrics import roc_auc_score as roc  # noqa: E402


def reference(path: str) -> dict:
    """{(dataset, seed): {"default", "network", "iforest": (AUC-PR, AUC-ROC)}} from a per-run table."""
    rows = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise SystemExit(f"{sys.argv[0]}: cannot read {path}: {e}") from None
    for line in lines:
        cells = line.split()
        if len(cells) > 2 and "|" in cells[0] and "/" in cells[1]:
            ds, seed = cells[0].split("|")
            pairs = [tuple(map(float, c.split("/"))) for c in cells[1:]]
            rows[(ds, int(seed))] = {"default": pairs[0], "network": pairs[1], "iforest": pairs[-1]}
    if not rows:
        raise SystemExit(f"{sys.argv[0]}: {path} holds no per-run rows")
    return rows


def protocol(default_csvs: str, baseline: str, dirs: list[str]) -> None:
    """Print the issue's protocol means of the exposure runs, and the default's and a baseline's of the same runs."""
    method, _, baseline_csvs = baseline.rpartition("@")
    method = method or "iforest"
    try:
        base = {m: baseline_rows(csvs.split(","), m) for m, csvs in (("default", default_csvs), (method, baseline_csvs))}
    except (OSError, KeyError, ValueError) as e:
        raise SystemExit(f"{sys.argv[0]}: cannot read the bench results: {e!r}") from None
    runs = {"exposure": {}, "default": {}, method: {}}
    for f in npz_files(dirs):
        d, key = np.load(f), dataset_seed(f)
        missing = [m for m in base if key not in base[m]]
        if missing:
            raise SystemExit(f"{sys.argv[0]}: no {' or '.join(missing)} row for {key} in the bench results")
        runs["exposure"][key] = (ap(d["y_test"], d["blend_test"]), roc(d["y_test"], d["blend_test"]))
        for m in base:
            runs[m][key] = base[m][key]
    means = {m: seed_averaged(r) for m, r in runs.items()}
    print(f"{len(runs['exposure'])} runs, {len(means['exposure'])} datasets (each dataset's mean over its seeds)")
    for m, r in means.items():
        avg = np.mean(list(r.values()), 0)
        pr, rc = ahead(r, means[method])
        print(f"{m:9s} {avg[0]:.3f} / {avg[1]:.3f}  ahead of {method} on {pr} / {rc}")
    up, down = ahead(means["exposure"], means["default"]), ahead(means["default"], means["exposure"])
    print(f"exposure against default: ahead / behind on {up[0]} / {down[0]} (AUC-PR) and {up[1]} / {down[1]} (AUC-ROC)")


def main() -> None:
    if len(sys.argv) >= 5 and sys.argv[1] == "protocol":
        return protocol(sys.argv[2], sys.argv[3], sys.argv[4:])
    if len(sys.argv) != 3:
        raise SystemExit(f"usage: {sys.argv[0]} NPZ_DIR REFERENCE_TXT | protocol DEFAULT_CSV,... "
                         "[METHOD@]BASELINE_CSV,... NPZ_DIR [NPZ_DIR ...]")
    ref = reference(sys.argv[2])
    rows = {}
    for f in npz_files([sys.argv[1]]):
        d, key = np.load(f), dataset_seed(f)
        if key not in ref:
            raise SystemExit(f"{sys.argv[0]}: {key} is not in {sys.argv[2]}")
        y = d["y_test"]
        rows[key] = {**ref[key], "exposure": (ap(y, d["blend_test"]), roc(y, d["blend_test"])),
                     "exposure, network": (ap(y, d["net_test"]), roc(y, d["net_test"])),
                     "left out": (float(d["left_out"][0]) / len(d["net_train"]), 0.0)}
    names = ["default", "network", "exposure", "exposure, network", "iforest"]
    print("dataset|seed".ljust(22) + "".join(n.rjust(19) for n in names) + "   left out")
    for (ds, seed), r in sorted(rows.items()):
        print(f"{ds}|{seed}".ljust(22) + "".join(f"{r[n][0]:.3f}/{r[n][1]:.3f}".rjust(19) for n in names)
              + f"   {r['left out'][0]:.3f}")
    print(f"\n{len(rows)} runs; mean AUC-PR / AUC-ROC")
    for n in names:
        m = np.mean([r[n] for r in rows.values()], 0)
        print(f"{n:18s} {m[0]:.3f} / {m[1]:.3f}")
    for a, b in (("exposure", "default"), ("exposure", "iforest"), ("default", "iforest"),
                 ("exposure, network", "network")):
        print_ahead_behind(rows, a, b)

if __name__ == "__main__":
    main()
