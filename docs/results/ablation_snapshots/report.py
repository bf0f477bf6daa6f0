"""Mean AUC-PR / AUC-ROC of score variants from variants.py's npz files (reads labels: report only).

    python3 docs/results/ablation_snapshots/report.py DIR BASELINE_RESULTS_CSV [BASELINE_RESULTS_CSV ...] [-v]

BASELINE_RESULTS_CSV: committed bench results.csv files of the same setting and split, for IForest's rows (every
dataset-seed of DIR's files needs one).
"""
import csv
import glob
import json
import os
import statistics as st
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from sklearn.metrics import average_precision_score as ap
from sklearn.metrics import roc_auc_score as roc

from offline_train.blend import Blend


def bench_split(path: str, setting: str, split: str, seed: int):
    """Standardised training and test rows and test labels: the bench's split and scaler (``runner._prepared``)."""
    from offline_train.evaluation.runner import _prepared

    X, sp, scaler = _prepared(path, setting, split, seed, False)
    return scaler.transform(X[sp.train_idx]), scaler.transform(X[sp.test_idx]), sp.y_test


def per_row_runs(per_row: str, data: str):
    """(file, dataset, seed, training rows, test rows, test labels, the file's arrays) for each per-row file in
    ``per_row`` (``DATASET_SETTING_SPLIT_SEED.npz``), on the bench's split of ``data``/DATASET.npz."""
    files = sorted(glob.glob(f"{per_row}/*.npz"))
    if not files:
        raise ValueError(f"no {per_row}/*.npz files")
    for f in files:
        *name, setting, split, seed = os.path.basename(f)[:-4].split("_")
        ds, seed = "_".join(name), int(seed)
        X_train, X_test, y = bench_split(f"{data}/{ds}.npz", setting, split, seed)
        p = np.load(f)
        if not (p["y_test"] == y).all():
            raise ValueError(f"{f}: not the bench's split")
        yield f, ds, seed, X_train, X_test, y, p


def alone_table(setting: str, split: str, data: str, labels: dict, test_scores) -> None:
    """Print each scorer's mean AUC-PR / AUC-ROC over every dataset of ``data`` x seeds 0-2 (and AUC-PR per seed) on
    the bench's split: ``labels`` maps a key to its printed label, ``test_scores(key, X_train, X_test, seed)`` gives
    the test rows' scores (higher = more anomalous)."""
    paths = sorted(glob.glob(f"{data}/*.npz"))
    if not paths:
        raise ValueError(f"no {data}/*.npz files")
    results = {}
    for path in paths:
        for seed in (0, 1, 2):
            X_train, X_test, y = bench_split(path, setting, split, seed)
            for key in labels:
                s = test_scores(key, X_train, X_test, seed)
                results[(path, seed, key)] = (ap(y, s), roc(y, s))
    print(f"{setting} {split}, {len(paths)} datasets x seeds 0-2: mean AUC-PR / AUC-ROC; AUC-PR per seed")
    for key, label in labels.items():
        mean = np.mean([results[(p, s, key)] for p in paths for s in (0, 1, 2)], axis=0)
        per_seed = [np.mean([results[(p, s, key)][0] for p in paths]) for s in (0, 1, 2)]
        print(f"{label} {mean[0]:.3f} / {mean[1]:.3f}   " + " ".join(f"{v:.3f}" for v in per_seed))


def print_file_means(per_row: str, rows: dict, width: int) -> None:
    """Print the mean (AUC-PR, AUC-ROC) of each variant over ``rows`` ({file: {variant: (AUC-PR, AUC-ROC)}})."""
    print(f"{per_row}: {len(rows)} files, mean AUC-PR / AUC-ROC")
    for key in next(iter(rows.values())):
        print(f"{key:{width}s} {np.mean([r[key][0] for r in rows.values()]):.3f} / "
              f"{np.mean([r[key][1] for r in rows.values()]):.3f}")


def baseline_rows(paths, method: str = "iforest") -> dict:
    """{(dataset, seed): (AUC-PR, AUC-ROC)} of a baseline's ok rows (IForest unless named) in bench results.csv files."""
    rows = {}
    for p in paths:
        for r in csv.DictReader(open(p)):
            if r["method"] == method and r["status"] == "ok":
                rows[(r["dataset"], int(r["seed"]))] = (float(r["aucpr"]), float(r["aucroc"]))
    return rows


def kept_share(depth_train: np.ndarray) -> float:
    """The share of training rows the refinement keeps (``refine.keep: auto``): one minus the warm start's estimate,
    the share of the default forest's depth scores over ``refine.threshold``, at most ``refine.max_drop`` left out."""
    from offline_train.config import TrainSettings

    refine = TrainSettings().refine
    return 1.0 - min(float(np.mean(depth_train > refine.threshold)), refine.max_drop)


def knn_reference(X_train: np.ndarray, ranking: np.ndarray, share: float, seed: int):
    """(k-NN part, reference row indices) as ``Detector._fit_neighbours`` builds them: a seeded sample of at most
    ``score.knn_rows`` of the ``share`` of standardised training rows ``ranking`` puts lowest."""
    from offline_train.config import TrainSettings
    from offline_train.neighbours import NeighbourScorer, reference_rows
    from offline_train.refine import lowest

    score = TrainSettings().score
    ref = reference_rows(lowest(ranking, share), score.knn_rows, seed)
    return NeighbourScorer.from_rows(X_train[ref].astype(np.float32), score.knn_k), ref


def knn_training_distances(net_train: np.ndarray, X_train: np.ndarray, seed: int, depth_train: np.ndarray) -> np.ndarray:
    """The k-NN part's distances of the training rows as the library fits the blend's moments on them: the reference
    is ``knn_reference`` of the kept share (``kept_share`` of the default forest's depth scores ``depth_train``) the
    network scores lowest, and a reference row skips itself. The per-row files' ``knn_train`` holds the part's plain
    distances (a reference row's nearest is itself); fitting the moments on those moved the thirty-seventh pass's
    means by at most 0.001 ("Thirty-eighth pass")."""
    import torch

    scorer, ref = knn_reference(X_train, net_train, kept_share(depth_train), seed)
    return scorer.training_distances(torch.from_numpy(X_train.astype(np.float32)), ref).numpy()


def run_main(main, errors=(OSError, ValueError, KeyError)) -> None:
    """``main(sys.argv)``; one of ``errors`` (a missing or unreadable file) exits with one line, no traceback."""
    try:
        main(sys.argv)
    except errors as e:
        raise SystemExit(f"{os.path.basename(sys.argv[0])}: {e}") from None


def alone_or_blend(doc: str, alone, blend, errors=(OSError, ValueError, KeyError)) -> None:
    """The command line of a script with two modes, ``alone SETTING SPLIT DATA_DIR`` and ``blend PER_ROW_DIR
    DATA_DIR``: the usage lines of ``doc`` for a wrong call, one line (no traceback) for one of ``errors``."""
    if not ((sys.argv[1:2] == ["alone"] and len(sys.argv) == 5) or (sys.argv[1:2] == ["blend"] and len(sys.argv) == 4)):
        raise SystemExit("usage:\n" + "\n".join(line for line in doc.splitlines() if "python3" in line))
    run_main(lambda argv: (alone if argv[1] == "alone" else blend)(*argv[2:]), errors)


def seed_averaged(runs: dict) -> dict:
    """{dataset: mean (AUC-PR, AUC-ROC) over its seeds} of {(dataset, seed): (AUC-PR, AUC-ROC)}."""
    by = defaultdict(list)
    for (ds, _), m in runs.items():
        by[ds].append(m)
    return {ds: np.mean(v, 0) for ds, v in by.items()}


def mean_over_datasets(runs: dict) -> np.ndarray:
    """Mean (AUC-PR, AUC-ROC) over the datasets of {(dataset, seed): (AUC-PR, AUC-ROC)}, each dataset's seeds averaged
    first."""
    return np.mean(list(seed_averaged(runs).values()), axis=0)


def ahead(a: dict, b: dict) -> tuple[int, int]:
    """On how many datasets a's seed-averaged (AUC-PR, AUC-ROC) is above b's, each rounded to 3 decimals."""
    return tuple(sum(round(a[ds][i], 3) > round(b[ds][i], 3) for ds in a) for i in (0, 1))


def npz_files(dirs, pattern: str = "*.npz") -> list[str]:
    """The per-row files matching pattern in each folder of dirs; none at all exits with one line."""
    files = sum((sorted(glob.glob(f"{d}/{pattern}")) for d in dirs), [])
    if not files:
        raise SystemExit(f"{sys.argv[0]}: no per-row file {pattern} in {' '.join(dirs)}")
    return files


def read_runs(paths) -> dict:
    """Per-run JSON files ({"dataset|seed": {variant: [AUC-PR, AUC-ROC]}}) merged; a missing or unreadable file exits
    with one line."""
    res = {}
    for p in paths:
        try:
            with open(p) as fh:
                runs = json.load(fh)
        except (OSError, ValueError) as e:
            raise SystemExit(f"{sys.argv[0]}: cannot read {p}: {e}") from None
        if not isinstance(runs, dict) or not all(isinstance(v, dict) and "|" in k for k, v in runs.items()):
            raise SystemExit(f"{sys.argv[0]}: {p} is not a per-run file ({{\"dataset|seed\": {{variant: [AUC-PR, AUC-ROC]}}}})")
        res.update(runs)
    return res


def rebuilt_runs(setting: str, split: str, dirs):
    """For each variants.py file in dirs: (dataset, seed, the file's arrays, test labels, standardised training and
    test rows), the split and scaler rebuilt as the bench builds them, from the datasets in $ADBENCH (as perrow.py
    reads them; ../shared/data/adbench by default)."""
    from offline_train.config import TrainSettings
    from offline_train.evaluation.runner import _prepared

    data = Path(os.environ.get("ADBENCH", "../shared/data/adbench"))
    scale_discrete = TrainSettings().data.scale_discrete
    for f in npz_files(dirs, f"*_{setting}_{split}_*.npz"):
        ds, seed = dataset_seed(f)
        X, sp, sc = _prepared(data / f"{ds}.npz", setting, split, seed, scale_discrete)
        Ztr, Zte = (np.clip(sc.transform(X[idx]), -1e4, 1e4) for idx in (sp.train_idx, sp.test_idx))
        yield ds, seed, np.load(f), sp.y_test, Ztr, Zte


def cores(d) -> dict:
    """The default's two cores of a variants.py file's training rows, as sorted indices: ``netcore`` = the share
    1 - (the forest's contamination estimate, at most refine.max_drop 0.5) the trained network finds most normal
    (what the refinement keeps), ``fcore50`` = the warm start's core (the forest's least isolated half)."""
    n = len(d["net_train"])
    est = min(float(np.mean(d["forest_train"] > 0.5)), 0.5)
    return {"netcore": np.sort(np.argsort(d["net_train"], kind="stable")[: max(2, int(np.ceil(n * (1 - est))))]),
            "fcore50": np.sort(np.argsort(d["forest_train"], kind="stable")[: max(2, int(np.ceil(n * 0.5)))])}


def print_run_summary(paths) -> None:
    """Print each variant's mean over datasets of each dataset's mean over its seeds, from per-run JSON files
    ({"dataset|seed": {variant: [AUC-PR, AUC-ROC]}}); 'ahead' counts datasets above the "forest alone" part."""
    res = read_runs(paths)
    per = defaultdict(dict)  # variant -> {(dataset, seed): (AUC-PR, AUC-ROC)}
    for key, v in res.items():
        ds, seed = key.split("|")
        for nm, m in v.items():
            per[nm][(ds, int(seed))] = m
    m = {nm: seed_averaged(r) for nm, r in per.items()}
    if not {"default", "forest alone"} <= m.keys():
        raise SystemExit(f"{sys.argv[0]}: the files hold no 'default' or 'forest alone' rows to summarise")
    width = max(map(len, m)) + 3
    print(f"{len(res)} runs, {len(m['default'])} datasets; 'ahead' = datasets where the variant's mean is above the "
          "forest part's (PyOD's IForest, same seed), AUC-PR / AUC-ROC")
    for nm in m:
        mean = np.mean(list(m[nm].values()), 0)
        pr, rc = ahead(m[nm], m["forest alone"])
        print(f"{nm:{width}s} {mean[0]:.3f} / {mean[1]:.3f}  ahead {pr:2d} / {rc:2d}")


def score_cli(score_run) -> None:
    """``SCRIPT SETTING SPLIT OUT.json NPZ_DIR [NPZ_DIR ...]``: score_run(setting, split, dirs) returns
    {"dataset|seed": {variant: (AUC-PR, AUC-ROC)}}, written to OUT.json; ``SCRIPT summary OUT.json ...`` prints it."""
    if len(sys.argv) < 3 or (sys.argv[1] != "summary" and len(sys.argv) < 5):
        raise SystemExit(f"usage: {sys.argv[0]} SETTING SPLIT OUT.json NPZ_DIR [NPZ_DIR ...] | summary OUT.json [OUT.json ...]")
    if sys.argv[1] == "summary":
        print_run_summary(sys.argv[2:])
        return
    out = Path(sys.argv[3])
    if not out.parent.is_dir():  # say so before the scoring, not after it
        raise SystemExit(f"{sys.argv[0]}: no folder {out.parent} for {out}")
    runs = score_run(sys.argv[1], sys.argv[2], sys.argv[4:])
    with open(out, "w") as fh:
        json.dump(runs, fh, indent=0)


def dataset_seed(path) -> tuple[str, int]:
    """(dataset, seed) of a variants.py file named DATASET_SETTING_SPLIT_SEED.npz."""
    stem = Path(path).stem
    return stem.rsplit("_", 3)[0], int(stem.rsplit("_", 1)[1])


def variant_rows(npz_dir: str, baseline_csv: str, method: str, variants, also: str | None = None) -> dict:
    """{(dataset, seed): {variant: (AUC-PR, AUC-ROC)}} of variants(arrays)'s test scores for each file in npz_dir,
    with ``method``'s row from baseline_csv where it has one. With ``also``, a folder of another script's files
    of the same runs: each file's arrays are joined by the same-named file's there (a run without one exits)."""
    try:
        base = baseline_rows([baseline_csv], method)
    except (OSError, KeyError, ValueError) as e:
        raise SystemExit(f"{sys.argv[0]}: cannot read {baseline_csv} as a bench results.csv: {e!r}") from None
    rows = {}
    for f in npz_files([npz_dir]):
        d = dict(np.load(f))
        other = Path(also) / Path(f).name if also is not None else None
        if other is not None and other.resolve() != Path(f).resolve():  # the same folder twice: nothing to join
            if not other.exists():
                raise SystemExit(f"{sys.argv[0]}: {other} is missing (the same run in {also})")
            joined = dict(np.load(other))
            if not np.array_equal(joined.get("y_test"), d.get("y_test")):
                raise SystemExit(f"{sys.argv[0]}: {f} and {other} have different test rows: not the same run")
            d = {**joined, **d}
        key = dataset_seed(f)
        rows[key] = {k: (ap(d["y_test"], s), roc(d["y_test"], s)) for k, s in variants(d).items()}
        if key in base:
            rows[key][method] = base[key]
    return rows


def print_variant_table(rows: dict) -> list[str]:
    """Print variant_rows' per-run table (columns numbered) and each variant's means; returns the variants' names."""
    names = list(next(iter(rows.values())))
    print("dataset|seed".ljust(22) + "".join(f"{i}".rjust(14) for i in range(len(names))))
    for (ds, seed), r in sorted(rows.items()):
        print(f"{ds}|{seed}".ljust(22) + "".join(f"{r[n][0]:.3f}/{r[n][1]:.3f}".rjust(14) for n in names if n in r))
    print(f"\n{len(rows)} runs; mean AUC-PR / AUC-ROC (column number: variant)")
    width = max(map(len, names))
    for i, n in enumerate(names):
        m = np.mean([r[n] for r in rows.values() if n in r], 0)
        print(f"{i}: {n:{width}s} {m[0]:.3f} / {m[1]:.3f}")
    return names


def print_ahead_behind(rows: dict, name: str, reference: str) -> None:
    """On how many runs variant ``name`` is ahead of / behind ``reference``, both rounded to 3 decimals."""
    a, b = ({k: r[n] for k, r in rows.items()} for n in (name, reference))
    up, down = ahead(a, b), ahead(b, a)
    print(f"{name}: ahead of / behind {reference} (3 decimals) on {up[0]} / {down[0]} (AUC-PR) and "
          f"{up[1]} / {down[1]} (AUC-ROC) of {len(rows)} runs")


def lg(x): return np.log(np.asarray(x, np.float64) + 1e-12)
def geo(d, names, part): return np.exp(np.mean([lg(d[f"{n}_{part}"]) for n in names], axis=0))
def blended(d, net_tr, net_te):
    return Blend.fit(net_tr, d["forest_train"])(net_te, d["forest_test"])

def standardise(tr, te, how="mean"):
    """te on the scale of tr: mean and standard deviation, or the robust median with MAD or IQR."""
    if how == "mean":
        return (te - tr.mean()) / (tr.std() + 1e-12)
    med = np.median(tr)
    if how == "mad":
        return (te - med) / (1.4826 * np.median(np.abs(tr - med)) + 1e-12)
    q1, q3 = np.percentile(tr, [25, 75])
    return (te - med) / ((q3 - q1) / 1.349 + 1e-12)

def default_parts(d):
    """A per-row file's two parts as z-scores of the test rows over the training rows (the network's on the log
    scale), and the rows every diagnosis reports: the two-part default ("default"), the network alone, the forest alone.

    "default" is the larger of the two z-scores, which ranks rows as the two-part blend does. It is rebuilt from the
    parts, not read from the file's stored blend: a file written while the library's default had a third part (the
    k-NN part: the default since the twenty-eighth pass, and switched on in the working tree during part of the
    twenty-seventh) stores the three-part score there."""
    zn = standardise(lg(d["net_train"]), lg(d["net_test"]))
    zf = standardise(d["forest_train"], d["forest_test"])
    return zn, zf, {"default": np.maximum(zn, zf), "network alone": d["net_test"], "forest alone": d["forest_test"]}

def max_z(d, nets, how="mean"):
    """Larger z-score of several network snapshots (log scale) and the forest, moments of the training rows.

    With one network and ``how="mean"`` it ranks rows as the default's blend (``blended``) does."""
    zs = [standardise(lg(d[f"{n}_train"]), lg(d[f"{n}_test"]), how) for n in nets]
    zs.append(standardise(d["forest_train"], d["forest_test"], how))
    return np.max(zs, axis=0)

def variants(d):
    v = {"default (blend, student)": d["blend_test"], "network alone": d["net_test"], "forest alone": d["forest_test"]}

    def have(*ns):
        return all(f"{n}_test" in d for n in ns)

    if have("teacher"):
        v["teacher alone"] = d["teacher_test"]
        v["blend, teacher"] = blended(d, d["teacher_train"], d["teacher_test"])
        v["blend, geo(student, teacher)"] = blended(d, geo(d, ["net", "teacher"], "train"), geo(d, ["net", "teacher"], "test"))
    if have("snap0", "snap1", "snap2"):
        for names in (["snap0"], ["snap1"], ["snap2"], ["snap0", "snap1", "snap2", "net"], ["snap1", "snap2", "net"]):
            v["blend, geo(" + ",".join(names) + ")"] = blended(d, geo(d, names, "train"), geo(d, names, "test"))
        v["max z(snap0, net, forest)"] = max_z(d, ["snap0", "net"])
        for how in ("mad", "iqr"):
            v[f"max z(net, forest), {how}"] = max_z(d, ["net"], how)
            v[f"max z(snap0, forest), {how}"] = max_z(d, ["snap0"], how)
        v["network geo(snap0..net)"] = geo(d, ["snap0", "snap1", "snap2", "net"], "test")
    return v

if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(f"usage: {sys.argv[0]} DIR BASELINE_RESULTS_CSV [BASELINE_RESULTS_CSV ...] [-v]")
    d_in, ifo = sys.argv[1], baseline_rows([a for a in sys.argv[2:] if a.endswith(".csv")])
    rows = {}
    for f in sorted(glob.glob(f"{d_in}/*.npz")):
        d = dict(np.load(f))
        ds, seed = dataset_seed(f)
        for k, s in variants(d).items():
            rows.setdefault(k, {})[(ds, seed)] = (ap(d["y_test"], s), roc(d["y_test"], s))
    keys = sorted(rows["default (blend, student)"])
    print(f"{len(keys)} dataset-seeds; IForest on the same: "
          f"{st.mean(ifo[k][0] for k in keys):.3f} / {st.mean(ifo[k][1] for k in keys):.3f}")
    for k, r in rows.items():
        ks = [x for x in keys if x in r]
        pr, rc = st.mean(r[x][0] for x in ks), st.mean(r[x][1] for x in ks)
        a0 = sum(round(r[x][0], 3) > round(ifo[x][0], 3) for x in ks)  # as the bench tables: 3 decimals
        a1 = sum(round(r[x][1], 3) > round(ifo[x][1], 3) for x in ks)
        print(f"{k:40s} {pr:.3f} / {rc:.3f}   ahead of IForest {a0}/{a1} of {len(ks)}")
    if "-v" in sys.argv:
        print("AUC-PR per dataset, columns in the order of the rows above")
        for x in keys:
            print(x, " ".join(f"{rows[k][x][0]:.3f}" for k in rows if x in rows[k]))
