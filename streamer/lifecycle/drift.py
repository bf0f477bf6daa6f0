"""Drift watch on the committed score stream: a river detector plus the alert rate, with hysteresis and cooldown.

Two signals, evaluated per committed batch:

- **detector**: a river drift detector (ADWIN by default; KSWIN or
  PageHinkley) fed ``log(1 + score)`` row by row.
- **alert rate**: over the last ``alert_rate_window`` events, the share of
  rows with a severity, against the calibrated rate of the scoring model at
  the live thresholds (the fraction of its calibration scores at or above the
  lowest threshold), as a two-sided binomial z score beyond ``alert_rate_z``.

Hysteresis (drift must persist): a detector firing is only a suspicion.
``hold_events`` later (a short burst is over by then) the mean of the signal
over the next ``persist_events`` events is compared with its mean before the
firing; drift is confirmed when they still differ by more than ``persist_z``
standard errors, else the suspicion is dropped. The alert-rate signal must
stay on for ``persist_events`` consecutive events (its window is shorter, so
a burst cannot hold it on that long). Cooldown: after a drift event nothing
is published for ``cooldown_s``, in this process and, through a Redis
``SET NX PX`` key, in the whole fleet, so one shift seen by N streamers gives
one event and one retrain request. A model swap resets everything (a new
model has a new score distribution) and starts a new warm-up.

A drift event goes to the Redis stream ``<prefix>drift:events``, to the
Kafka topic ``drift.kafka_topic`` and, with ``drift.request_retrain``, to the
retrain request stream that ``kdsm retrain --watch`` consumes. In a streamer
(``background=True``) the fleet cooldown and the publication run on a thread
of their own: the sink is called on the scoring thread, and a Redis that takes
connections but does not answer held it there for each command's timeout.

>>> from streamer.lifecycle.config import DriftConfig
>>> from streamer.lifecycle.archive import example_batch
>>> sink = DriftSink(DriftConfig(warmup_events=0, persist_events=10, calibrated_alert_rate=0.01, alert_rate_window=50))
>>> b = example_batch(60)
>>> b.severities = np.array(["warning"] * 60)  # every row alerts: far above 1 %
>>> sink.on_committed(b)["statistics"]["signal"]
'alert_rate'
"""

from __future__ import annotations

import json
import logging
import math
import queue
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable

import numpy as np
from river import drift as river_drift

from .config import DriftConfig
from .control import Keys, never_expires
from .metrics import LifecycleMetrics

log = logging.getLogger("kdsm.drift")

_BACKLOG = 8  # drift events a background sink holds while it publishes


def make_detector(cfg: DriftConfig):
    """The configured river detector."""
    if cfg.detector == "adwin":
        return river_drift.ADWIN(**cfg.adwin.model_dump())
    if cfg.detector == "kswin":
        return river_drift.KSWIN(**cfg.kswin.model_dump())
    return river_drift.PageHinkley(**cfg.page_hinkley.model_dump())


def _detector_stats(det) -> dict:
    out = {}
    for attr in ("estimation", "width", "p_value", "n_detections"):
        v = getattr(det, attr, None)
        if isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(float(v)):
            out[attr] = float(v)
    return out


def model_alert_rate(model, thresholds: dict[str, float] | None) -> float:
    """Expected alert rate of ``model`` at ``thresholds``: share of its calibration scores at or above the lowest."""
    t = min((thresholds or model.thresholds_).values())
    return 1.0 - model.calibration_.quantile_of(t)


class _Moments:
    """Count, mean and variance of a stream of values (Chan's parallel update)."""

    def __init__(self):
        self.n, self.mean, self.m2 = 0, 0.0, 0.0

    def add(self, x: np.ndarray) -> None:
        if len(x):
            other = _Moments()
            other.n, other.mean, other.m2 = len(x), float(np.mean(x)), float(np.var(x) * len(x))
            self.merge(other)

    def merge(self, o: _Moments) -> None:
        if o.n == 0:
            return
        n = self.n + o.n
        d = o.mean - self.mean
        self.mean += d * o.n / n
        self.m2 += o.m2 + d * d * self.n * o.n / n
        self.n = n

    @property
    def var(self) -> float:
        return self.m2 / (self.n - 1) if self.n > 1 else 0.0


class DriftSink:
    """Streamer sink: ``on_committed(batch)`` updates the detectors; returns the drift event when one is published
    (``background``: when one is handed to the publishing thread, which may still find the fleet's cooldown on)."""

    name = "drift"

    def __init__(self, cfg: DriftConfig, *, redis=None, keys: Keys | None = None, producer=None, producer_factory=None,
                 calibrated_rate: Callable[[str, dict], float | None] | None = None, clock=time.time,
                 instance: str | None = None, metrics: LifecycleMetrics | None = None, background: bool = False):
        self.cfg = cfg
        self.metrics = metrics or LifecycleMetrics()
        self.redis = redis
        self.keys = keys or Keys("kdsm:")
        self.producer = producer
        self.producer_factory = producer_factory  # builds the producer at the first event (drift is rare)
        self.calibrated_rate = calibrated_rate
        self.clock = clock
        self.instance = instance or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.cooldown_until = 0.0
        self._said_never_expires = False
        self.events: list[dict] = []  # the events published
        self.version: str | None = None
        self.reset()
        self._outbox: queue.Queue | None = None
        self._closed = False
        if background:
            # Bounded: with cooldown_s 0 and Redis silent, confirmations would otherwise pile up faster than they are
            # published (memory, and a close() that publishes the backlog for minutes)
            self._outbox = queue.Queue(maxsize=_BACKLOG)
            self._publisher = threading.Thread(target=self._publish_loop, name="kdsm-drift", daemon=True)
            self._publisher.start()

    def reset(self, version: str | None = None) -> None:
        self.version = version
        self.detector = make_detector(self.cfg)
        self.n = 0  # events seen since the reset
        self.fires = 0
        self.pre = _Moments()  # the signal before the pending firing (or so far)
        self.post = _Moments()  # the signal after firing + hold
        self.pending_at: int | None = None  # event index of the firing under test
        self.window: deque[tuple[int, int]] = deque()  # (rows, alerts) per batch
        self.window_n = self.window_k = 0
        self.rate_on_since: int | None = None
        self.last_rate: dict = {}
        self.last_test: dict = {}

    # ------------------------------------------------------------ sink API
    def on_committed(self, batch) -> dict | None:
        n = len(batch.scores)
        if n == 0:
            return None
        if batch.model_version != self.version:
            self.reset(batch.model_version)
        start = self.n
        sig = np.log1p(np.maximum(np.asarray(batch.scores, np.float64), 0.0))
        for i, v in enumerate(sig.tolist()):
            self.detector.update(v)
            if self.detector.drift_detected and start + i >= self.cfg.warmup_events:
                self.fires += 1
                if self.pending_at is None:
                    self._start_pending(start + i, sig[:i])
        if self.pending_at is None:
            self.pre.add(sig)
        else:
            idx = np.arange(start, start + n)
            self.post.add(sig[idx >= self.pending_at + self.cfg.hold_events])
        self.n += n
        self._push_window(n, int(np.count_nonzero(np.asarray(batch.severities, dtype=object) != "")))
        if self.n < self.cfg.warmup_events:
            return None
        detector_drift = self._detector_confirmed()
        rate_on = self._rate_signal(batch)
        if rate_on:
            self.rate_on_since = start if self.rate_on_since is None else self.rate_on_since
        else:
            self.rate_on_since = None
        rate_drift = rate_on and self.n - self.rate_on_since >= self.cfg.persist_events
        if not (detector_drift or rate_drift):
            return None
        signal = "both" if detector_drift and rate_drift else ("detector" if detector_drift else "alert_rate")
        return self._confirm(batch, signal)

    # ------------------------------------------------------------ internals
    def _start_pending(self, at: int, head: np.ndarray) -> None:
        self.pre.add(head)  # this batch's rows before the firing belong to "before"
        self.pending_at = at
        self.post = _Moments()

    def _detector_confirmed(self) -> bool:
        if self.pending_at is None or self.post.n < self.cfg.persist_events:
            return False
        a, b = self.pre, self.post
        se = math.sqrt(max(a.var / max(a.n, 1) + b.var / max(b.n, 1), 1e-18))
        z = (b.mean - a.mean) / se
        self.last_test = {"before_mean": a.mean, "after_mean": b.mean, "before_n": a.n, "after_n": b.n, "persist_z": z}
        confirmed = a.n >= 2 and abs(z) > self.cfg.persist_z
        if not confirmed:  # a blip: forget it, and keep the baseline (the after-rows join it)
            self.pre.merge(self.post)
            self.pending_at, self.post = None, _Moments()
        return confirmed

    def _push_window(self, n: int, k: int) -> None:
        self.window.append((n, k))
        self.window_n += n
        self.window_k += k
        while self.window and self.window_n - self.window[0][0] >= self.cfg.alert_rate_window:
            n0, k0 = self.window.popleft()
            self.window_n -= n0
            self.window_k -= k0

    def _expected_rate(self, batch) -> float | None:
        if self.cfg.calibrated_alert_rate is not None:
            return self.cfg.calibrated_alert_rate
        if self.calibrated_rate is None:
            return None
        return self.calibrated_rate(batch.model_version, getattr(batch, "thresholds", None) or {})

    def _rate_signal(self, batch) -> bool:
        p = self._expected_rate(batch)
        if p is None or not 0 < p < 1 or self.window_n < self.cfg.alert_rate_window // 2:
            self.last_rate = {}
            return False
        rate = self.window_k / self.window_n
        z = (self.window_k - self.window_n * p) / math.sqrt(self.window_n * p * (1 - p))
        self.last_rate = {"alert_rate": rate, "calibrated_alert_rate": p, "alert_rate_z": z, "window_events": self.window_n}
        return abs(z) > self.cfg.alert_rate_z

    def _confirm(self, batch, signal: str) -> dict | None:
        now = self.clock()
        if now < self.cooldown_until:
            self.metrics.drift_suppressed.labels("local").inc()
            return None
        self.cooldown_until = now + self.cfg.cooldown_s
        event = {"id": uuid.uuid4().hex, "event": "drift", "detector": self.cfg.detector,
                 "model_version": batch.model_version, "schema_hash": batch.schema_hash,
                 "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "epoch": now, "instance": self.instance,
                 "statistics": {"signal": signal, "events_since_reset": self.n, "detector_fires": self.fires,
                                **_detector_stats(self.detector), **self.last_test, **self.last_rate,
                                "recent_mean_score": float(np.mean(batch.scores))}}
        self._restart_detector()  # published or not (the fleet's cooldown), the next drift is a new regime's
        if self._outbox is not None:
            try:
                self._outbox.put_nowait(event)
            except queue.Full:  # the publisher is behind (Redis or Kafka not answering): this one is not published
                self.metrics.drift_suppressed.labels("backlog").inc()
                log.warning({"event": "drift_suppressed", "scope": "backlog", "version": event["model_version"],
                             "why": f"{_BACKLOG} drift events still wait to be published"})
                return None
            return event
        return self._announce(event)

    def _announce(self, event: dict) -> dict | None:
        """The fleet's cooldown (Redis ``SET NX PX``), then the publication; the event, or None when suppressed."""
        if self.redis is not None and self.cfg.cooldown_s > 0:
            try:
                ok = self.redis.set(self.keys.drift_cooldown, self.instance, nx=True, px=int(self.cfg.cooldown_s * 1000))
            except Exception as e:  # Redis down: fall back to the local cooldown only
                log.warning({"event": "drift_cooldown_key_failed", "error": str(e)})
                ok = True
            if not ok and self._cooldown_never_expires():
                ok = True  # not a cooldown: it would silence drift, and the retrains it asks for, for ever
            if not ok:
                self.metrics.drift_suppressed.labels("fleet").inc()
                log.info({"event": "drift_suppressed", "scope": "fleet", "version": event["model_version"],
                          "why": "another streamer already reported it (fleet cooldown)"})
                return None
        self._publish(event)
        signal = event["statistics"]["signal"]
        self.metrics.drift_events.labels(self.cfg.detector, signal).inc()
        log.warning({"event": "drift_detected", "version": event["model_version"], "signal": signal,
                     "statistics": event["statistics"]})
        self.events.append(event)
        return event

    def _publish_loop(self) -> None:
        while (event := self._outbox.get()) is not None:
            try:
                if not self._closed:  # after an abandoned close: nothing more is sent, no producer built
                    self._announce(event)
            except Exception:  # noqa: BLE001 - the thread serves every later event too
                log.exception({"event": "drift_publish_failed", "target": "announce"})
            finally:
                self._outbox.task_done()
        self._outbox.task_done()

    def flush(self) -> None:
        """Wait until every event handed to the publishing thread is published (or suppressed)."""
        if self._outbox is not None:
            self._outbox.join()

    def _cooldown_never_expires(self) -> bool:
        """The fleet cooldown key exists without an expiry: written by hand, not by a streamer (``SET NX PX``).

        Logged once per process; the key is left as it is (an operator's), and this process keeps its local cooldown.
        """
        never = never_expires(self.redis, self.keys.drift_cooldown)
        if never and not self._said_never_expires:
            self._said_never_expires = True
            log.warning({"event": "drift_cooldown_key_never_expires", "key": self.keys.drift_cooldown,
                         "action": f"ignored: drift events are published; delete it (redis-cli DEL {self.keys.drift_cooldown})"})
        return never

    def _restart_detector(self) -> None:
        # Start afresh on the new regime; the model version stays, so no new warm-up.
        version, n = self.version, self.n
        self.reset(version)
        self.n = max(n, self.cfg.warmup_events)

    def close(self, timeout_s: float = 30.0) -> None:
        """Publish what was handed over (for at most ``timeout_s``; what is left then is logged), then close."""
        if self._outbox is not None and self._publisher.is_alive():
            deadline = time.monotonic() + timeout_s
            try:
                self._outbox.put(None, timeout=timeout_s)
            except queue.Full:
                pass
            self._publisher.join(max(0.0, deadline - time.monotonic()))
            if self._publisher.is_alive():
                self._closed = True  # the thread skips what is left (daemon: it ends with the process)
                with self._outbox.mutex:
                    waiting = sum(e is not None for e in self._outbox.queue)
                log.error({"event": "drift_publish_abandoned", "waiting": waiting,
                           "why": f"not published within {timeout_s:g} s of the close (Redis or Kafka not answering)"})
        if self.producer_factory is not None and self.producer is not None:
            self.producer.close(timeout=5)  # only a producer this sink built

    def _publish(self, event: dict) -> None:
        body = json.dumps(event, default=float)
        if self.redis is not None:
            try:
                pipe = self.redis.pipeline()
                pipe.xadd(self.keys.drift, {"detector": event["detector"], "model_version": event["model_version"],
                                            "time": event["time"], "event": body},
                          maxlen=self.cfg.stream_maxlen, approximate=True)
                if self.cfg.request_retrain:
                    pipe.xadd(self.keys.requests, {"reason": "drift", "model_version": event["model_version"],
                                                   "drift_id": event["id"], "time": event["time"]},
                              maxlen=self.cfg.stream_maxlen, approximate=True)
                pipe.execute()
            except Exception as e:
                self.metrics.drift_publish_errors.labels("redis").inc()
                log.error({"event": "drift_publish_failed", "target": "redis", "error": str(e)})
        if self.cfg.kafka_topic and not self._closed and (self.producer is not None or self.producer_factory is not None):
            try:
                if self.producer is None:
                    producer = self.producer_factory()
                    if self._closed:  # the close gave up while it was built: nothing would close it
                        producer.close(timeout=0)
                        return
                    self.producer = producer
                self.producer.send(self.cfg.kafka_topic, key=event["model_version"].encode(), value=body.encode())
                self.producer.flush(timeout=10)
            except Exception as e:
                self.metrics.drift_publish_errors.labels("kafka").inc()
                log.error({"event": "drift_publish_failed", "target": "kafka", "error": str(e)})
