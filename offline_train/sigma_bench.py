"""``kdsm bench sigmas``: rows/s of the statistics passes in-process vs on Dask workers, and peak RSS.

Generates Parquet files of the asked row counts (columns of every kind the
sigma rule meets: Gaussian, heavy-tailed, skewed, small counts with ties,
binary, spike), then for each size runs the moments pass and the sigma
passes on the ``local`` engine and on the ``dask`` engine with a local
cluster of ``--workers`` processes. Each run is a fresh child process, so its
peak RSS (and its workers') is its own. It checks the two engines give the
same scaler and kappas bit for bit, prints the figures and writes them to JSON.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import storage
from .argtypes import folder, positive_int
from .config import check_remote_out
from .engine import PARTITION_ROWS

KINDS = ("normal", "laplace", "lognormal", "poisson", "binary", "uniform", "student_t3", "spike")


def _column(kind: str, rng: np.random.Generator, n: int) -> np.ndarray:
    if kind == "normal":
        return rng.normal(size=n)
    if kind == "laplace":
        return rng.laplace(size=n)
    if kind == "lognormal":
        return np.round(rng.lognormal(size=n), 2)
    if kind == "poisson":
        return rng.poisson(3.0, n).astype(float)
    if kind == "binary":
        return rng.integers(0, 2, n).astype(float)
    if kind == "uniform":
        return rng.uniform(size=n)
    if kind == "student_t3":
        return rng.standard_t(3, size=n)
    return np.where(rng.random(n) < 0.985, 0.0, rng.integers(1, 17, n).astype(float))


def generate(directory: Path, rows: int, features: int, seed: int = 0, chunk_rows: int = 1 << 20,
             row_group_rows: int = 1 << 18) -> Path:
    """A Parquet file of ``rows`` x ``features`` float64 columns (f0, f1, ... cycling through KINDS), written
    chunk by chunk; an existing file of that shape is reused."""
    path = Path(directory) / f"sigmas-{rows}x{features}-seed{seed}.parquet"
    if path.exists() and pq.ParquetFile(path).metadata.num_rows == rows:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = [f"f{j}" for j in range(features)]
    tmp = path.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, pa.schema([(n, pa.float64()) for n in names])) as writer:
        for start in range(0, rows, chunk_rows):
            n = min(chunk_rows, rows - start)
            cols = [pa.array(_column(KINDS[j % len(KINDS)], rng, n)) for j in range(features)]
            writer.write_table(pa.table(cols, names=names), row_group_size=row_group_rows)
    tmp.replace(path)
    return path


def _peak_rss_mib() -> float:
    """This process's peak resident set size: VmHWM (getrusage's ru_maxrss would carry over the
    parent's peak across fork and exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(path: str, engine: str, workers: int, batch_rows: int, partition_rows: int) -> dict:
    """The moments pass and the sigma passes of ``path`` on one engine; run in a fresh process."""
    from .data import ParquetSource
    from .engine import DaskEngine, LocalEngine
    from .scaler import ColumnMoments, Scaler
    from .sigmas import KurtosisSigmas

    t = time.perf_counter()
    eng = DaskEngine(workers=workers, partition_rows=partition_rows) if engine == "dask" else LocalEngine()
    startup = time.perf_counter() - t
    with eng:
        source = ParquetSource(path, batch_rows=batch_rows, label_column=None)
        cpu0 = _cpu_seconds() + (sum(eng.client.run(_cpu_seconds).values()) if engine == "dask" else 0.0)
        t = time.perf_counter()
        moments = eng.reduce(source, ColumnMoments.empty(len(source.features)))
        moments_s = time.perf_counter() - t
        scaler = Scaler.from_moments(moments)
        passes = [0]

        def reduce(acc):
            passes[0] += 1
            return eng.reduce(source, acc)

        t = time.perf_counter()
        sig = KurtosisSigmas().fit_with(reduce, scaler)
        sigma_s = time.perf_counter() - t
        worker_rss = sorted(eng.client.run(_peak_rss_mib).values()) if engine == "dask" else []
        # CPU seconds of the passes, the job's process and its workers together: on a busy machine the
        # wall clock shows the load, this shows what the engine itself costs.
        cpu = _cpu_seconds() + (sum(eng.client.run(_cpu_seconds).values()) if engine == "dask" else 0.0) - cpu0
        n = source.rows_read
    return {"engine": engine, "workers": workers if engine == "dask" else 1, "rows": n,
            "features": len(scaler.mean_), "startup_s": round(startup, 2), "moments_pass_s": round(moments_s, 2),
            "sigma_passes": passes[0], "sigma_passes_s": round(sigma_s, 2),
            "sigma_rows_per_s": round(n / sigma_s), "all_passes_rows_per_s": round(n / (moments_s + sigma_s)),
            "cpu_s": round(cpu, 1), "rows_per_cpu_s": round(n / cpu),
            "peak_rss_mib": _peak_rss_mib(), "peak_rss_mib_workers": worker_rss,
            "scaler_mean": scaler.mean_.tolist(), "scaler_std": scaler.std_.tolist(),
            "kappas": sig.kappas_.tolist()}


def _run_child(args: dict) -> dict:
    """``measure`` in a fresh interpreter: a clean peak RSS."""
    out = subprocess.run([sys.executable, "-m", "offline_train.sigma_bench", json.dumps(args)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"benchmark child failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(sizes=(1_000_000, 10_000_000), features: int = 16, workers: int = 2, batch_rows: int = 65536,
        partition_rows: int = PARTITION_ROWS, data_dir="runs/bench-sigmas", out=None, log=print) -> dict:
    from .speed import cpu_name

    result = {"machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "load_avg_at_start": os.getloadavg()},
              "config": {"features": features, "kinds": [KINDS[j % len(KINDS)] for j in range(features)],
                         "workers": workers, "batch_rows": batch_rows, "partition_rows": partition_rows},
              "runs": [], "identical": {}, "speedup_dask_over_local": {}}
    for rows in sizes:
        t = time.perf_counter()
        path = generate(Path(data_dir), rows, features)
        log(f"data: {path} ({rows} rows x {features}, {path.stat().st_size / 2**20:.0f} MiB, "
            f"ready in {time.perf_counter() - t:.1f}s)")
        by_engine = {}
        for engine in ("local", "dask"):
            r = _run_child({"path": str(path), "engine": engine, "workers": workers, "batch_rows": batch_rows,
                            "partition_rows": partition_rows})
            r["load_avg_after"] = os.getloadavg()
            by_engine[engine] = r
            log(f"{rows:>10} rows  {engine:5s} x{r['workers']}: moments {r['moments_pass_s']:6.1f}s, "
                f"{r['sigma_passes']} sigma passes {r['sigma_passes_s']:6.1f}s = {r['sigma_rows_per_s']:>9} rows/s "
                f"({r['all_passes_rows_per_s']} rows/s with moments, {r['rows_per_cpu_s']} rows per CPU-second); "
                f"peak RSS {r['peak_rss_mib']} MiB"
                + (f", workers {r['peak_rss_mib_workers']} MiB, start-up {r['startup_s']}s" if engine == "dask" else ""))
        local, dask = by_engine["local"], by_engine["dask"]
        same = all(local[k] == dask[k] for k in ("scaler_mean", "scaler_std", "kappas"))
        result["identical"][str(rows)] = same
        result["speedup_dask_over_local"][str(rows)] = round(local["sigma_passes_s"] / dask["sigma_passes_s"], 2)
        log(f"{rows:>10} rows  engines agree bit for bit: {same}; "
            f"speed-up {result['speedup_dask_over_local'][str(rows)]}x on {workers} workers")
        for r in (local, dask):
            for k in ("scaler_mean", "scaler_std"):
                r.pop(k)
            result["runs"].append(r)
    result["machine"]["load_avg_at_end"] = os.getloadavg()
    if out:
        storage.write_bytes(out, json.dumps(result, indent=2).encode())  # a local file or an object (s3://...)
        log(f"wrote {out}")
    return result



def register_bench(sub, settings_cls) -> None:
    p = sub.add_parser("sigmas", help="rows/s and peak RSS of the statistics passes: local engine vs Dask workers")
    p.add_argument("--rows", type=positive_int, nargs="+", default=[1_000_000, 10_000_000], help="row counts to generate and measure")
    p.add_argument("--features", type=positive_int, default=16, help="feature columns")
    p.add_argument("--workers", type=positive_int, default=2, help="Dask worker processes of the local cluster")
    p.add_argument("--batch-rows", type=positive_int, default=65536, help="Parquet record-batch size")
    p.add_argument("--partition-rows", type=positive_int, default=PARTITION_ROWS, help="rows per Dask task at least (whole row groups)")
    p.add_argument("--data-dir", type=folder, default="runs/bench-sigmas", help="where the generated Parquet files are kept")
    p.add_argument("--out", default="runs/bench-sigmas.json", help="JSON file the figures are written to")
    p.set_defaults(func=lambda a: _main(a, settings_cls))


def _main(a, settings_cls) -> int:
    storage.check_output_file(a.out, "JSON", "bench-sigmas.json")  # before the data is generated and timed
    check_remote_out(a.out, settings_cls)
    run(a.rows, a.features, a.workers, a.batch_rows, a.partition_rows, a.data_dir, a.out)
    return 0


if __name__ == "__main__":
    print(json.dumps(measure(**json.loads(sys.argv[1]))))
