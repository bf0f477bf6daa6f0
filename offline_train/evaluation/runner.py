"""Run the benchmark grid (dataset x seed x method) into a long, resumable CSV.

Every method of a (dataset, seed) sees the identical split and scaler. Each
finished run is appended to the CSV at once, so an interrupted benchmark
resumes: runs already ``ok`` in the CSV for the same setting, split, config
and seed are skipped; failed ones are retried. A dataset or method that fails
becomes a ``failed`` row with the reason and the grid goes on.

>>> key_of({"dataset": "14_glass", "setting": "semi", "split": "paper", "config": "ab12", "seed": "0", "method": "knn"})
('14_glass', 'semi', 'paper', 'ab12', 0, 'knn')
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import json
import re
import traceback
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..config import ConfigError
from ..data import DataError, load_npz
from ..scaler import Scaler
from ..sigmas import RULE_REVISION
from .methods import METHODS, fit_score
from .metrics import detection_metrics
from .protocol import make_split

CSV_FIELDS = ["dataset", "setting", "split", "profile", "config", "seed", "method", "status", "error",
              "n_rows", "n_train", "n_test", "n_test_anomalies", "d", "aucpr", "aucroc", "f1",
              "fit_s", "score_s", "fit_cpu_s", "steps", "epochs", "filtered_fraction", "kept_fraction"]


@dataclass
class BenchSpec:
    data_dir: Path
    out: Path
    datasets: list[str] | None = None
    methods: tuple[str, ...] = METHODS
    setting: str = "semi"
    split: str = "paper"
    seeds: tuple[int, ...] = (0,)

    @property
    def csv_path(self) -> Path:
        return Path(self.out) / "results.csv"


def short_name(dataset: str) -> str:
    """``14_glass`` -> ``glass`` (ADBench files are ``<number>_<name>.npz``)."""
    return re.sub(r"^\d+_", "", dataset)


def dataset_paths(data_dir: Path, names: Iterable[str] | None = None) -> list[Path]:
    """The ``.npz`` files of ``data_dir``, smallest ADBench number first; ``names`` match stem or short name."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"data directory not found: {data_dir}")
    files = sorted(data_dir.glob("*.npz"), key=lambda p: (int(m.group(1)) if (m := re.match(r"(\d+)_", p.stem)) else 10**9, p.stem))
    if names is None:
        if not files:
            raise DataError(f"no .npz files in {data_dir}")
        return files
    by_name = {}
    for f in files:
        by_name[f.stem.lower()] = f
        by_name.setdefault(short_name(f.stem).lower(), f)
    missing = [n for n in names if n.lower() not in by_name]
    if missing:
        raise DataError(f"datasets not found in {data_dir}: {', '.join(missing)}")
    return [by_name[n.lower()] for n in names]


def config_id(settings) -> str:
    """Short hash of everything that changes a deep model (not the seed, device or thread count).

    The step budget enters as resolved from the profile, so ``--profile fast``
    and the same budget set explicitly share rows. So does the sigma rule's
    revision: rows from an older rule are not resumed as if current.
    """
    dump = settings.model_dump(include={"sigma", "model", "ema", "train", "data"},
                               exclude={"train": {"seed", "device", "threads", "profile", "steps", "epochs",
                                                         "min_steps", "max_steps"},
                                        "data": {"batch_rows", "features", "id_column", "timestamp_column", "label_column"}})
    dump["budget"] = budget_rule(settings.train)
    dump["model"] = settings.train.model_for(settings.model).model_dump()
    if RULE_REVISION > 1:  # revision 1 predates the field: its rows keep their ids
        dump["sigma_rule"] = RULE_REVISION
    return hashlib.sha256(json.dumps(dump, sort_keys=True, default=str).encode()).hexdigest()[:8]


def budget_rule(train) -> str:
    """The step rule ``OptimConfig.budget`` applies, as text: ``steps=N`` or ``epochs=E,min=a,max=b``."""
    rule = train.budget_rule()
    if "steps" in rule:
        return f"steps={rule['steps']}"
    text = f"epochs={rule['epochs']}"
    for key, short in (("min_steps", "min"), ("max_steps", "max")):
        if rule[key] is not None:
            text += f",{short}={rule[key]}"
    return text


def key_of(row: dict) -> tuple:
    return (row["dataset"], row["setting"], row["split"], row["config"], int(row["seed"]), row["method"])


def read_rows(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _write_rows(path: Path, rows: list[dict]) -> None:
    tmp = Path(path).with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.6g}"
    return "" if v is None else v


@contextmanager
def sole_writer(out: Path):
    """Hold ``out`` for this process: two bench runs in one folder would rewrite each other's results.csv.

    An advisory lock on ``out/.lock``, released when the process ends, however it ends.
    """
    f = open(Path(out) / ".lock", "w")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"another kdsm bench adbench is writing to {out}: give this run its own --out "
                              "(kdsm bench compare reads several results.csv together)") from None
        yield
    finally:
        f.close()


def run_bench(spec: BenchSpec, settings, progress: bool = True) -> list[dict]:
    """Run every pending (dataset, seed, method) of ``spec``; returns the CSV rows of this spec."""
    Path(spec.out).mkdir(parents=True, exist_ok=True)
    with sole_writer(spec.out):
        return _run_pending(spec, settings, progress)


def _run_pending(spec: BenchSpec, settings, progress: bool) -> list[dict]:
    paths = dataset_paths(spec.data_dir, spec.datasets)
    cfg = config_id(settings)
    base = {"setting": spec.setting, "split": spec.split, "profile": settings.train.profile, "config": cfg}
    wanted = {(p.stem, spec.setting, spec.split, cfg, s, m) for p in paths for s in spec.seeds for m in spec.methods}
    rows = read_rows(spec.csv_path)
    done = {key_of(r) for r in rows if r["status"] == "ok"}
    # Failed runs of this spec are dropped and retried; everything else in the CSV is kept.
    rows = [r for r in rows if r["status"] == "ok" or key_of(r) not in wanted]
    _write_rows(spec.csv_path, rows)
    pending = [(p, s, m) for p in paths for s in spec.seeds for m in spec.methods
               if (p.stem, spec.setting, spec.split, cfg, s, m) not in done]
    bar = tqdm(total=len(pending), disable=not progress, desc="adbench", unit="run")
    with open(spec.csv_path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")

        def emit(row: dict) -> None:
            writer.writerow({k: _fmt(v) for k, v in row.items()})
            f.flush()
            rows.append({k: str(_fmt(v)) for k, v in row.items()})
            bar.update(1)

        by_ds: dict[Path, dict[int, list[str]]] = {}
        for p, s, m in pending:
            by_ds.setdefault(p, {}).setdefault(s, []).append(m)
        for p, seeds in by_ds.items():
            try:
                X, y = load_npz(p)
            except DataError as e:
                for s, ms in seeds.items():
                    for m in ms:
                        emit({**base, "dataset": p.stem, "seed": s, "method": m, "status": "failed", "error": str(e)})
                continue
            for s, ms in seeds.items():
                try:
                    split = make_split(y, spec.setting, spec.split, s)
                    scaler = Scaler.fit(X[split.scaler_idx], settings.data.scale_discrete)
                except ValueError as e:  # SplitError, or data the scaler cannot use
                    for m in ms:
                        emit({**base, "dataset": p.stem, "seed": s, "method": m, "status": "failed", "error": str(e)})
                    continue
                common = {**base, "dataset": p.stem, "seed": s, "n_rows": split.n_rows, "n_train": len(split.train_idx),
                          "n_test": len(split.test_idx), "n_test_anomalies": int(split.y_test.sum()), "d": X.shape[1]}
                for m in ms:
                    bar.set_postfix_str(f"{short_name(p.stem)} s{s} {m}")
                    try:
                        r = fit_score(m, X[split.train_idx], X[split.test_idx], scaler, settings, s)
                        met = detection_metrics(split.y_test, r.scores)
                        emit({**common, "method": m, "status": "ok", "error": "", **met, "fit_s": r.fit_seconds,
                              "score_s": r.score_seconds, "fit_cpu_s": r.fit_cpu_seconds, **r.info})
                    except Exception as e:  # one failed run must not stop the grid; the reason goes in the CSV
                        msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
                        tqdm.write(f"{p.stem} seed {s} {m} failed: {msg}\n{traceback.format_exc(limit=3)}")
                        emit({**common, "method": m, "status": "failed", "error": msg})
    bar.close()
    return [r for r in rows if key_of(r) in wanted]


def summarise(rows: list[dict], metric: str = "aucpr") -> dict[str, dict[str, float]]:
    """{method: {dataset: mean over seeds of ``metric``}} over ``ok`` rows."""
    acc: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if r["status"] == "ok":
            acc.setdefault(r["method"], {}).setdefault(r["dataset"], []).append(float(r[metric]))
    return {m: {d: float(np.mean(v)) for d, v in ds.items()} for m, ds in acc.items()}
