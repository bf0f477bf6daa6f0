"""The consumer loop of ``kdsm stream``: poll -> decode -> score -> publish -> ack -> commit -> sinks.

One iteration handles one micro-batch (``stream.max_batch`` records or
``stream.max_wait_ms``):

1. poll, then ask the model provider for the current model (never mid-batch);
2. decode the raw values (``streamer.pipeline.decode``): valid rows to a float matrix,
   the rest to dead letters with a reason code;
3. score the valid rows in one forward pass (``streamer.pipeline.scorer``) against the
   live thresholds of that model version (``streamer.lifecycle.thresholds``);
4. publish alerts (only rows at/above the lowest threshold) and dead letters;
5. commit offsets once every message of the batch is acknowledged
   (``streamer.pipeline.checkpoint`` owns the order), then hand the batch to sinks.

Step 3 runs on a scoring thread (torch releases the GIL) while the main
thread polls and decodes the next batch, so fetching, JSON parsing and the
forward pass overlap; batches are still published and committed in order,
one at a time.

Up to ``stream.max_in_flight`` batches may be published but not yet
acknowledged; at that many the assigned partitions are paused until the
oldest are acknowledged and committed (backpressure, no unbounded buffer).
A rebalance listener finishes everything polled so far (the batch being
scored, records gathered for the next one, the batches in flight: publish,
flush, commit) before partitions are revoked. kafka-python 3 runs it on its
IO thread, where a blocking ``consumer.commit()`` cannot run, so it is an
``AsyncConsumerRebalanceListener`` that awaits ``commit_async``.
SIGTERM/SIGINT finish the batch, drain and close.

With ``stream.fetch_process: true`` step 1 takes records from a child process that fetches and unpacks them
(``streamer.pipeline.fetcher``); this process's consumer keeps the group, the listener and the commits, with its
partitions paused.

With ``kafka.delivery: exactly_once`` each batch is one Kafka transaction
(alerts, dead letters, offsets; ``TransactionalCheckpointer``): an aborted
one makes the loop drop what it polled after the batch and rewind to the
committed offsets (without one, to the first offset taken); a producer fenced by a newer instance stops the process.

Two hooks for other components:

- **model provider**: any object with ``current() -> KDSM`` (with
  ``.version_``). ``StaticModelProvider`` serves one artifact; a
  registry-backed provider may return a new version from one batch to the
  next. Alerts carry the version that scored them; thresholds are looked up
  per version.
- **sinks**: objects with ``on_committed(batch: ScoredBatch)``, called after
  the batch's offsets are committed, in commit order (archive, drift, ...).
  A sink's exception is logged and counted (``kdsm_sink_errors_total``),
  never fatal.
"""

from __future__ import annotations

import functools
import gc
import logging
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from kafka import AsyncConsumerRebalanceListener
from kafka.errors import KafkaError

from .alerts import alert_headers, build_alerts, severity_counts
from .batch import RecordBatch, ScoredBatch, poll_batch
from .checkpoint import (
    Checkpointer,
    DeliveryError,
    InFlight,
    TransactionAborted,
    TransactionalCheckpointer,
)
from .deadletter import dead_letter, dead_letter_headers
from .decode import Decoded, Decoder, Reject, mark_unreadable
from .decode_spec import SpecDecoder
from .fetcher import FetchProcess
from .kafka_clients import (
    REFUSED,
    KafkaStartError,
    ensure_topics,
    make_consumer,
    make_producer,
    make_transactional_producer,
    transactional_id,
)
from .metrics import StreamMetrics
from .scorer import Scorer, ScoreResult

log = logging.getLogger("kdsm.stream")

_LATENCY_SAMPLES = 32  # per batch, for the e2e histogram (no per-event metric calls)
_BUSY_WAIT_MS = 20
_GROUP_POLL_S = 0.05  # with the fetch process: the group consumer's polls, at most this often


def settle_heap() -> None:
    """Collect, then move every object alive now (modules, clients, the model) out of the collector's sight.

    The loop allocates a tracked object or more per event (kafka-python's records, the batch's lists), so
    CPython's collector runs often, and each full collection walked every object of the process: about
    200 ms a pass on ``kdsm bench stream``'s process, once every few hundred thousand events, stopping
    every thread. Frozen (``gc.freeze``), the long-lived objects are skipped; young garbage is collected
    as before, and frozen objects are still freed when nothing refers to them. Called when a model is
    taken into use: ``gc.unfreeze`` first, so a model swapped out before is collected (its cycles
    included) once no batch holds it. docs/streaming.md, "The collector".
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def latency_samples(n: int) -> np.ndarray:
    """The rows of a batch of ``n`` whose timestamps feed the e2e histogram: ``min(n, 32)``, evenly spaced.

    >>> [len(latency_samples(n)) for n in (1, 31, 32, 63, 2000)], latency_samples(63)[[0, -1]].tolist()
    ([1, 31, 32, 32, 32], [0, 62])
    """
    return np.linspace(0, n - 1, min(n, _LATENCY_SAMPLES)).astype(np.int64)


class _Rebalance(AsyncConsumerRebalanceListener):
    def __init__(self, app: StreamApp):
        self.app = app

    async def on_partitions_revoked(self, revoked):
        # Runs on kafka-python's IO thread while the loop waits in poll(): finish what was polled so far.
        app = self.app
        if not revoked:  # kafka-python calls it with no partitions on the first join: nothing was revoked
            return
        app.metrics.rebalances.labels("revoked").inc()
        names = sorted(f"{tp.topic}:{tp.partition}" for tp in revoked)
        if app._closing:  # after a crash: what is in flight stays uncommitted, a restart re-reads it
            log.info({"event": "partitions_revoked", "partitions": names, "drained_batches": 0})
            return
        if app.fetcher is not None:
            app.fetcher.assign({})  # what it fetched and the loop has not taken is dropped: the next owner reads it
        try:
            app._publish_pending()
            app._publish_gathered()
        except TransactionAborted:  # exactly once: nothing of it is visible; its next owner reads it again (resume_at)
            app._drop_polled()
        done = await app.checkpoint.drain_async()
        app._after_commit(done)
        log.info({"event": "partitions_revoked", "partitions": names, "drained_batches": len(done)})

    async def on_partitions_assigned(self, assigned):
        committed = await self._read_on_from_committed(assigned)
        if self.app.fetcher is not None:  # the fetch process fetches; this consumer keeps the group, paused
            self.app.consumer.pause(*assigned)
            self.app.fetcher.assign({tp: committed.get(tp) for tp in assigned})
        self.app.metrics.rebalances.labels("assigned").inc()
        self.app.metrics.assigned.set(len(assigned))
        log.info({"event": "partitions_assigned", "partitions": sorted(f"{tp.topic}:{tp.partition}" for tp in assigned)})

    async def _read_on_from_committed(self, assigned) -> dict:
        """Seek every assigned partition to the group's committed offset before anything is fetched.

        kafka-python (eager protocol) keeps the position of a partition a rebalance gives back, even where this
        member missed a generation in which another member owned it and committed past that position; reading on
        from there re-scores the other member's events (duplicates, even under exactly once). Everything this
        member polled was committed by the revocation, so the committed offset is the right place to start; what the
        revocation could not commit (an aborted transaction, a refused commit) is read again from there, or, where the
        group has no offset for the partition yet, from the first offset this member took (``Checkpointer.resume_at``).
        The fetch is awaited on the IO thread (a blocking ``committed()`` cannot run here); kafka-python has
        no public coroutine for it, hence its coordinator's.
        """
        consumer, found = self.app.consumer, {}
        offsets = await consumer._coordinator.fetch_committed_offsets_async(set(assigned))
        for tp in assigned:
            committed = offsets.get(tp)
            # Without a committed offset, a partition this member read and did not commit (its revocation's
            # transaction aborted, its commit refused) goes back to its first record taken: kept position would
            # read on past the events never committed.
            at = self.app.checkpoint.resume_at(tp, committed.offset if committed is not None and committed.offset >= 0
                                               else None)
            if at is not None:
                consumer.seek(tp, at)
                found[tp] = at
        return found  # never read and no committed offset: auto_offset_reset


@dataclass
class Pending:
    """A batch decoded and handed to the scoring thread, not yet published (at most one at a time)."""

    records: RecordBatch
    model: object  # the KDSM version that scores every row of this batch
    thresholds: dict[str, float]  # the live thresholds of that version when the batch was taken
    decoded: Decoded
    scores: Future  # -> (ScoreResult, seconds the scoring took), from the scoring thread
    decode_s: float  # seconds the decode took; with the scoring's and the publish's: kdsm_batch_seconds


class StreamApp:
    """Run with ``run()``; stop from any thread with ``stop()`` (or SIGTERM/SIGINT via ``install_signal_handlers``)."""

    def __init__(self, settings, provider, sinks=(), metrics: StreamMetrics | None = None, thresholds=None,
                 scorer=None, on_alert_acked=None):
        self.settings = settings
        self.provider = provider
        self.sinks = list(sinks)
        self.metrics = metrics or StreamMetrics()
        self.thresholds = thresholds  # LiveThresholds or None (artifact thresholds)
        sc = settings.stream
        # Any object with score(model, X, thresholds) -> ScoreResult: Scorer (the model's forward pass), or
        # ConstantScorer (scoring excluded, kdsm bench stream --scorer none). Torch threads are the process's.
        self.scorer = scorer if scorer is not None else Scorer(top_features=sc.top_features)
        self._alert_headers = frozenset(sc.alert_headers)  # header names alerts carry from their event (none: empty)
        # Called as on_alert_acked(kafka_timestamp_ms, acked_at) from the producer's I/O thread (bench, tests).
        self.on_alert_acked = on_alert_acked
        self._stop = threading.Event()
        self._decoder: Decoder | None = None
        self._decoder_version: str | None = None
        self.counts = {"events": 0, "scored": 0, "dead_letters": 0, "alerts": 0, "batches": 0}
        self.checkpoint: Checkpointer | None = None
        self._pending: Pending | None = None
        self._gathered: list = []  # records of the batch being polled; a revocation finishes them too
        self._closing = False
        self._executor: ThreadPoolExecutor | None = None
        self.consumer = self.producer = None
        self.fetcher: FetchProcess | None = None  # stream.fetch_process: records fetched by a child process
        self._group_polled = 0.0  # monotonic time of the group consumer's last poll (fetch process only)
        self.ready = threading.Event()  # set once partitions are assigned (tests, bench)
        self._looping = False  # False while the clients reach the broker: a signal then interrupts the wait

    def stop(self) -> None:
        self._stop.set()

    def install_signal_handlers(self) -> None:
        def handler(signum, frame):
            if not self._looping:  # still reaching the broker: nothing to drain, stop waiting now
                log.info({"event": "signal", "signal": signal.Signals(signum).name, "action": "stop starting"})
                raise KeyboardInterrupt
            log.info({"event": "signal", "signal": signal.Signals(signum).name, "action": "finish batch, drain, close"})
            self.stop()
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    # ------------------------------------------------------------------ the loop
    def run(self, max_events: int | None = None) -> dict:
        k, sc = self.settings.kafka, self.settings.stream
        try:
            self._start_clients()
        except KafkaError as e:  # an ACL that refuses the group or the transactional id, ...: one line, exit 2
            self._close()
            raise KafkaStartError(k, "the streamer's start", e) from None
        except Exception:  # KafkaUnavailable, a fetch process that cannot start: what was built is closed too
            self._close()
            raise
        log.info({"event": "started", "topic": k.events_topic, "group": k.group_id, "max_batch": sc.max_batch,
                  "max_wait_ms": sc.max_wait_ms, "max_in_flight": sc.max_in_flight, "delivery": k.delivery,
                  "commit_interval_ms": k.commit_interval_ms, "fetch_process": sc.fetch_process,
                  **({"transactional_id": transactional_id(k)} if k.delivery == "exactly_once" else {})})
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kdsm-score")
        try:
            self._use_model(self.provider.current())  # metrics and the log name the model before the first event
            self._looping = True
            while not self._stop.is_set():
                self.metrics.last_loop = time.time()
                # While a batch is being scored or awaits its acks, poll briefly so it is published and
                # committed soon; a full batch returns at once either way.
                busy = self._pending is not None or len(self.checkpoint.in_flight) > 0
                rb = self._poll(min(sc.max_wait_ms, _BUSY_WAIT_MS) if busy else sc.max_wait_ms)
                if self.consumer.assignment():
                    self.ready.set()
                # The model is taken after the poll, so records that arrive after a swap meet the new version;
                # taken on every turn, so kdsm_model_info follows a swap even while no event arrives.
                model = self.provider.current()
                self._use_model(model)
                nxt = self._prepare(rb, model) if len(rb) else None  # its scoring starts now, in the background
                try:
                    self._publish_pending()  # the previous batch: wait for its scores, publish
                except TransactionAborted:  # exactly once: read that batch again, and what followed it
                    nxt = None
                    self._drop_polled()
                    self.checkpoint.rewind()
                    if self.fetcher is not None:  # fetch again from where the consumer now stands
                        self.fetcher.assign({tp: self.consumer.position(tp) for tp in self.consumer.assignment()})
                self._pending = nxt
                self._after_commit(self.checkpoint.retire())
                if len(self.checkpoint.in_flight) >= sc.max_in_flight:
                    self._backpressure()
                if max_events is not None and self.counts["events"] >= max_events:
                    break
            try:
                self._publish_pending()
            except TransactionAborted:
                pass  # not committed: the next owner of the partitions reads it again
            self._after_commit(self.checkpoint.drain_final())  # uncommitted at the end: DeliveryError, exit 1
        except Exception as e:
            stop = e if isinstance(e, DeliveryError) else e.__cause__ if isinstance(e.__cause__, DeliveryError) else None
            if stop is not None:  # a known stop (fenced, unanswered, unacknowledged): one clear line, no traceback
                log.error({"event": stop.event, "error": str(stop), "effect": "stopping; nothing more is committed"})
                raise stop from None
            # Under at-least-once nothing before the first poll asks the group coordinator: what it refuses surfaces
            # here (kafka-python wraps what the rebalance listener raised, its offset fetch refused, in a KafkaError)
            refused = e if isinstance(e, REFUSED) else e.__cause__ if isinstance(e.__cause__, REFUSED) else None
            if refused is not None:
                e = KafkaStartError(k, f"consuming {k.events_topic} in group {k.group_id}", refused)
            elif isinstance(e.__cause__, KafkaStartError):  # the fetch process's refusal, met by the listener's assign
                e = e.__cause__
            if isinstance(e, KafkaStartError):  # also the fetch process's consumer, refused
                log.error({"event": "kafka_refused", "error": str(e), "effect": "stopping; nothing more is committed"})
                raise e from None
            # kafka-python wraps a listener's exception ("User rebalance callback throws an error"): name the cause too.
            log.exception({"event": "crashed", "error": repr(e), "cause": repr(e.__cause__) if e.__cause__ else None,
                           "effect": "batches in flight stay uncommitted"})
            raise
        finally:
            self._executor.shutdown(wait=True)
            self._close()
        log.info({"event": "stopped", **self.counts})
        return dict(self.counts)

    def _start_clients(self) -> None:
        """Topics, clients, the fetch process, the subscription: what the loop needs before its first poll."""
        k, sc = self.settings.kafka, self.settings.stream
        ensure_topics(k, [k.alerts_topic, k.deadletter_topic])
        if k.delivery == "exactly_once":
            self.consumer = make_consumer(k, isolation_level="read_committed")
            self.producer = make_transactional_producer(k)
            self.checkpoint = TransactionalCheckpointer(self.consumer, self.producer, self.metrics, k.delivery_timeout_s,
                                                        transactional_id=transactional_id(k))
            self.checkpoint.warm_up(k.group_id, [k.alerts_topic, k.deadletter_topic])
        else:
            self.consumer = make_consumer(k)
            self.producer = make_producer(k)
            self.checkpoint = Checkpointer(self.consumer, self.producer, self.metrics, k.delivery_timeout_s,
                                           commit_interval_s=k.commit_interval_ms / 1000)
        if sc.fetch_process:
            self.fetcher = FetchProcess(k, sc.max_batch,
                                        "read_committed" if k.delivery == "exactly_once" else "read_uncommitted").start()
        self.consumer.subscribe([k.events_topic], listener=_Rebalance(self))

    def _close(self) -> None:
        """Close the clients built (all of them, or those a failed start built); an error here is logged, never raised
        over the one that ended the loop."""
        self._closing = True
        wait_s = self.settings.kafka.delivery_timeout_s  # a broker that answers nothing holds neither up longer
        closers = (("fetch process", lambda: self.fetcher is not None and self.fetcher.close()),
                   ("producer", lambda: self.producer is not None and self.producer.close(timeout=wait_s)),
                   ("consumer", lambda: self.consumer is not None
                    and self.consumer.close(autocommit=False, timeout_ms=int(wait_s * 1000))))
        for client, close in closers:
            try:
                close()
            except Exception as e:  # noqa: BLE001 - see the docstring
                log.warning({"event": "close_failed", "client": client, "error": repr(e)})

    def _poll(self, wait_ms: int) -> RecordBatch:
        """The next micro-batch: polled here, or taken from the fetch process (this consumer then only keeps the
        group: heartbeats, rebalances, commits; its partitions stay paused)."""
        sc = self.settings.stream
        if self.fetcher is None:
            return poll_batch(self.consumer, sc.max_batch, wait_ms, self._gathered)
        # Joining or rejoining, the poll must wait: kafka-python finishes a join only inside a poll with time left
        # (the coordinator is private; the rebalance listener already reads committed offsets through it).
        if not self.consumer.assignment() or self.consumer._coordinator.need_rejoin():
            self.consumer.poll(timeout_ms=wait_ms)
            self._group_polled = time.monotonic()
            return RecordBatch.from_records([])
        # Heartbeats run on their own thread and flag a rebalance (need_rejoin, above); a poll keeps the member within
        # max_poll_interval_ms. It costs about 0.25 ms, so at most one per _GROUP_POLL_S, not one per batch.
        if time.monotonic() - self._group_polled >= _GROUP_POLL_S:
            self.consumer.poll(timeout_ms=0)
            self._group_polled = time.monotonic()
        return self.fetcher.next_batch(sc.max_batch, wait_ms)

    def _backpressure(self) -> None:
        """Pause fetching while the oldest batches wait for their acks, then commit them (or, with a commit
        interval, leave them for its commit) and resume. With the fetch process the pipe holds it back instead:
        the child waits while the loop does not read."""
        parts = self.consumer.assignment() if self.fetcher is None else set()  # the fetch process: paused already
        self.consumer.pause(*parts)
        self.metrics.paused.inc()
        try:
            self._after_commit(self.checkpoint.settle())
        finally:
            self.consumer.resume(*[p for p in parts if p in self.consumer.assignment()])

    def _use_model(self, model) -> None:
        if model.version_ == self._decoder_version:
            return
        sc, k = self.settings.stream, self.settings.kafka
        fields = (sc.id_field, sc.ts_field, sc.schema_field, model.schema_hash_, k.max_event_bytes)
        spec = getattr(model, "features_", None)  # a feature spec: mixed events; none: the numeric fast path
        self._decoder = SpecDecoder(spec, *fields) if spec is not None else Decoder(model.feature_names_, *fields)
        self._decoder_version = model.version_
        self.metrics.model.clear()
        self.metrics.model.labels(model.version_, model.schema_hash_).set(1)
        self.metrics.device.clear()
        self.metrics.device.labels(str(model.device_)).set(1)
        log.info({"event": "model", "version": model.version_, "schema_hash": model.schema_hash_,
                  "device": str(model.device_), "features": len(model.feature_names_)})
        settle_heap()

    def _prepare(self, rb: RecordBatch, model) -> Pending:
        """Decode now; score on the scoring thread."""
        t0 = time.perf_counter()
        thresholds = self.thresholds.get(model) if self.thresholds is not None else dict(model.thresholds_)
        self.checkpoint.took(rb.first_offsets())
        dec = self._decoder.decode(rb.values)
        if rb.unreadable:  # records kafka-python could not read (batch.Unreadable): no value, so rejected as empty
            mark_unreadable(dec, rb.unreadable)
        return Pending(rb, model, thresholds, dec, self._executor.submit(self._score_timed, model, dec, thresholds),
                       time.perf_counter() - t0)

    def _drop_polled(self) -> None:
        """Forget the batch being scored and the records gathered (their transaction was not committed); they are
        read again from the committed offsets, or from where this member first took them (``resume_at``)."""
        self._pending = None
        if self._gathered:
            self.checkpoint.took(RecordBatch.from_records(self._gathered).first_offsets())
            self._gathered.clear()

    def _publish_pending(self) -> None:
        """Publish the batch being scored (if any); also called by the rebalance listener before it drains."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._publish(pending)

    def _publish_gathered(self) -> None:
        """Score and publish the records polled for the next batch (the rebalance listener, before a revocation)."""
        if self._gathered:
            rb = RecordBatch.from_records(self._gathered)
            self._gathered.clear()
            model = self.provider.current()
            self._use_model(model)
            self._publish(self._prepare(rb, model))

    def _publish(self, p: Pending) -> None:
        k = self.settings.kafka
        rb, model, thresholds, dec = p.records, p.model, p.thresholds, p.decoded
        res, score_s = p.scores.result()
        # The batch's own time only: the wait for the scores overlaps the next batch's poll and decode.
        t0 = time.perf_counter()
        flight = InFlight(offsets=rb.commit_offsets(), scored=None,
                          timestamps_ms=rb.timestamps_ms[latency_samples(len(rb))].tolist())
        alerts = build_alerts(rb, dec, res, model, thresholds)
        if alerts:
            pos = dec.rows[res.alert_rows]
            names = self._alert_headers if rb.headers is not None else None  # None: no record of the batch has any
            for (key, value), i, ts_ms in zip(alerts, pos.tolist(), rb.timestamps_ms[pos].tolist(), strict=True):
                headers = alert_headers(rb.headers_at(i), names) if names else None
                # Observed on whichever send is acknowledged: the original, a re-send or its fallback.
                self.checkpoint.send(flight, k.alerts_topic, key, value, headers,
                                     on_acked=functools.partial(self._alert_acked, ts_ms))
        for r in dec.rejects:  # the original key and headers, so a dead letter is found as the event was
            headers, header_bytes = dead_letter_headers(rb.headers_at(r.index), k.deadletter_max_bytes)
            self.checkpoint.send(flight, k.deadletter_topic, rb.keys[r.index],
                                 dead_letter(rb.values[r.index], rb.topics[r.index], int(rb.partitions[r.index]),
                                             int(rb.offsets[r.index]), r.reason, r.message,
                                             int(rb.timestamps_ms[r.index]), model.version_,
                                             k.deadletter_max_bytes - header_bytes, k.deadletter_oversize), headers)
        rows = dec.rows
        flight.scored = ScoredBatch(
            topics=[rb.topics[i] for i in rows.tolist()], partitions=rb.partitions[rows], offsets=rb.offsets[rows],
            timestamps_ms=rb.timestamps_ms[rows], event_ids=dec.ids, event_ts=dec.ts, X=dec.X, scores=res.scores,
            severities=res.severities, model_version=model.version_, schema_hash=model.schema_hash_,
            feature_names=list(model.feature_names_), thresholds=dict(thresholds), n_dead_letters=len(dec.rejects))
        self.checkpoint.add(flight)  # exactly once: commits here, or raises TransactionAborted (counted nothing)
        # Metrics, once per batch.
        for r in dec.rejects:
            self.metrics.dead_letters.labels(r.reason).inc()
        n_ok, n_dead = len(dec.X), len(dec.rejects)
        self.metrics.events.labels("scored").inc(n_ok)
        self.metrics.events.labels("dead_letter").inc(n_dead)
        for sev, c in severity_counts(res.severities).items():
            self.metrics.alerts.labels(sev).inc(c)
        if res.leading is not None:
            for part, c in zip(*np.unique(res.leading.astype(str), return_counts=True), strict=True):
                self.metrics.alerts_by_part.labels(part).inc(int(c))
        self.metrics.batch_size.observe(len(rb))
        self.metrics.batch_seconds.observe(p.decode_s + score_s + time.perf_counter() - t0)
        c = self.counts
        c["events"] += len(rb)
        c["scored"] += n_ok
        c["dead_letters"] += n_dead
        c["alerts"] += len(alerts)
        c["batches"] += 1

    def _alert_acked(self, ts_ms: int, _metadata) -> None:
        """Producer I/O thread: an alert was acknowledged (acks=all); event timestamp -> ack latency."""
        now = time.time()
        if ts_ms > 0:
            self.metrics.alert_seconds.observe(max(0.0, now - ts_ms / 1000.0))
        if self.on_alert_acked is not None:
            self.on_alert_acked(ts_ms, now)

    def _score_timed(self, model, dec: Decoded, thresholds) -> tuple[ScoreResult, float]:
        t0 = time.perf_counter()
        res = self._score(model, dec, thresholds)
        return res, time.perf_counter() - t0

    def _score(self, model, dec: Decoded, thresholds) -> ScoreResult:
        empty = ScoreResult(np.zeros(0), np.zeros(0, dtype=object), np.zeros(0, np.int64), np.zeros(0), None)
        if not len(dec.X):
            return empty
        try:
            res = self.scorer.score(model, dec.X, thresholds, dec.records)
            bad = ~np.isfinite(res.scores)
            if not bad.any():
                return res
            # NaN never leaves the scorer: such rows (a model that overflows, say) go to the dead-letter topic.
            log.error({"event": "non_finite_scores", "rows": int(bad.sum()), "model": model.version_})
            dec.rejects.extend(Reject(int(i), "scoring_error", "the model scored this row as non-finite")
                               for i in dec.rows[bad])
            ok = np.flatnonzero(~bad)
            dec.X, dec.rows = dec.X[ok], dec.rows[ok]
            dec.ids, dec.ts = [dec.ids[i] for i in ok], [dec.ts[i] for i in ok]
            if dec.records is not None:
                dec.records = [dec.records[i] for i in ok]
            return self.scorer.score(model, dec.X, thresholds, dec.records) if len(ok) else empty
        except Exception as e:  # noqa: BLE001 - a scorer failure must not stop the stream: dead-letter the rows
            log.exception({"event": "scoring_error", "rows": len(dec.X)})
            dec.rejects.extend(Reject(int(i), "scoring_error", repr(e)[:500]) for i in dec.rows)
            dec.X, dec.rows, dec.ids, dec.ts = dec.X[:0], dec.rows[:0], [], []
            dec.records = [] if dec.records is not None else None
            return empty

    def _after_commit(self, batches: list[ScoredBatch]) -> None:
        for b in batches:
            for sink in self.sinks:
                try:
                    sink.on_committed(b)
                except Exception:  # noqa: BLE001 - a sink never stops scoring
                    self.metrics.sink_errors.labels(type(sink).__name__).inc()
                    log.exception({"event": "sink_error", "sink": type(sink).__name__})
