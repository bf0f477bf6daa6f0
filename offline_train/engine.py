"""Where the offline job's statistics passes run: in this process (``local``) or on a Dask cluster (``dask``).

A pass is a mergeable accumulator (``ColumnMoments``, ``offline_train.sigma_passes``)
fed every training row of a ``ParquetSource``. ``LocalEngine`` streams the
record batches through one accumulator here, in bounded memory. ``DaskEngine``
cuts the dataset into partitions of whole row groups, runs one accumulator per
partition on the cluster's workers (each streams its partition's batches) and
merges them here as they finish. Accumulators are exact (counts, integer sums,
minima and maxima), so both engines give the same scaler and sigmas, bit for
bit, whatever the partitioning or the order the partitions finish in.

Why Dask and not Ray Data: a pass is a plain map over file pieces and a merge
of small Python objects, which ``Client.map`` does directly; Dask is a light,
pure-Python dependency (no separate runtime or object store to run), starts a
local cluster in seconds, and its scheduler address is all a user needs to
share one cluster between many training jobs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import numpy as np

from .data import DataError, ParquetSource, Partition

# Rows per partition at least (whole row groups, so at least one): one task per partition, the unit
# of parallelism. 256k rows of 16 features is 32 MiB of values: tasks long enough to dwarf their
# overhead, and enough of them to keep every worker busy on a few million rows.
PARTITION_ROWS = 1 << 18
# At most this many tasks per worker and pass: a few, so that a slow worker does not hold up the pass,
# and a bounded number, since the scheduler's memory grows by about 200 KiB per task (measured here).
TASKS_PER_WORKER = 8


class EngineUnavailable(RuntimeError):
    """The chosen engine cannot run: its package is missing or its scheduler cannot be reached."""


class LocalEngine:
    """Every pass in this process, one record batch at a time."""

    name = "local"

    def reduce(self, source: ParquetSource, acc, keep_rows: Callable[[int, int], np.ndarray] | None = None):
        for X, _ in source.batches(keep_rows=keep_rows):
            acc.update(X)
        return acc

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _reduce_partition(part: Partition, source: ParquetSource, acc, keep_rows):
    """A worker's share of a pass: the accumulator over one partition, and its skipped-row count."""
    for X, _ in source.batches(part=part, keep_rows=keep_rows):
        acc.update(X)
    return acc, part.rows_skipped


def _worker_environ() -> dict:
    """Dask's worker environment without its MALLOC_TRIM_THRESHOLD_: setting that turns off glibc's
    adaptive mmap threshold, so every large numpy temporary is a fresh mmap and its page faults
    (measured here: the moments pass ran 2x slower on a worker than in-process)."""
    import dask

    env = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}))
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    return env


class DaskEngine(LocalEngine):
    """Each pass as one task per partition on a Dask cluster: ``scheduler`` (an address such as
    ``tcp://host:8786``), or without one a local cluster of ``workers`` processes started here."""

    name = "dask"

    def __init__(self, scheduler: str | None = None, workers: int = 2, partition_rows: int = PARTITION_ROWS,
                 connect_timeout_s: float = 10.0):
        try:
            import dask
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise EngineUnavailable("the dask engine needs dask[distributed]: pip install 'dask[distributed]'") from None
        self.partition_rows = partition_rows
        self._cluster = None
        self._scattered: dict[int, object] = {}
        logging.getLogger("distributed").setLevel(logging.ERROR)  # no start-up chatter on the job's stderr
        try:
            if scheduler:
                self.client = Client(scheduler, timeout=connect_timeout_s)
            else:
                # No statistical profiler on the workers: its samples feed only the dashboard, which is
                # off, and cost about a third more CPU per pass here.
                with dask.config.set({"distributed.nanny.pre-spawn-environ": _worker_environ(),
                                      "distributed.worker.profile.enabled": False}):
                    # The scheduler's HTTP server (health, metrics) takes port 8787 unless told otherwise, and
                    # warns on stderr when another Dask dashboard holds it: a free port, no dashboard.
                    self._cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                 host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                                 scheduler_kwargs={"dashboard": False}, silence_logs=logging.ERROR)
                self.client = Client(self._cluster)
        except (OSError, TimeoutError, ValueError) as e:
            self.close()
            where = f"the Dask scheduler at {scheduler}" if scheduler else "a local Dask cluster"
            raise EngineUnavailable(f"cannot reach {where}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None

    @property
    def workers(self) -> int:
        return len(self.client.scheduler_info().get("workers", {}))

    def reduce(self, source: ParquetSource, acc, keep_rows: Callable[[int, int], np.ndarray] | None = None):
        from dask.distributed import as_completed

        parts = source.partitions(self.partition_rows)
        cap = TASKS_PER_WORKER * max(self.workers, 1)
        if len(parts) > cap:  # bigger partitions, not more tasks: per-task bookkeeping would grow with the rows
            parts = source.partitions(-(-sum(p.rows for p in parts) // cap))
        if not parts:
            raise DataError(f"no rows in {source.path}")
        if id(source) not in self._scattered:  # ship the source to every worker once, not with each task
            self._scattered[id(source)] = self.client.scatter(source, broadcast=True, hash=False)
        futures = self.client.map(_reduce_partition, parts, source=self._scattered[id(source)], acc=acc,
                                  keep_rows=keep_rows, pure=False)
        total, skipped = None, 0
        try:
            for future, (part_acc, part_skipped) in as_completed(futures, with_results=True):
                total = part_acc if total is None else total.merge(part_acc)
                skipped += part_skipped
                future.release()  # merged: the worker may drop it now (memory stays flat over many partitions)
        except BaseException:
            self.client.cancel(futures)
            raise
        source.count_rows(sum(p.rows for p in parts), skipped)
        return total

    def close(self) -> None:
        client, cluster = getattr(self, "client", None), self._cluster
        self.client = self._cluster = None
        if client is not None:
            if cluster is not None:  # our own workers: a heartbeat racing the shutdown is no news for the job's stderr
                with contextlib.suppress(Exception):  # a worker already gone has nothing left to say
                    client.run(_quiet_shutdown)
            client.close()
        if cluster is not None:
            cluster.close()


def _quiet_shutdown() -> None:
    """On a worker of a local cluster being closed: log nothing below CRITICAL. A heartbeat in flight while the
    scheduler stops logs "Failed to communicate with scheduler during heartbeat." and a traceback at ERROR."""
    logging.getLogger("distributed").setLevel(logging.CRITICAL)


def make_engine(name: str, scheduler: str | None = None, workers: int = 2) -> LocalEngine:
    """The engine ``data.engine`` names."""
    if name == "local":
        return LocalEngine()
    if name == "dask":
        return DaskEngine(scheduler, workers)
    raise ValueError(f"unknown engine {name!r}: local or dask")
