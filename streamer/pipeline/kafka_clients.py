"""kafka-python clients built from ``settings.kafka`` (security passthrough included), and topic creation.

>>> from streamer.config import KafkaConfig
>>> client_kwargs(KafkaConfig(bootstrap="a:1,b:2"))["bootstrap_servers"]
['a:1', 'b:2']
"""

from __future__ import annotations

import logging
import socket

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaError, KafkaTimeoutError, TopicAlreadyExistsError

log = logging.getLogger("kdsm.kafka")


class KafkaUnavailable(ConnectionError):
    """No broker of ``kafka.bootstrap`` answered within ``kafka.connect_timeout_s``."""

    def __init__(self, k, cause: Exception | None = None):
        super().__init__(f"Kafka at {k.bootstrap} is unreachable: no broker answered within {k.connect_timeout_s:g} s "
                         f"(kafka.bootstrap, kafka.connect_timeout_s)" + (f": {cause}" if cause else ""))


def _reach(k, build):
    """Build a client; a bootstrap that times out becomes one ``KafkaUnavailable`` naming the address."""
    try:
        return build()
    except KafkaTimeoutError as e:  # kafka-python 3: 'Unable to bootstrap from [...]'
        raise KafkaUnavailable(k, e) from None


def client_kwargs(k) -> dict:
    kw = {"bootstrap_servers": [b.strip() for b in k.bootstrap.split(",") if b.strip()],
          "security_protocol": k.security_protocol, "bootstrap_timeout_ms": int(k.connect_timeout_s * 1000)}
    if k.sasl_mechanism:
        kw["sasl_mechanism"] = k.sasl_mechanism
        kw["sasl_plain_username"] = k.sasl_username
        kw["sasl_plain_password"] = k.sasl_password.get_secret_value() if k.sasl_password else None
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        if getattr(k, name):
            kw[name] = getattr(k, name)
    return kw


def make_consumer(k, group_id: str | None = None, *, grouped: bool = True, **extra) -> KafkaConsumer:
    """A manual-commit group consumer; raw bytes in (decoding is the decoder's job). ``grouped=False``: no group
    (partitions by ``assign``; the fetch process's consumer)."""
    return _reach(k, lambda: KafkaConsumer(
        group_id=(group_id if group_id is not None else k.group_id) if grouped else None, client_id=k.client_id,
        enable_auto_commit=False, auto_offset_reset=k.auto_offset_reset,
        session_timeout_ms=k.session_timeout_ms, heartbeat_interval_ms=k.heartbeat_interval_ms,
        max_poll_interval_ms=k.max_poll_interval_ms, fetch_max_wait_ms=k.fetch_max_wait_ms,
        **client_kwargs(k), **extra))


def make_producer(k, **extra) -> KafkaProducer:
    """acks=all; batching by linger_ms/batch_size so one flush per micro-batch sends few requests.

    At least once, a record not delivered within ``kafka.delivery_timeout_s`` fails (``delivery_timeout_ms``; kafka-python's own
    default, 120 s, outlasted the checkpointer's wait): what the checkpointer re-sends has failed for good, it is
    not still queued to be written beside its copy. kafka-python requires delivery_timeout_ms >= linger_ms +
    request_timeout_ms, hence the request timeout (30 s by default) within it. The transactional producer (exactly
    once) keeps kafka-python's timeouts.
    """
    opts = {"acks": "all", "linger_ms": k.linger_ms, "batch_size": k.producer_batch_bytes,
            "client_id": k.client_id, "retries": 5, "enable_idempotence": k.idempotent_producer,
            **client_kwargs(k)}
    if extra.get("transactional_id"):
        opts["enable_idempotence"] = True  # transactions need it, whatever the at-least-once setting says
    else:
        # At least once re-sends what failed: bound a record's life so nothing re-sent is still queued. A transaction
        # is never re-sent (an abort re-reads its events) and keeps kafka-python's timeouts: a 2 s request timeout
        # turned a stalled broker's unresolved commit into a fatal transactional error.
        opts["delivery_timeout_ms"] = int(k.delivery_timeout_s * 1000)
    opts.update(extra)
    if "delivery_timeout_ms" in opts:  # from the final linger_ms: the benches pass their own
        opts.setdefault("request_timeout_ms", max(1, min(30000, opts["delivery_timeout_ms"] - opts["linger_ms"])))
    return _reach(k, lambda: KafkaProducer(**opts))


def transactional_id(k) -> str:
    """The producer's transactional id under ``kafka.delivery: exactly_once``.

    One id per streamer instance, stable across its restarts: a restarted instance fences its previous
    incarnation and aborts the transaction it left open. Per instance, not per partition: the offsets go
    with the consumer's group metadata (KIP-447), so on Kafka >= 2.5 the group generation fences a member
    that lost its partitions. Default ``<group_id>.<hostname>`` (a StatefulSet pod name is stable; two
    streamers on one host need ``kafka.transactional_id`` each, else the second fences the first).

    >>> from streamer.config import KafkaConfig
    >>> transactional_id(KafkaConfig(group_id="g", transactional_id="g.0"))
    'g.0'
    """
    return k.transactional_id or f"{k.group_id}.{socket.gethostname()}"


def make_transactional_producer(k) -> KafkaProducer:
    """A producer for exactly-once delivery: transactional (idempotent, acks=all), transactions initialised
    (which fences an older producer with the same id and aborts what it left open)."""
    p = make_producer(k, transactional_id=transactional_id(k))
    _reach(k, p.init_transactions)
    return p


def ensure_topics(k, topics: list[str], partitions: int = 1, replication: int = 1) -> list[str]:
    """Create the topics that do not exist yet; returns those created. Failures are logged, not raised
    (a production cluster may forbid topic creation and have them already); an unreachable broker
    raises ``KafkaUnavailable``."""
    created = []
    try:
        admin = _reach(k, lambda: KafkaAdminClient(client_id=k.client_id, **client_kwargs(k)))
    except KafkaError as e:
        log.warning({"event": "topic_admin_unavailable", "error": str(e)})
        return created
    try:
        existing = set(admin.list_topics())
        for t in topics:
            if t in existing:
                continue
            try:
                admin.create_topics([NewTopic(t, partitions, replication)])
                created.append(t)
            except TopicAlreadyExistsError:
                pass
            except KafkaError as e:
                log.warning({"event": "topic_create_failed", "topic": t, "error": str(e)})
    finally:
        admin.close()
    return created
