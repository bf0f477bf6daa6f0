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
import os
import re
import traceback
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..config import ConfigError
from ..data import DataError, load_npz
from ..scaler import Scaler
from ..sigmas import RULE_REVISION
from .methods import BASELINES, METHODS, fit_score
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
    """Short hash of everything that changes a deep model's scores (not the seed, device or thread count).

    The sections ``KDSM.from_settings`` reads: sigma, model, ema, refine, score, train and data. Not
    calibration: the bench calibrates in-sample whatever it says, and its severities and explanations do
    not change a score. The step budget enters as resolved from the profile, so ``--profile fast``
    and the same budget set explicitly share rows. So does the sigma rule's
    revision: rows from an older rule are not resumed as if current. Ids written before refine and
    score entered differ from today's for the same settings: those rows are re-run, not resumed.
    """
    dump = settings.model_dump(include={"sigma", "model", "ema", "refine", "score", "train", "data"},
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


def run_bench(spec: BenchSpec, settings, progress: bool = True, jobs: int = 1) -> list[dict]:
    """Run every pending (dataset, seed, method) of ``spec``; returns the CSV rows of this spec.

    ``jobs`` > 1 runs that many at once, each in its own process (see ``_pool``); this process alone
    writes the CSV, a row as each run finishes.
    """
    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    if Path(spec.out).exists() and not Path(spec.out).is_dir():
        raise ConfigError(f"--out {spec.out} is a file; name a directory for results.csv and the report")
    try:
        Path(spec.out).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create --out {spec.out}: {e}") from None
    with sole_writer(spec.out):
        return _run_pending(spec, settings, progress, jobs)


@dataclass(frozen=True)
class Unit:
    """One run of the grid: a method on one dataset and seed."""

    path: Path
    seed: int
    method: str
    setting: str
    split: str

    def row(self, base: dict) -> dict:
        """The start of this unit's CSV row: ``base`` (setting, split, profile, config) plus its own keys."""
        return {**base, "dataset": self.path.stem, "seed": self.seed, "method": self.method}


@lru_cache(maxsize=1)
def _prepared(path: Path, setting: str, split_mode: str, seed: int, scale_discrete: bool):
    """(X, split, scaler) of one dataset and seed: read and split once for all its methods (they come in a row).

    Every method of a (dataset, seed) gets the identical split and scaler: both are seeded.
    """
    X, y = load_npz(path)
    split = make_split(y, setting, split_mode, seed)
    return X, split, Scaler.fit(X[split.scaler_idx], scale_discrete)


def run_unit(unit: Unit, settings, base: dict) -> dict:
    """Fit and score one unit; its CSV row, ``failed`` with the reason when the data, split or fit fails."""
    row = unit.row(base)
    try:
        X, split, scaler = _prepared(unit.path, unit.setting, unit.split, unit.seed, settings.data.scale_discrete)
    except (DataError, ValueError, ArithmeticError) as e:  # unreadable file, SplitError, data the scaler cannot use
        return {**row, "status": "failed", "error": str(e)}
    row.update(n_rows=split.n_rows, n_train=len(split.train_idx), n_test=len(split.test_idx),
               n_test_anomalies=int(split.y_test.sum()), d=X.shape[1])
    try:
        r = fit_score(unit.method, X[split.train_idx], X[split.test_idx], scaler, settings, unit.seed)
        met = detection_metrics(split.y_test, r.scores)
        return {**row, "status": "ok", "error": "", **met, "fit_s": r.fit_seconds, "score_s": r.score_seconds,
                "fit_cpu_s": r.fit_cpu_seconds, **r.info}
    except Exception as e:  # one failed run must not stop the grid; the reason goes in the CSV
        msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
        tqdm.write(f"{unit.path.stem} seed {unit.seed} {unit.method} failed: {msg}\n{traceback.format_exc(limit=3)}")
        return {**row, "status": "failed", "error": msg}


def _worker_init(threads: int) -> None:
    """A pool worker: its CPU share, torch's and every BLAS / OpenMP pool's threads (several jobs on few
    cores must not each start one thread per core). Ctrl-C is left to the bench process, which stops the
    workers: a worker would turn the KeyboardInterrupt into its run's result and take the next run."""
    import signal
    import threading

    import torch
    from threadpoolctl import threadpool_limits
    from tqdm import tqdm

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # tqdm's default lock is a multiprocessing RLock: a named semaphore that the resource tracker (shared with the
    # bench process) records. A worker stopped on Ctrl-C (terminated) never unlinks it, and the tracker then warns
    # about "leaked semaphore objects" after the bench's one line. A worker's own bars need a thread lock only.
    tqdm.set_lock(threading.RLock())
    torch.set_num_threads(threads)
    threadpool_limits(threads)


def _pool(units: list[Unit], settings, base: dict, jobs: int):
    """(unit, row) as each finishes, ``jobs`` at a time in fresh (spawned) processes.

    Each worker gets ``train.threads`` torch threads, or the cores shared out (at least one): on small
    networks two one-thread runs side by side finish sooner than two-thread runs one after the other.
    The runs that train a network go first, the largest data first, so no long run starts last. A
    worker that dies (out of memory, a signal) fails its run and the rest, which a re-run retries.
    """
    import multiprocessing
    import signal
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    threads = settings.train.threads or max(1, (os.cpu_count() or 1) // jobs)
    units = sorted(units, key=lambda u: (u.method in BASELINES, -u.path.stat().st_size))
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init,
                             initargs=(threads,)) as pool:
        try:
            # The workers are spawned in submit. With Ctrl-C blocked here they start with it blocked (the signal mask
            # survives exec), so a Ctrl-C while they still import cannot raise in them (``_worker_init``, which ignores
            # it, runs only after the imports); here it waits and is raised on unblocking, into the handler below.
            # multiprocessing's resource tracker is started the same way.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                futures = {pool.submit(run_unit, u, settings, base): u for u in units}
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            for fut in as_completed(futures):
                u = futures[fut]
                try:
                    yield u, fut.result()
                except BrokenProcessPool as e:
                    yield u, {**u.row(base), "status": "failed", "error": f"the worker process died ({e}); re-run to retry"}
        except BaseException:  # Ctrl-C: drop what has not started, stop what runs (its row is not written)
            for worker in multiprocessing.active_children():
                worker.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _run_pending(spec: BenchSpec, settings, progress: bool, jobs: int) -> list[dict]:
    paths = dataset_paths(spec.data_dir, spec.datasets)
    cfg = config_id(settings)
    base = {"setting": spec.setting, "split": spec.split, "profile": settings.train.profile, "config": cfg}
    wanted = {(p.stem, spec.setting, spec.split, cfg, s, m) for p in paths for s in spec.seeds for m in spec.methods}
    rows = read_rows(spec.csv_path)
    done = {key_of(r) for r in rows if r["status"] == "ok"}
    # Failed runs of this spec are dropped and retried; everything else in the CSV is kept.
    rows = [r for r in rows if r["status"] == "ok" or key_of(r) not in wanted]
    _write_rows(spec.csv_path, rows)
    pending = [Unit(p, s, m, spec.setting, spec.split) for p in paths for s in spec.seeds for m in spec.methods
               if (p.stem, spec.setting, spec.split, cfg, s, m) not in done]
    bar = tqdm(total=len(pending), disable=not progress, desc="adbench", unit="run")
    with open(spec.csv_path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        if jobs > 1 and len(pending) > 1:
            finished = _pool(pending, settings, base, min(jobs, len(pending)))
        else:
            finished = ((u, run_unit(u, settings, base)) for u in pending)
        for u, row in finished:
            writer.writerow({k: _fmt(v) for k, v in row.items()})
            f.flush()
            rows.append({k: str(_fmt(v)) for k, v in row.items()})
            bar.set_postfix_str(f"{short_name(u.path.stem)} s{u.seed} {u.method}")
            bar.update(1)
    bar.close()
    return [r for r in rows if key_of(r) in wanted]


def summarise(rows: list[dict], metric: str = "aucpr") -> dict[str, dict[str, float]]:
    """{method: {dataset: mean over seeds of ``metric``}} over ``ok`` rows."""
    acc: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if r["status"] == "ok":
            acc.setdefault(r["method"], {}).setdefault(r["dataset"], []).append(float(r[metric]))
    return {m: {d: float(np.mean(v)) for d, v in ds.items()} for m, ds in acc.items()}
