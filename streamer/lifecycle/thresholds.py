"""Live thresholds: artifact thresholds, overridden per model version and severity from Redis.

Redis layout (``thresholds:*`` of ``streamer.lifecycle.control.Keys``, ``V`` = model version):

- ``thresholds(V)`` hash: severity -> JSON ``{"score", "quantile", "set_by", "set_at"}``
- ``thresholds_audit(V)`` list (newest first, last 1000 kept): JSON
  ``{"action", "severity", "old", "new", "quantile", "by", "at"}``
- channel ``thresholds_channel``: the version whose thresholds changed

The streamer reads them through ``LiveThresholds``: a background thread
listens on the channel and re-reads every ``refresh_s`` as well (a missed
notification costs at most one period), so a change applies within about a
second. If Redis is unreachable the last values read (or the artifact's) stay
in force, the ``kdsm_redis_up`` gauge drops to 0 and a log line says so.
State written by hand is never applied: a record that is not UTF-8 JSON with a
finite score >= 0 (``bad_threshold_record``), or an overrides key of another
Redis type (``bad_threshold_key``), leaves the artifact's threshold in force,
logged once; the commands name it (``show``'s ``ignored``, one error line) and
``reset`` removes such records (as it does records of a severity the model
lacks, which no streamer applies either).
A set of thresholds out of the artifact's order (a warning written above the
critical: ``kdsm thresholds set`` and ``reset`` refuse one) is refused as a
whole: the thresholds in force stay (the artifact's, at a version's first read),
logged once per distinct set (``bad_thresholds``).

>>> effective_thresholds({"warning": 1.0, "critical": 2.0}, {"warning": {"score": 1.5}})
{'warning': 1.5, 'critical': 2.0}
"""

from __future__ import annotations

import getpass
import json
import logging
import math
import socket
import threading
import time
from dataclasses import dataclass

import redis

from offline_train.artifact import ArtifactError, read_artifact
from offline_train.calibrate import Calibration

from .control import (
    ChannelWatcher,
    Keys,
    NotUtf8,
    connect,
    expect_types,
    json_of,
    read_raw,
    redis_client,
    require,
    text_of,
    wrong_types,
)

log = logging.getLogger("kdsm.thresholds")

AUDIT_KEEP = 1000
CHANGE_ATTEMPTS = 10  # re-reads of a change that lost a race with another operator


class ThresholdError(ValueError):
    """A threshold operation that cannot be done (unknown severity, Redis unreachable, ...)."""


def default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def is_threshold(x: float) -> bool:
    """A threshold is a finite number >= 0 (an anomaly score is a norm): ``NaN`` and ``inf`` would never alert, a
    negative one on every event.

    >>> [is_threshold(x) for x in (0.0, 7.5, float("nan"), float("inf"), -1.0)]
    [True, True, False, False, False]
    """
    return math.isfinite(x) and x >= 0


def override_score(rec) -> float | None:
    """The score of an override record as a float, or None when it is not one a threshold can be.

    A record written by hand (``redis-cli HSET``) whose score is no threshold (``is_threshold``) is ignored.

    >>> override_score({"score": 7.5}), override_score({"score": "7.5"})
    (7.5, 7.5)
    >>> [override_score(r) for r in ({"score": float("nan")}, {"score": "inf"}, {"score": -1}, {"score": True}, {}, 3)]
    [None, None, None, None, None, None]
    >>> override_score({"score": 10 ** 400})  # an integer no float holds
    """
    if not isinstance(rec, dict) or isinstance(rec.get("score"), bool):
        return None
    try:
        x = float(rec["score"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return x if is_threshold(x) else None


def bad_record_why(text: str) -> str:
    """Why an override record is ignored (``text``: as ``ThresholdStore.read`` lists it under ``ignored``)."""
    return "not UTF-8" if isinstance(text, NotUtf8) else "not JSON with a finite score >= 0"


def effective_thresholds(artifact: dict[str, float], overrides: dict[str, dict]) -> dict[str, float]:
    """Artifact thresholds with each overridden severity's score replaced."""
    out = dict(artifact)
    for sev, rec in overrides.items():
        if sev in out:
            out[sev] = float(rec["score"])
    return out


class ThresholdStore:
    """Reads and writes the overrides and their audit trail in Redis."""

    def __init__(self, client: redis.Redis, prefix: str = "kdsm:"):
        self.client, self.keys = client, Keys(prefix)
        self._warned: set[tuple[str, str, str]] = set()  # bad records already logged: once each, not every refresh

    @property
    def channel(self) -> str:
        return self.keys.thresholds_channel

    def key(self, version: str) -> str:
        return self.keys.thresholds(version)

    def audit_key(self, version: str) -> str:
        return self.keys.thresholds_audit(version)

    def _types(self, version: str) -> dict[str, str]:
        return {self.key(version): "hash", self.audit_key(version): "list"}

    def _check_types(self, client, version: str) -> None:
        """Before a write: a key of the wrong type is a ``ThresholdError`` and nothing is written (no half change)."""
        line = wrong_types(client, self._types(version))
        if line:
            raise ThresholdError(line)

    def overrides(self, version: str) -> dict[str, dict]:
        return self.read(version)[0]

    def read(self, version: str) -> tuple[dict[str, dict], dict[str, str]]:
        """(overrides, ignored): the usable records, and the text of each one that is not (logged once).

        Read undecoded (``read_raw``): a value written by hand that is not UTF-8 is one more unusable record, not a
        ``UnicodeDecodeError`` that stopped the streamer at start-up and read as ``redis_down`` while it ran.
        """
        with expect_types(self.client, ThresholdError, {self.key(version): "hash"}):
            return self._parse(version, read_raw(self.client, "HGETALL", self.key(version)))

    def _parse(self, version: str, raw: dict) -> tuple[dict[str, dict], dict[str, str]]:
        """``raw``: field -> value as HGETALL read them (bytes from ``read_raw``, or text)."""
        out, ignored = {}, {}
        for name, value in raw.items():
            sev, text = text_of(name), text_of(value)
            try:
                rec = json_of(text)
            except ValueError:
                rec = None
            score = override_score(rec)
            if score is None:
                ignored[sev] = text
                if (version, sev, text) not in self._warned:
                    self._warned.add((version, sev, text))
                    reset = ("`kdsm thresholds reset` (all severities)" if isinstance(sev, NotUtf8)
                             else f"`kdsm thresholds reset --severity {sev}`")
                    log.warning({"event": "bad_threshold_record", "version": version, "severity": sev, "record": text[:200],
                                 "why": bad_record_why(text),
                                 "action": f"the artifact's threshold applies; {reset} removes the record"})
                continue
            out[sev] = {**rec, "score": score}
        return out, ignored

    def audit(self, version: str, n: int = 20) -> list[dict]:
        """The newest ``n`` audit records; one that is not UTF-8 JSON is shown as ``{"unreadable": text}``."""
        with expect_types(self.client, ThresholdError, {self.audit_key(version): "list"}):
            raw = read_raw(self.client, "LRANGE", self.audit_key(version), 0, n - 1)
        out = []
        for value in raw:
            try:
                out.append(json_of(value))
            except ValueError:
                out.append({"unreadable": text_of(value)})
        return out

    def set(self, version: str, severity: str, score: float, quantile: float | None, by: str, old: float) -> dict:
        """Write one override as given, unchecked (tests, tools); ``ThresholdOps.set`` checks the order atomically."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        rec = {"score": float(score), "quantile": quantile, "set_by": by, "set_at": now}
        entry = {"action": "set", "severity": severity, "old": old, "new": float(score), "quantile": quantile, "by": by, "at": now}
        self._check_types(self.client, version)
        with self.client.pipeline(transaction=True) as p:
            p.hset(self.key(version), severity, json.dumps(rec))
            p.lpush(self.audit_key(version), json.dumps(entry))
            p.ltrim(self.audit_key(version), 0, AUDIT_KEEP - 1)
            p.publish(self.channel, version)
            p.execute()
        return entry

    def change(self, version: str, plan) -> list[dict]:
        """Read the overrides, let ``plan`` decide, write its change: atomically, against concurrent operators.

        ``plan(overrides, ignored)`` (``read``'s pair) returns ``(set_records, reset_severities, audit_entries)`` or raises (a refused
        change writes nothing). The overrides and audit keys are WATCHed from the type check and the read to the write
        (MULTI/EXEC): if another operator changed either in between, the write is dropped and ``plan`` runs again on
        the new values, so two changes that each keep the order cannot together invert it, and an audit key that
        changed type meanwhile cannot let the override be written without its audit entry.
        """
        key, audit = self.key(version), self.audit_key(version)
        with expect_types(self.client, ThresholdError, self._types(version)), \
                self.client.pipeline(transaction=True) as p:
            for _ in range(CHANGE_ATTEMPTS):
                try:
                    p.watch(key, audit)
                    self._check_types(p, version)
                    raw = read_raw(p, "HGETALL", key)
                    names: dict[str, list] = {}  # a field name that is not UTF-8 is deleted as it is (all such ones)
                    for name in raw:
                        names.setdefault(text_of(name), []).append(name)
                    sets, resets, entries = plan(*self._parse(version, raw))
                    p.multi()
                    if sets:
                        p.hset(key, mapping={sev: json.dumps(rec) for sev, rec in sets.items()})
                    if resets:
                        p.hdel(key, *[name for sev in resets for name in names.get(sev, [sev])])
                    for e in entries:
                        p.lpush(audit, json.dumps(e))
                    p.ltrim(audit, 0, AUDIT_KEEP - 1)
                    p.publish(self.channel, version)
                    p.execute()
                    return entries
                except redis.WatchError:
                    log.info({"event": "thresholds_changed_concurrently", "version": version, "action": "re-reading"})
                    continue
                finally:
                    p.reset()
        raise ThresholdError(f"the thresholds of {version} changed {CHANGE_ATTEMPTS} times while this change was "
                             "checked; try again")


class LiveThresholds:
    """Thresholds the consumer loop reads per batch; kept fresh by a background thread.

    ``get(model)`` never blocks on Redis after the first read of a version:
    it returns the cached dict, which the thread replaces on pub/sub
    notifications and every ``refresh_s``.
    """

    def __init__(self, url: str, password: str | None = None, prefix: str = "kdsm:", refresh_s: float = 1.0,
                 socket_timeout: float = 0.5, metrics=None):
        # The scoring path: the short timeout bounds connecting too.
        client = connect(url, password, timeout_s=socket_timeout, connect_timeout_s=socket_timeout)
        self.store = ThresholdStore(client, prefix)
        self.refresh_s = refresh_s
        self.metrics = metrics
        self._artifact: dict[str, dict[str, float]] = {}
        self._cache: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._up: bool | None = None
        self._bad_key: dict[str, str] = {}  # version -> why its overrides key is unusable (logged once)
        self._bad_order: dict[str, dict[str, float]] = {}  # version -> the out-of-order set refused (logged once)
        self._serving: str | None = None  # the version of the last get()
        self._watcher = ChannelWatcher(client, self.store.channel, period_s=refresh_s, on_message=self._changed,
                                       on_tick=self._refresh_all, on_error=self._set_down, wait_s=0.5,
                                       retry_s=min(refresh_s, 1.0), name="kdsm-thresholds")

    def start(self) -> LiveThresholds:
        self._watcher.start()
        return self

    def stop(self) -> None:
        self._watcher.stop()

    def get(self, model) -> dict[str, float]:
        v = model.version_
        cached = self._cache.get(v)
        if cached is not None:
            if v != self._serving:
                self._serve(v)
            return cached
        with self._lock:
            self._artifact[v] = dict(model.thresholds_)
            self._cache[v] = dict(model.thresholds_)
            if self.metrics is not None:  # what scores until Redis answers (it may not, yet): shown from the start
                for sev, th in model.thresholds_.items():
                    self.metrics.threshold.labels(v, sev).set(th)
        self._serve(v)
        self._refresh(v)  # first sight of a version: one synchronous read (bounded by the socket timeout)
        return self._cache.get(v, dict(model.thresholds_))

    def _serve(self, version: str) -> None:
        """``version`` serves now: it and the version it replaced (a batch may still be scored by it) stay fresh; older
        ones are dropped, so a long-lived streamer reads two versions per refresh, not every version it ever served,
        and their ``kdsm_threshold`` series go."""
        with self._lock:
            self._artifact[version] = self._artifact.pop(version)  # most recently served last
            dropped = {v: self._artifact.pop(v) for v in list(self._artifact)[:-2]}
            for v in dropped:
                self._cache.pop(v, None)
                self._bad_key.pop(v, None)
                self._bad_order.pop(v, None)
            self._serving = version
        for v, artifact in dropped.items():
            if self.metrics is not None:
                for sev in artifact:
                    try:
                        self.metrics.threshold.remove(v, sev)
                    except KeyError:  # already gone
                        pass
            log.info({"event": "thresholds_version_dropped", "version": v, "serving": version})

    @property
    def redis_up(self) -> bool:
        return bool(self._up)

    # ------------------------------------------------------------------ internals
    def _refresh(self, version: str) -> None:
        artifact = self._artifact.get(version)
        if artifact is None:  # dropped by _serve while the watcher thread was about to refresh it
            return
        try:
            over = self.store.overrides(version)
            self._bad_key.pop(version, None)
        except ThresholdError as e:  # Redis answers, but the key holds another type: no usable override
            if self._bad_key.get(version) != str(e):
                log.warning({"event": "bad_threshold_key", "version": version, "error": str(e),
                             "action": "scoring continues on the artifact's thresholds"})
            self._bad_key[version] = str(e)
            over = {}
        except (redis.RedisError, OSError) as e:
            self._set_up(False, e)
            return
        self._set_up(True)
        new = effective_thresholds(artifact, over)
        bad = order_violation(artifact, new)
        if bad is not None:  # written by hand (``set`` and ``reset`` keep the order): refused, the last set stays
            kept = self._cache.get(version, artifact)
            if self._bad_order.get(version) != new:
                fix = " or ".join(f"`kdsm thresholds reset --severity {s}`" for s in order_repairs(artifact, over))
                log.warning({"event": "bad_thresholds", "version": version, "thresholds": new,
                             "why": order_why(new, bad) + ": a more severe threshold must not be lower (written by hand?)",
                             "kept": kept,
                             "action": "refused: scoring keeps the thresholds kept until the order is restored ("
                                       + (f"{fix}, or " if fix else "") + "`kdsm thresholds reset` for all)"})
            self._bad_order[version], new = new, kept
        else:
            self._bad_order.pop(version, None)
        if new != self._cache.get(version):
            log.info({"event": "thresholds_changed", "version": version, "thresholds": new})
        with self._lock:
            if version not in self._artifact:  # dropped meanwhile: no cache entry or gauge series left behind
                return
            self._cache[version] = new  # one reference swap: readers see old or new, never a mix
            if self.metrics is not None:
                for sev, t in new.items():
                    self.metrics.threshold.labels(version, sev).set(t)

    def _changed(self, version: str) -> None:
        if version in self._artifact:
            self._refresh(version)

    def _refresh_all(self) -> None:
        for v in list(self._artifact):
            self._refresh(v)

    def _set_down(self, err: Exception) -> None:
        self._set_up(False, err)

    def _set_up(self, up: bool, err: Exception | None = None) -> None:
        if up != self._up:
            if up:
                log.info({"event": "redis_up"})
            else:
                log.warning({"event": "redis_down", "error": str(err),
                             "action": "scoring continues on cached/artifact thresholds"})
        self._up = up
        if self.metrics is not None:
            self.metrics.redis_up.set(1 if up else 0)


def check_order(artifact: dict[str, float], proposed: dict[str, float]) -> None:
    """Severities keep the artifact's order (warning < critical): a more severe threshold below a milder one is refused.

    >>> check_order({"warning": 1.0, "critical": 2.0}, {"warning": 1.5, "critical": 2.0})
    >>> check_order({"warning": 1.0, "critical": 2.0}, {"warning": 2.5, "critical": 2.0})
    Traceback (most recent call last):
    ...
    streamer.lifecycle.thresholds.ThresholdError: critical (2) would be below warning (2.5): a more severe threshold must not be lower
    """
    bad = order_violation(artifact, proposed)
    if bad is not None:
        milder, severer = bad
        raise ThresholdError(f"{severer} ({proposed[severer]:g}) would be below {milder} ({proposed[milder]:g}): "
                             "a more severe threshold must not be lower")


def order_violation(artifact: dict[str, float], proposed: dict[str, float]) -> tuple[str, str] | None:
    """The first (milder, severer) pair of ``proposed`` out of the artifact's order, or None.

    Two severities the artifact gives the same threshold keep the order of ``artifact``, mildest first as
    ``Calibration`` keeps it (by quantile): raising critical above a tied warning is allowed, lowering it below is not.

    >>> order_violation({"warning": 2.0, "critical": 2.0}, {"warning": 2.0, "critical": 3.0})
    >>> order_violation({"warning": 2.0, "critical": 2.0}, {"warning": 3.0, "critical": 2.0})
    ('warning', 'critical')
    """
    order = sorted(artifact, key=lambda s: artifact[s])  # stable: tied severities stay mildest first
    for milder, severer in zip(order, order[1:], strict=False):
        if proposed[severer] < proposed[milder]:
            return milder, severer
    return None


def order_why(thresholds: dict[str, float], bad: tuple[str, str]) -> str:
    """What is out of order in ``thresholds``, for ``order_violation``'s pair ``bad``.

    >>> order_why({"warning": 5.0, "critical": 2.0}, ("warning", "critical"))
    'critical (2) is below warning (5)'
    """
    milder, severer = bad
    return f"{severer} ({thresholds[severer]:g}) is below {milder} ({thresholds[milder]:g})"


def order_repairs(artifact: dict[str, float], over: dict[str, dict]) -> list[str]:
    """The overridden severities whose reset alone would restore the artifact's order (empty: only a reset of all).

    >>> order_repairs({"warning": 1.0, "critical": 2.0}, {"warning": {"score": 5.0}})
    ['warning']
    >>> order_repairs({"warning": 1.0, "critical": 2.0}, {"warning": {"score": 5.0}, "critical": {"score": 0.5}})
    []
    """
    return [sev for sev in over if order_violation(
        artifact, effective_thresholds(artifact, {k: v for k, v in over.items() if k != sev})) is None]


@dataclass(frozen=True)
class ArtifactCalibration:
    """What ``ThresholdOps`` needs of a model artifact, read without loading its model.

    The fields are named as ``KDSM`` names them, so either serves ``ThresholdOps``. Reading only the metadata and the
    calibration scores (checksums verified) spares the thresholds commands torch: they answer in about a second.
    """

    version_: str
    schema_hash_: str
    calibration_: Calibration

    @property
    def thresholds_(self) -> dict[str, float]:
        return self.calibration_.thresholds

    @classmethod
    def read(cls, path) -> ArtifactCalibration:
        arrays, meta = read_artifact(path, arrays="numpy")
        try:
            return cls(str(meta["version"]), str(meta["schema_hash"]),
                       Calibration.from_artifact(arrays["calibration_scores"], meta))
        except (KeyError, TypeError, ValueError) as e:
            raise ArtifactError(f"{path}: artifact metadata and weights do not fit together: {e}") from None


class ThresholdOps:
    """What ``kdsm thresholds show|set|reset`` does, for one model artifact's version.

    Quantiles map to scores through the artifact's calibration scores
    (``Calibration.threshold_for_quantile``), the same mapping training used.
    """

    def __init__(self, store: ThresholdStore, model):
        self.store, self.model = store, model

    @classmethod
    def from_settings(cls, s, model) -> ThresholdOps:
        r = s.redis
        return cls(ThresholdStore(require(redis_client(r), r), r.key_prefix), model)

    def show(self) -> dict:
        """``ignored``: severity -> ``{"record", "why"}`` for each record in Redis that no streamer applies.

        That is a record that is not UTF-8 JSON with a finite score >= 0 (``record``: its text, bad bytes as U+FFFD),
        or a valid one under a severity the model does not have, a typo written by hand (``record``: the record, as
        ``overrides`` would show it). ``overrides`` holds only the records the streamers apply, as a set: a set out of the
        artifact's order (written by hand) is ``refused`` (the pair, why, and the resets that restore the order), its
        ``effective`` entries marked ``"source": "refused"``: streamers keep the thresholds they last applied.
        """
        over, bad = self.store.read(self.model.version_)
        ignored = {sev: {"record": text, "why": bad_record_why(text)} for sev, text in bad.items()}
        for sev in [s for s in over if s not in self.model.thresholds_]:
            ignored[sev] = {"record": over.pop(sev), "why": f"the model has no severity {sev!r} (it has "
                                                           f"{', '.join(sorted(self.model.thresholds_))})"}
        eff = effective_thresholds(self.model.thresholds_, over)
        cal = self.model.calibration_
        out = {"version": self.model.version_, "schema_hash": self.model.schema_hash_,
               "artifact": dict(self.model.thresholds_), "artifact_quantiles": dict(cal.quantiles),
               "overrides": over, "ignored": ignored}
        bad = order_violation(self.model.thresholds_, eff)
        if bad is not None:
            out["refused"] = {"pair": list(bad), "why": order_why(eff, bad),
                              "streamers": "keep the thresholds they last applied (the artifact's if none)",
                              "repair": [f"kdsm thresholds reset --severity {s}"
                                         for s in order_repairs(self.model.thresholds_, over)] or ["kdsm thresholds reset"]}
        source = "refused" if bad is not None else "redis"
        out["effective"] = {sev: {"score": t, "quantile": round(cal.quantile_of(t), 6),
                                  "source": source if sev in over else "artifact"} for sev, t in eff.items()}
        out["audit"] = self.store.audit(self.model.version_, 10)
        return out

    def set(self, severity: str, quantile: float | None = None, score: float | None = None, by: str | None = None) -> dict:
        if severity not in self.model.thresholds_:
            raise ThresholdError(f"unknown severity {severity!r}; the model has {sorted(self.model.thresholds_)}")
        if quantile is not None:
            if not 0 < quantile < 1:
                raise ThresholdError(f"--quantile must be in (0, 1), got {quantile}")
            score = self.model.calibration_.threshold_for_quantile(quantile)
        if score is None or not is_threshold(score):
            raise ThresholdError(f"--score must be a finite number >= 0 (an anomaly score is a norm, never negative), got {score}")
        version, by = self.model.version_, by or default_actor()

        def plan(over: dict[str, dict], ignored: dict[str, str]):
            eff = effective_thresholds(self.model.thresholds_, over)
            check_order(self.model.thresholds_, {**eff, severity: float(score)})
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            rec = {"score": float(score), "quantile": quantile, "set_by": by, "set_at": now}
            entry = {"action": "set", "severity": severity, "old": eff[severity], "new": float(score),
                     "quantile": quantile, "by": by, "at": now}
            return {severity: rec}, [], [entry]

        (entry,) = self.store.change(version, plan)
        return {"version": version, **entry}

    def reset(self, severity: str | None = None, by: str | None = None) -> dict:
        """Back to the artifact's threshold: one severity, or all. Refused if the result would break the order.

        Resetting one severity can leave it below a milder override (critical back to the artifact's 11.27 under a
        warning set to 15): that is refused, naming the override to reset or set first. A reset of all removes every
        record of the version, also an unreadable one (``ignored``) or one of a severity the model does not have
        (written by hand); their audit entry's ``old`` is None (unreadable) or its score, ``new`` None (no such severity).
        ``--severity S`` removes such a record too (what the ``bad_threshold_record`` log line advises); an ``S`` the
        model lacks and Redis does not hold is refused as unknown.
        """
        artifact, version, by = dict(self.model.thresholds_), self.model.version_, by or default_actor()

        def plan(over: dict[str, dict], ignored: dict[str, str]):
            present = set(over) | set(ignored)
            if severity is not None and severity not in artifact and severity not in present:
                raise ThresholdError(f"unknown severity {severity!r}; the model has {sorted(artifact)}, and Redis holds "
                                     f"no record of it for {version}")
            sevs = [s for s in ([severity] if severity else sorted(present)) if s in present]
            eff = {**{s: float(r["score"]) for s, r in over.items()}, **effective_thresholds(artifact, over)}
            after = effective_thresholds(artifact, {s: r for s, r in over.items() if s not in sevs})
            bad = order_violation(artifact, after)
            if bad is not None:
                milder, severer = bad
                other = milder if severer in sevs else severer
                raise ThresholdError(
                    f"resetting {', '.join(sevs)} to the artifact's threshold would put {severer} ({after[severer]:g}) "
                    f"below {milder} ({after[milder]:g}): reset {other} first, or set {other} to keep the order")
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            entries = [{"action": "reset", "severity": s, "old": None if s in ignored else eff[s], "new": artifact.get(s),
                        "quantile": None, "by": by, "at": now} for s in sevs]
            return {}, sevs, entries

        return {"version": version, "reset": self.store.change(version, plan)}
