"""The retrain job: fleet-wide lock -> archive window -> K-DSM-EMA -> validation gate -> register (-> promote).

``run_retrain`` is one run; ``kdsm retrain`` calls it (from cron / a
Kubernetes CronJob), ``kdsm retrain --request`` asks for one through the
Redis stream ``<prefix>retrain:requests`` (``streamer.lifecycle.requests``;
drift events write there too), and
``kdsm retrain --watch`` consumes that stream with a consumer group and runs
one retrain per burst of requests; requests a dead watcher left pending are
read back by its restart (stable consumer name) or claimed by another watcher
once stale (``stale_after_s``).

- **Lock**: redis-py's ``Lock`` (``SET NX PX`` with a random token; release
  and extension are Lua scripts that check the token, so a holder never frees
  a lock it lost). A thread renews it every third of ``retrain.lock_ttl_s``; a
  crashed holder's lock expires. A second job finds the lock taken and exits
  with status ``locked`` (exit code 0). The promotion moves the pointers only
  if the lock still holds this run's token (checked in the promote script):
  a run that lost its lock registers its version and does not promote it;
  so does a run during which ``current`` changed (an operator's promote or
  rollback): the promote script checks it is still the run's starting one.
- **Data**: closed archive files within ``retrain.window_hours``, newest
  first, until ``retrain.max_rows`` rows (file granularity); unreadable files
  are skipped and named in the run record, files of another feature schema
  (``kdsm_schema_hash`` not the current model's) skipped and counted. Fewer
  than ``retrain.min_rows`` usable rows: no training.
- **Training**: ``KDSM.from_settings(settings).fit_source(ParquetSource)`` on
  the current model's features: the same code as ``kdsm train``, with the
  EMA teacher from the config (K-DSM-EMA: the archive is contaminated). A
  current version that cannot be read fails the run (exit 2): never trained
  without it.
- **Gate** (``validate``): the registered artifact loads and scores the most
  recent ``gate_window_rows`` archived rows to finite values; its alert rate
  there at its own lowest threshold, divided by its calibrated rate, lies in
  [``gate_min_alert_ratio``, ``gate_max_alert_ratio``]; with
  ``gate_labelled_data``, its AUC-PR is not worse than the current model's
  by more than ``gate_max_auc_pr_drop``.
- Any failure leaves the pointers alone: the current model keeps serving.
  Every run is recorded in ``<prefix>retrain:runs`` and counted in
  ``kdsm_retrain_runs_total{outcome}``, which ``kdsm retrain --watch``
  serves on ``retrain.metrics_port`` (``streamer.ops.models.serve_metrics``).

>>> RetrainResult("locked").exit_code, RetrainResult("failed", reason="x").exit_code
(0, 1)
>>> RetrainResult("failed", reason="store unreachable", user_error=True).exit_code
2
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import LockError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from offline_train import storage
from offline_train.artifact import ArtifactError
from offline_train.data import DataError, ParquetSource, open_parquet
from offline_train.detector import KDSM
from offline_train.engine import make_engine
from offline_train.job import label_metrics

from .archive import closed_files
from .control import (
    RedisUnavailable,
    expect_types,
    mask_url,
    never_expires,
    read_raw,
    text_of,
    wrong_types,
)
from .metrics import LifecycleMetrics
from .registry import CurrentChanged, LockLost, ModelRegistry, RegistryError

log = logging.getLogger("kdsm.retrain")

EXIT_CODES = {"promoted": 0, "registered": 0, "locked": 0, "rejected": 3, "failed": 1}
WATCH_GROUP = "kdsm-retrain"
# Redis gone (stopped, restarting: refused) or not answering (paused, a partition: a connect or read timeout).
REDIS_DOWN = (RedisConnectionError, RedisTimeoutError)


@dataclass
class RetrainResult:
    status: str  # promoted | registered | rejected | failed | locked
    version: str | None = None
    reason: str | None = None
    details: dict = field(default_factory=dict)
    user_error: bool = False  # failed on something the user fixes (an unreachable store): exit 2, as kdsm's user errors

    @property
    def exit_code(self) -> int:
        return 2 if self.user_error else EXIT_CODES[self.status]

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("user_error")
        return out


class RetrainLock:
    """The fleet-wide retrain lock, renewed in the background while held."""

    def __init__(self, client, key: str, ttl_s: float):
        self.ttl_s = ttl_s
        self.lock = client.lock(key, timeout=ttl_s, blocking=False, thread_local=False)
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> bool:
        if not self.lock.acquire(blocking=False):
            return False
        self._thread = threading.Thread(target=self._renew, name="kdsm-retrain-lock", daemon=True)
        self._thread.start()
        return True

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.lock.extend(self.ttl_s, replace_ttl=True)
            except LockError as e:  # expired and maybe taken: say so; the run's result is still checked on promote
                log.error({"event": "retrain_lock_lost", "error": str(e)})
                self.lost.set()
                return
            except Exception as e:  # Redis blip: retry on the next tick while the TTL lasts
                log.warning({"event": "retrain_lock_renewal_failed", "error": str(e), "action": "retrying while the TTL lasts"})

    @property
    def token(self) -> bytes | None:
        """This holder's random token (what the lock key holds while it is ours)."""
        return self.lock.local.token

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.lock.release()
        except LockError:
            log.warning({"event": "retrain_lock_expired_at_release"})
        except REDIS_DOWN as e:  # the run is over either way: its lock expires within the TTL
            log.warning({"event": "retrain_lock_release_failed", "error": f"{type(e).__name__}: {e}",
                         "action": f"the lock expires within {self.ttl_s:g} s (retrain.lock_ttl_s)"})


# ---------------------------------------------------------------------- data
def _rows(path: Path) -> int | None:
    try:
        return open_parquet(path).metadata.num_rows
    except Exception:  # noqa: BLE001 - any unreadable file is skipped, never fatal
        return None


SCHEMA_COLUMN = "kdsm_schema_hash"  # written by the archive: the schema hash of the model that scored the row


def _file_info(path) -> tuple[int, frozenset] | None:
    """(rows, the schema hashes its ``kdsm_schema_hash`` column holds) of one closed file; None when unreadable.

    From the footer's row-group statistics (min == max: one hash), reading the column only where they are missing.
    A file without the column (not written by the archive) holds no hash, so it matches none.
    """
    try:
        pf = open_parquet(path)
        md = pf.metadata
        paths = [md.schema.column(i).path for i in range(md.num_columns)]
        if SCHEMA_COLUMN not in paths:
            return md.num_rows, frozenset()
        col, hashes = paths.index(SCHEMA_COLUMN), set()
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            st = rg.column(col).statistics
            if rg.num_rows == 0:
                continue
            if st is not None and st.has_min_max and not st.null_count:
                hashes.update((st.min, st.max))
            else:
                hashes.update(pf.read_row_group(g, columns=[SCHEMA_COLUMN]).column(0).unique().to_pylist())
        return md.num_rows, frozenset(hashes)
    except Exception:  # noqa: BLE001 - any unreadable file is skipped, never fatal
        return None


def select_window(root, window_hours: float | None, max_rows: int, now: float | None = None,
                  schema_hash: str | None = None) -> dict:
    """Newest readable closed files of one feature schema within the window until ``max_rows`` rows; oldest first.

    The schema is ``schema_hash`` (the current model's), else, with no current model, the newest file's: rows
    another model scored have other feature columns (or another encoding of the same names), and training on them
    would impute what they lack. Files of another schema are skipped and listed in ``other_schema``.
    """
    now = time.time() if now is None else now
    files = closed_files(root) if storage.is_remote(root) or Path(root).is_dir() else []
    if window_hours is not None:
        files = [f for f in files if now - f.stat().st_mtime <= window_hours * 3600]
    chosen, skipped, other, rows = [], [], [], 0
    found: dict[str, int] = {}
    for f in reversed(files):
        info = _file_info(f)
        if info is None:
            skipped.append(str(f))
            continue
        n, hashes = info
        if n == 0:
            continue
        if schema_hash is None and len(hashes) == 1 and None not in hashes:
            schema_hash = next(iter(hashes))
        if hashes != {schema_hash}:
            other.append(str(f))
            for h in hashes or ("none",):
                found[str(h)] = found.get(str(h), 0) + 1
            continue
        chosen.append(f)
        rows += n
        if rows >= max_rows:
            break
    chosen.reverse()
    if other:
        log.warning({"event": "retrain_files_other_schema", "files": len(other), "schema_hash": schema_hash,
                     "found": dict(sorted(found.items())[:10]), "example": other[0],
                     "action": "skipped: rows of another model's features"})
    mt = [f.stat().st_mtime for f in chosen]
    return {"files": chosen, "rows": rows, "unreadable": skipped, "other_schema": other, "schema_hash": schema_hash,
            "from": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(min(mt))) if mt else None,
            "to": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(max(mt))) if mt else None}


def _source(files, features, label_column=None) -> ParquetSource:
    return ParquetSource([str(f) for f in files], features=features, id_column="id", timestamp_column="ts",
                         label_column=label_column)


def recent_rows(files: list[Path], features: list[str], n: int) -> np.ndarray:
    """The ``n`` most recently archived usable rows (from the newest files)."""
    picked, rows = [], 0
    for f in reversed(files):
        picked.append(f)
        rows += _rows(f) or 0
        if rows >= n:
            break
    X, _ = _source(list(reversed(picked)), features).load()
    return X[-n:]


# ---------------------------------------------------------------------- gate
def validate(settings, new_path, current: KDSM | None, files: list[Path]) -> dict:
    """The validation gate. Returns {"passed", "reason", "checks"}; never raises for a bad model."""
    rc = settings.retrain
    checks: dict = {}

    def fail(reason: str) -> dict:
        return {"passed": False, "reason": reason, "checks": checks}

    try:
        new = KDSM.load(new_path, device=settings.registry.device)
        checks["loads"] = True
    except (ArtifactError, OSError) as e:
        checks["loads"] = False
        return fail(f"artifact does not load: {e}")
    try:
        X = recent_rows(files, new.feature_names_, rc.gate_window_rows)
        scores = new.decision_function(X)
    except (DataError, ValueError) as e:
        return fail(f"cannot score the recent window: {e}")
    checks["scored_rows"] = int(len(X))
    if not np.isfinite(scores).all():
        return fail("non-finite scores on the recent window")
    expected = 1.0 - min(new.calibration_.quantiles.values())
    rate = float(np.mean(scores >= new.threshold_))
    ratio = rate / expected
    checks["alert_rate"] = {"rate": rate, "calibrated": expected, "ratio": ratio,
                            "bounds": [rc.gate_min_alert_ratio, rc.gate_max_alert_ratio]}
    if not rc.gate_min_alert_ratio <= ratio <= rc.gate_max_alert_ratio:
        return fail(f"alert rate {rate:.4f} on the recent {len(X)} rows is {ratio:.2f}x the calibrated {expected:.4f}, "
                    f"outside [{rc.gate_min_alert_ratio}, {rc.gate_max_alert_ratio}]")
    if rc.gate_labelled_data:
        label = settings.data.label_column or "label"
        try:
            Xl, yl = ParquetSource(rc.gate_labelled_data, features=new.feature_names_, label_column=label).load()
        except DataError as e:
            return fail(f"labelled data unusable: {e}")
        # Configured labelled data the check cannot use fails the gate: skipping it would promote a version the
        # operator asked to compare with the current one, on the word of a check that never ran.
        if yl is None:
            checks["labels"] = {"new": None, "current": None}
            return fail(f"labelled data {rc.gate_labelled_data} has no label column {label!r} (data.label_column): "
                        "the AUC-PR check cannot run")
        m_new = label_metrics(yl, new.decision_function(Xl))
        m_cur = label_metrics(yl, current.decision_function(Xl)) if (current is not None and m_new) else None
        checks["labels"] = {"new": m_new, "current": m_cur}
        if m_new is None:
            return fail(f"labelled data {rc.gate_labelled_data}: its {len(yl)} usable rows hold labels of one class "
                        f"only (column {label!r}, data.label_column): no AUC-PR to compare, the check cannot run")
        if m_cur and m_new["auc_pr"] < m_cur["auc_pr"] - rc.gate_max_auc_pr_drop:
            return fail(f"AUC-PR on labelled rows {m_new['auc_pr']:.3f} is worse than the current model's "
                        f"{m_cur['auc_pr']:.3f} by more than {rc.gate_max_auc_pr_drop}")
    return {"passed": True, "reason": None, "checks": checks}


# ---------------------------------------------------------------------- the job
def run_retrain(settings, registry: ModelRegistry, reason: str = "schedule", now: float | None = None,
                metrics: LifecycleMetrics | None = None,
                on_finish: Callable[[RetrainResult], None] | None = None) -> RetrainResult:
    """One retrain under the fleet lock; the outcome is logged, counted and recorded in Redis.

    ``on_finish(result)`` runs after a run that took the lock, before the lock is released (the watcher
    acknowledges its requests there: a watcher that finds the lock free finds them acknowledged or orphaned).
    """
    lock = RetrainLock(registry.r, registry.keys.lock, settings.retrain.lock_ttl_s)
    started = time.time()
    try:
        acquired = lock.acquire()
    except REDIS_DOWN as e:  # gone since the start-up PING: one line (exit 2), and --watch waits for it
        raise RedisUnavailable(f"Redis at {mask_url(settings.redis.url)} did not answer taking the retrain lock "
                               f"{registry.keys.lock} (redis.url, redis.connect_timeout_s, redis.command_timeout_s): "
                               f"{type(e).__name__}: {e}") from None
    if not acquired:
        res = _not_acquired(registry)
    else:
        try:
            try:
                res = _run_locked(settings, registry, reason, now, lock)
            except RegistryError as e:  # a registry key written by hand (one line naming it and its repair): exit 2
                log.error({"event": "retrain_registry_unusable", "error": str(e)})
                res = RetrainResult("failed", reason=str(e), user_error=True)
            except REDIS_DOWN as e:  # lost mid-run: nothing promoted (the promote script runs in Redis); exit 2
                why = f"Redis at {mask_url(settings.redis.url)} stopped answering during the run: {type(e).__name__}: {e}"
                log.error({"event": "retrain_redis_unavailable", "error": why})
                res = RetrainResult("failed", reason=why, user_error=True)
            except Exception as e:  # noqa: BLE001 - record any unexpected failure; the pointers are untouched
                log.exception({"event": "retrain_unexpected_error", "error": f"{type(e).__name__}: {e}"})
                res = RetrainResult("failed", reason=f"unexpected error: {type(e).__name__}: {e}")
            if on_finish is not None:
                try:
                    on_finish(res)
                except Exception as e:  # noqa: BLE001 - the run is done; its caller sees what is left undone
                    log.warning({"event": "retrain_on_finish_failed", "error": f"{type(e).__name__}: {e}"})
        finally:
            lock.release()
    (metrics or LifecycleMetrics()).retrain_runs.labels(res.status).inc()
    record = {"status": res.status, "version": res.version or "", "reason": res.reason or "", "trigger": reason,
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
              "seconds": f"{time.time() - started:.2f}", "host": socket.gethostname(),
              "details": json.dumps(res.details, default=str)}
    try:
        registry.r.xadd(registry.keys.runs, record, maxlen=1000, approximate=True)
    except Exception as e:  # noqa: BLE001 - the log line still has it
        log.warning({"event": "retrain_record_failed", "error": str(e)})
    (log.info if res.status in ("promoted", "registered", "locked") else log.error)(
        {"event": "retrain_finished", "status": res.status, "version": res.version, "reason": res.reason})
    return res


def _not_acquired(registry: ModelRegistry) -> RetrainResult:
    """The lock was taken: by another retrain (``locked``), or by a key that never expires (``failed``).

    A retrain's lock always expires (``SET NX PX``, renewed while it runs). A lock key without an expiry was written
    by hand (or by another program under ``redis.key_prefix``) and would answer ``locked``, exit 0, to every retrain
    for ever: that is a failure, naming the key to delete (``details["lock"]``: the watcher keeps its requests).
    """
    key = registry.keys.lock
    if never_expires(registry.r, key):
        res = RetrainResult("failed", reason=f"{key} exists without an expiry, so it is no retrain's lock (written by "
                                             f"hand?) and would block every retrain: delete it (redis-cli DEL {key})",
                            details={"lock": {"key": key, "never_expires": True}})
        log.error({"event": "retrain_lock_never_expires", "key": key, "reason": res.reason})
        return res
    res = RetrainResult("locked", reason=f"another retrain holds {key}; nothing to do")
    log.info({"event": "retrain_locked", "reason": res.reason})
    return res


def _check_registry_keys(registry: ModelRegistry, version: str | None = None) -> None:
    """A ``RegistryError`` naming each registry key of another Redis type (written by hand) ``add`` would write.

    Checked before the training and again before the artifact is copied into the store: ``add`` copies first and
    registers after, so a ZADD refused then (WRONGTYPE) left an artifact and an entry no version set lists.
    """
    keys = registry.keys
    expected = {keys.versions: "zset", keys.pointers: "hash", keys.log: "stream"}
    if version:
        expected[keys.version(version)] = "string"
    line = wrong_types(registry.r, expected)
    if line:
        raise RegistryError(line)


def _run_locked(settings, registry: ModelRegistry, trigger: str, now, lock: RetrainLock) -> RetrainResult:
    rc = settings.retrain
    try:  # a current pointer promote refuses (not UTF-8, a key of another type): said now, not after the training
        cur_version = registry.checked_current_version()
    except RegistryError as e:  # a pointer written by hand: the user repairs it (exit 2, as every registry key's)
        return RetrainResult("failed", reason=str(e), user_error=True)
    _check_registry_keys(registry)  # a registry key of another type: said now (RegistryError, exit 2)
    current = None
    if cur_version:
        # Never trained without it: the new version would lose its features and feature spec (another schema hash, so
        # streamers refuse it) and the gate its comparison. A store that cannot be reached or a damaged copy: exit 2.
        try:
            current = KDSM.load(registry.store.location(cur_version), device=settings.registry.device)
        except Exception as e:  # noqa: BLE001 - any failure to read it (StorageError, ArtifactError, OSError, ...)
            why = (str(e) if isinstance(e, storage.StorageError) else f"{type(e).__name__}: {e}").splitlines()[0]
            reason = f"artifact store unusable: the current version {cur_version} cannot be read: {why}"
            log.error({"event": "current_model_unloadable", "version": cur_version, "error": why,
                       "action": "no training: repair it (kdsm models add --model DIR) or promote another version"})
            return RetrainResult("failed", reason=reason, user_error=True)
    features = current.feature_names_ if current is not None else settings.data.features
    if not features:
        return RetrainResult("failed", reason="no feature list: the registry has no current model and data.features is not set")
    if not settings.archive.dir:
        return RetrainResult("failed", reason="archive.dir is not set: nothing to train on")
    try:  # an object-store archive that cannot be reached: one line and exit 2, not an unexpected error's traceback
        window = select_window(settings.archive.dir, rc.window_hours, rc.max_rows, now,
                               schema_hash=current.schema_hash_ if current is not None else None)
    except (storage.StorageError, DataError) as e:
        return RetrainResult("failed", reason=f"archive unusable: {e}", user_error=True)
    details = {"current": cur_version, "trigger": trigger,
               "window": {k: (len(v) if k in ("files", "other_schema") else v) for k, v in window.items()}}
    if not window["files"]:
        why = f"empty window: no readable archive files under {settings.archive.dir} within {rc.window_hours} h"
        if window["unreadable"]:
            why += f" ({len(window['unreadable'])} unreadable)"
        if window["other_schema"]:
            why += f" ({len(window['other_schema'])} of another feature schema than {window['schema_hash']})"
        return RetrainResult("failed", reason=why, details=details)
    try:
        source = _source(window["files"], features)
        usable = sum(len(Xb) for Xb, _ in source.batches())
    except DataError as e:
        return RetrainResult("failed", reason=f"archive data unusable: {e}", details=details)
    details["usable_rows"] = usable
    if usable < rc.min_rows:
        return RetrainResult("failed", reason=f"too little data: {usable} usable rows < retrain.min_rows={rc.min_rows}",
                             details=details)
    if not settings.ema.enabled:
        log.warning({"event": "ema_disabled", "why": "training plain K-DSM on contaminated archive data"})
    try:
        dc = settings.data  # data.engine: the statistics passes in this process, or on a Dask cluster
        with make_engine(dc.engine, dc.scheduler, dc.workers) as engine:
            # The archive holds the encoded columns the current spec made: the new model keeps that spec (its
            # medians, modes and vocabularies), so it reads the same events and has the same schema hash; given to
            # the fit, not set after it, so the scaler keeps its category columns apart (an unseen category stands
            # far off: a window where a category column never leaves its value would otherwise scale it as noise).
            spec = current.features_ if current is not None else None
            det = KDSM.from_settings(settings).fit_source(
                _source(window["files"], features), on_phase=lambda text: log.info({"event": "retrain_phase", "phase": text}),
                engine=engine, features=spec)
    except Exception as e:  # noqa: BLE001 - a training failure keeps the current model
        return RetrainResult("failed", reason=f"training failed: {type(e).__name__}: {e}", details=details)
    details["train"] = {k: v for k, v in det.train_summary_.to_dict().items() if k != "loss_curve"}
    tmp = Path(tempfile.mkdtemp(prefix="kdsm-retrain-"))
    try:
        _check_registry_keys(registry, det.version_)  # again, before the store is written: no orphan artifact
        data_window = {"from": window["from"], "to": window["to"], "rows": window["rows"], "usable_rows": usable,
                       "files": [str(f) for f in window["files"]]}
        det.save(tmp / "model", extra={"data_window": data_window, "trigger": trigger})
        version = registry.add(tmp / "model", meta={"data_window": data_window, "trigger": trigger,
                                                     "parent": cur_version, "status": "validating"})
    except (storage.StorageError, DataError) as e:  # the artifact store (registry.store_dir) cannot be reached
        return RetrainResult("failed", reason=f"artifact store unusable: {e}", details=details, user_error=True)
    except RegistryError as e:  # a registry key overwritten during the training
        log.error({"event": "retrain_registry_unusable", "error": str(e)})
        return RetrainResult("failed", reason=str(e), details=details, user_error=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    try:
        gate = validate(settings, registry.store.location(version), current, window["files"])
    except Exception as e:  # noqa: BLE001 - a gate that cannot judge the version rejects it (never left validating)
        why = f"gate error: {type(e).__name__}: {e}".splitlines()[0]
        log.error({"event": "retrain_gate_error", "version": version, "error": why})
        gate = {"passed": False, "reason": why, "checks": {}}
    details["gate"] = gate
    registry.update(version, gate=gate, status="validated" if gate["passed"] else "rejected")
    if not gate["passed"]:
        return RetrainResult("rejected", version, f"gate: {gate['reason']}", details)
    lost = RetrainResult("registered", version, "lock lost during the run: registered, not promoted", details)
    if lock.lost.is_set():
        return lost
    if not rc.auto_promote:
        return RetrainResult("registered", version, "passed the gate; retrain.auto_promote is off", details)
    try:  # the renewal thread looks only every third of the TTL: the promotion itself checks the token, atomically
        # and that current is still the version this run started from: an operator's promote or rollback made
        # while it ran wins over it.
        registry.promote(version, reason=f"retrain ({trigger})", lock_token=lock.token, expect_current=cur_version)
    except LockLost as e:
        log.error({"event": "retrain_lock_lost", "error": str(e), "action": "registered, not promoted"})
        lock.lost.set()
        return lost
    except CurrentChanged as e:
        log.warning({"event": "retrain_current_changed", "error": str(e), "action": "registered, not promoted"})
        return RetrainResult("registered", version, f"current changed during the run: {e}", details)
    return RetrainResult("promoted", version, f"passed the gate; {cur_version} -> {version}", details)


# ---------------------------------------------------------------------- requests
def stale_after_s(rc) -> float:
    """How long a request may stay pending with one watcher before another claims it: ``request_delay_s + lock_ttl_s``.

    A live watcher holds a request at most ``request_delay_s`` before its run takes the lock (or finds it taken, and
    reads it again as soon as the lock is free); from then on the run holds the lock and acknowledges before releasing
    it. So a request pending longer than the delay, with a margin of one lock TTL, while the lock is free, belongs to
    a watcher that died.

    >>> from streamer.lifecycle.config import RetrainConfig
    >>> stale_after_s(RetrainConfig())
    900.0
    """
    return rc.request_delay_s + rc.lock_ttl_s


def _pending(client, registry: ModelRegistry, consumer: str, stale_ms: int) -> list:
    """Requests left unacknowledged: stale ones of any watcher (claimed), then all of this consumer's own.

    Nothing while the retrain lock is held: the holder may be serving them (it acknowledges before it releases the
    lock), or it died and the lock expires within ``lock_ttl_s``. The lock is checked before the read, so a request
    acknowledged by a run that has just ended is not read again.
    """
    stream = registry.keys.requests
    if client.exists(registry.keys.lock):
        return []
    cursor = "0-0"
    for _ in range(100):  # 100 x 100 entries claimed per look at most; the rest at the next loop
        cursor, claimed, *_ = read_raw(client, "XAUTOCLAIM", stream, WATCH_GROUP, consumer, stale_ms, cursor,
                                       "COUNT", 100)
        if claimed:
            log.warning({"event": "retrain_requests_claimed", "requests": len(claimed), "consumer": consumer,
                         "why": f"pending longer than {stale_ms / 1000:g} s with a watcher that is gone"})
        if cursor in ("0-0", b"0-0"):
            break
    return _requests(client, consumer, stream, "0")


def _requests(client, consumer: str, stream: str, start: str, block_ms: int | None = None) -> list:
    """XREADGROUP's (id, fields) pairs, read undecoded (``read_raw``) then decoded by ``text_of``.

    A request written by hand with a field that is not UTF-8 is a request like any other (its text with U+FFFD),
    as one with odd fields is, not a ``UnicodeDecodeError`` that stops the watcher (and stops every restart of it,
    since the request stays pending).
    """
    block = ["BLOCK", block_ms] if block_ms is not None else []
    got = read_raw(client, "XREADGROUP", "GROUP", WATCH_GROUP, consumer, "COUNT", 100, *block, "STREAMS", stream, start)
    return [(text_of(mid), {text_of(k): text_of(v) for k, v in (fields or {}).items()})
            for _, batch in (got or []) for mid, fields in batch]


def watch(settings, registry: ModelRegistry, blocking_client, stop: threading.Event | None = None,
          max_runs: int | None = None, consumer: str | None = None,
          metrics: LifecycleMetrics | None = None) -> list[RetrainResult]:
    """Consume retrain requests (consumer group ``kdsm-retrain``): one run per burst of requests.

    A run starts ``retrain.request_delay_s`` after the newest request of the
    burst (time for the new regime's data to reach closed archive files).
    Requests older than the start of the last run are acknowledged without a
    new run (that run already used the data they asked about).

    No request is lost with a watcher: the consumer name is stable (``consumer``,
    default the host name), and before each read of new requests the watcher
    takes what is left pending (``_pending``): its own (a restarted watcher's)
    and, once pending longer than ``stale_after_s``, any other watcher's. A
    run's requests are acknowledged before it releases the lock; requests
    (fresh or recovered) whose run finds the lock taken by another retrain stay
    pending and are run once the lock is free.

    Redis gone or not answering (``REDIS_DOWN``: refused, a connect or read timeout) is waited out, at start
    (XGROUP CREATE), at each read and at the lock (``RedisUnavailable`` from ``run_retrain``): the watcher logs
    ``retrain_watch_redis_unavailable`` and tries again; its requests stay pending meanwhile.

    A request key of another Redis type (written by hand) is a ``RegistryError`` naming it, not a traceback.
    """
    with expect_types(blocking_client, RegistryError, {registry.keys.requests: "stream"}):
        return _watch(settings, registry, blocking_client, stop, max_runs, consumer, metrics)


def _watch(settings, registry: ModelRegistry, blocking_client, stop: threading.Event | None, max_runs: int | None,
           consumer: str | None, metrics: LifecycleMetrics | None) -> list[RetrainResult]:
    stop = stop or threading.Event()
    stream, consumer = registry.keys.requests, consumer or socket.gethostname()
    retry_s = min(5.0, settings.retrain.watch_block_s)

    def redis_down(e: Exception) -> None:  # Redis restarting: wait and read again, never exit on it
        log.warning({"event": "retrain_watch_redis_unavailable", "error": f"{type(e).__name__}: {e}",
                     "action": f"retrying in {retry_s:g} s"})
        stop.wait(retry_s)

    def create_group() -> None:
        while not stop.is_set():
            try:
                blocking_client.xgroup_create(stream, WATCH_GROUP, id="0", mkstream=True)
                return
            except ResponseError as e:
                if "BUSYGROUP" not in str(e):
                    raise
                return
            except REDIS_DOWN as e:
                redis_down(e)

    create_group()
    results: list[RetrainResult] = []
    last_start_ms = 0
    block_ms = int(settings.retrain.watch_block_s * 1000)
    stale_ms = int(stale_after_s(settings.retrain) * 1000)
    while not stop.is_set() and (max_runs is None or len(results) < max_runs):
        try:
            msgs = _pending(blocking_client, registry, consumer, stale_ms)
            recovered = bool(msgs)
            if not msgs:
                msgs = _requests(blocking_client, consumer, stream, ">", block_ms)
        except REDIS_DOWN as e:
            redis_down(e)
            continue
        except ResponseError as e:
            if "NOGROUP" not in str(e):
                raise
            # The stream was deleted (or Redis lost its data): recreate the group and go on.
            create_group()
            continue
        if not msgs:
            continue
        ids = [mid for mid, _ in msgs]
        fresh = [(mid, f) for mid, f in msgs if int(mid.split("-")[0]) >= last_start_ms]
        if fresh:
            # Let data of the new regime reach closed archive files before training on it.
            newest_ms = max(int(mid.split("-")[0]) for mid, _ in fresh)
            # At most request_delay_s: a request id in the future (XADD with an id by hand, a Redis clock ahead) would
            # wait past any timeout (OverflowError) or for ever.
            delay = settings.retrain.request_delay_s
            if stop.wait(min(delay, max(0.0, newest_ms / 1000 + delay - time.time()))):
                break  # not acknowledged: the next watcher (or this one restarted) takes them
            start_ms = int(time.time() * 1000)
            reasons = sorted({f.get("reason", "request") for _, f in fresh})
            log.info({"event": "retrain_requested", "requests": len(fresh), "reasons": reasons,
                      "recovered": recovered})
            try:
                res = run_retrain(settings, registry, reason="request:" + "+".join(reasons), metrics=metrics,
                                  on_finish=lambda _res, ids=ids: blocking_client.xack(stream, WATCH_GROUP, *ids))
            except RedisUnavailable as e:  # the lock could not be taken: the requests stay pending, read again
                redis_down(e)
                continue
            results.append(res)
            if res.status == "locked" or res.details.get("lock", {}).get("never_expires"):
                # Another retrain (cron, or the run that died with recovered ones) holds the lock: its window may
                # predate these requests, so they stay pending (unacknowledged) and run once it is free; _pending
                # reads nothing while it is held, and the pause keeps a lock taken between look and run from spinning.
                # A lock key without an expiry (by hand) is freed only by the operator: they wait for that too.
                if res.status == "locked":
                    log.info({"event": "retrain_requests_deferred", "requests": len(ids), "recovered": recovered})
                else:
                    log.error({"event": "retrain_requests_deferred", "requests": len(ids), "recovered": recovered,
                               "why": res.reason, "action": "left pending: they run once the key is deleted "
                               f"(redis-cli DEL {registry.keys.lock})"})
                stop.wait(settings.retrain.watch_block_s)
                continue
            last_start_ms = start_ms
        try:
            blocking_client.xack(stream, WATCH_GROUP, *ids)  # again after a run: a no-op unless on_finish failed
        except REDIS_DOWN as e:  # they stay pending with this consumer: read again at the next loop
            log.warning({"event": "retrain_ack_failed", "error": str(e), "action": "acknowledged at the next loop"})
    return results
