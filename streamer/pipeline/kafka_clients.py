"""kafka-python clients built from ``settings.kafka`` (security passthrough included), and topic creation.

>>> from streamer.config import KafkaConfig
>>> client_kwargs(KafkaConfig(bootstrap="a:1,b:2"))["bootstrap_servers"]
['a:1', 'b:2']
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import ssl
import threading
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import (
    AuthorizationError,
    GroupMaxSizeReachedError,
    IllegalSaslStateError,
    IncompatibleBrokerVersion,
    InvalidGroupIdError,
    InvalidReplicationFactorError,
    InvalidSessionTimeoutError,
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
    SaslAuthenticationFailedError,
    TopicAlreadyExistsError,
    UnsupportedSaslMechanismError,
)

log = logging.getLogger("kdsm.kafka")

_SECURITY = (ssl.SSLError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError, IllegalSaslStateError,
             KafkaConfigurationError)
_SECURITY_KEYS = "kafka.security_protocol, kafka.sasl_mechanism, kafka.sasl_username, kafka.sasl_password, kafka.ssl_*"


def describe(e: BaseException) -> str:
    """An error as one line with its class named (kafka-python's errors name theirs already).

    >>> describe(FileNotFoundError(2, "No such file or directory")), describe(KafkaTimeoutError("Unable to bootstrap"))
    ('FileNotFoundError: [Errno 2] No such file or directory', 'KafkaTimeoutError: Unable to bootstrap')
    """
    text = " ".join(str(e).split())
    return text if type(e).__name__ in text else f"{type(e).__name__}: {text}" if text else type(e).__name__


# What a broker answers that no retry mends: the group or a topic refused to this principal (an ACL), a session timeout
# outside the broker's bounds, an invalid group id, a full group. A user's error (one line, exit 2), not a crash.
REFUSED = (AuthorizationError, InvalidSessionTimeoutError, InvalidGroupIdError, GroupMaxSizeReachedError)


def settings_hint(e: BaseException) -> str:
    """The settings to look at for ``e`` (a leading space and parentheses), or ''."""
    if isinstance(e, AuthorizationError):
        return " (the broker's ACLs refuse it to this client's principal: kafka.sasl_username)"
    if isinstance(e, InvalidSessionTimeoutError):
        return (" (kafka.session_timeout_ms: outside the broker's group.min.session.timeout.ms and "
                "group.max.session.timeout.ms, by default 6000 and 1800000)")
    if isinstance(e, (InvalidGroupIdError, GroupMaxSizeReachedError)):
        return " (kafka.group_id)"
    if isinstance(e, InvalidReplicationFactorError):
        return " (kafka.topic_replication)"
    return f" ({_SECURITY_KEYS})" if isinstance(e, _SECURITY) else ""


class KafkaUnavailable(ConnectionError):
    """No broker of ``kafka.bootstrap`` answered within ``kafka.connect_timeout_s``; with kafka-python's last failed
    attempt where it logged one (a refused connection, a name that does not resolve, a TLS or SASL handshake the broker
    refused), which its timeout does not name."""

    def __init__(self, k, cause: Exception | None = None, last: BaseException | None = None):
        # A handshake refused (TLS, SASL): a broker answered, and took no connection of this client's
        what = "accepted a connection" if isinstance(last, _SECURITY) else "answered"
        super().__init__(f"Kafka at {k.bootstrap} is unreachable: no broker {what} within {k.connect_timeout_s:g} s "
                         f"(kafka.bootstrap, kafka.connect_timeout_s)" + (f": {cause}" if cause else "")
                         + (f"; the last attempt failed: {describe(last)}{settings_hint(last)}" if last else ""))


class KafkaStartError(KafkaUnavailable):
    """A broker answered, and what a command needs at start failed: an ACL that refuses the group, a topic or the
    transactional id, a request it rejects. One line, exit 2, like ``KafkaUnavailable`` (a subclass, so every command
    that reports one reports this too), instead of kafka-python's traceback."""

    def __init__(self, k, doing: str, cause: BaseException):
        ConnectionError.__init__(self, f"Kafka at {k.bootstrap}: {doing} failed: {describe(cause)}{settings_hint(cause)}")


class _LastBootstrapError(logging.Handler):
    """kafka-python's last failed bootstrap attempt, read from its log: its warning 'Bootstrap connection to %s failed:
    %s (backoff ...)' carries the exception; the timeout it raises at the end names none."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.last: BaseException | None = None

    def emit(self, record):
        args = record.args if isinstance(record.args, tuple) else ()
        if isinstance(record.msg, str) and record.msg.startswith("Bootstrap connection to") and len(args) >= 2 \
                and isinstance(args[1], BaseException):
            self.last = args[1]


_listen_lock = threading.Lock()
_listening = {"builds": 0, "saved": None}


@contextlib.contextmanager
def _bootstrap_errors():
    """Within: kafka-python's failed bootstrap attempts are heard (``.last``), even where the streamer's logging keeps
    kafka-python quiet (``streamer.pipeline.logs``): its manager's logger then hears warnings for the handler only
    (no propagation), as long as a build is under way."""
    logger = logging.getLogger("kafka.net.manager")
    handler = _LastBootstrapError()
    with _listen_lock:
        if _listening["builds"] == 0 and not logger.isEnabledFor(logging.WARNING):
            _listening["saved"] = (logger.level, logger.propagate)
            logger.setLevel(logging.WARNING)
            logger.propagate = False
        _listening["builds"] += 1
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        with _listen_lock:
            logger.removeHandler(handler)
            _listening["builds"] -= 1
            if _listening["builds"] == 0 and _listening["saved"] is not None:
                logger.setLevel(_listening["saved"][0])
                logger.propagate = _listening["saved"][1]
                _listening["saved"] = None


def _tls_answer(host: str, port: int, timeout: float) -> bool | str | None:
    """Whether the listener at host:port speaks TLS, within ``timeout`` in all: True when it completed a handshake or
    failed it as a TLS server does (a certificate, a protocol version: kafka-python says which); a reason when it is
    not TLS (no answer to the handshake in time, or an answer that is not a TLS record); None when unknown (refused,
    unresolvable, unrouted, reset: kafka-python's bootstrap reports those within its timeout)."""
    deadline = time.monotonic() + timeout
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # is it TLS at all; kafka-python verifies
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return None
    try:
        raw.settimeout(max(0.05, deadline - time.monotonic()))  # connect and handshake share the one timeout
        with ctx.wrap_socket(raw, server_hostname=host or None):
            return True
    except TimeoutError:
        return f"no TLS handshake answer within {timeout:g} s"
    except ssl.SSLError as e:
        if e.reason in ("WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE", "HTTP_REQUEST"):
            return f"an answer that is not TLS ({e.reason})"
        return True
    except OSError:
        return None
    finally:
        raw.close()


def _check_tls_listeners(k) -> None:
    """``security_protocol`` SSL or SASL_SSL against plain-TCP listeners: kafka-python's bootstrap then waits on the
    TLS handshake past ``bootstrap_timeout_ms``, for ever where the listener keeps the connection open. So every
    bootstrap address gets one handshake first, all at once, within ``connect_timeout_s``: the first that speaks TLS
    ends the check; when none does and at least one answered otherwise (silence, plain bytes), ``KafkaUnavailable``
    says so; addresses that cannot be reached are left to kafka-python."""
    if not k.security_protocol.endswith("SSL"):
        return
    entries = [e.strip() for e in k.bootstrap.split(",") if e.strip()]
    answers: queue.Queue = queue.Queue()

    def ask(entry: str) -> None:
        host, _, port = entry.rpartition(":")
        answers.put((entry, _tls_answer(host.strip("[]"), int(port), k.connect_timeout_s)))

    for entry in entries:  # daemon threads: one still waiting on a silent address never holds up the exit
        threading.Thread(target=ask, args=(entry,), name="kdsm-tls-check", daemon=True).start()
    deadline = time.monotonic() + k.connect_timeout_s + 1.0
    reasons = {}
    for _ in entries:
        try:
            entry, answer = answers.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if answer is True:
            return
        if answer is not None:
            reasons[entry] = answer
    if reasons:
        said = "; ".join(f"{e}: {reasons[e]}" for e in entries if e in reasons)
        raise KafkaUnavailable(k, f"security_protocol {k.security_protocol}, but {said}: is the listener plain TCP? "
                                  f"(kafka.security_protocol)")


def _reach(k, build, doing: str, check_tls: bool = True):
    """Build a client (or run its first request): a bootstrap that times out becomes one ``KafkaUnavailable`` naming the
    address and the last attempt's error; any other ``KafkaError`` (an ACL, a refused request) a ``KafkaStartError``
    naming what was being done. With TLS, the listeners are checked to speak it first (``_check_tls_listeners``;
    ``check_tls`` False where the client was just built, so checked)."""
    if check_tls:
        _check_tls_listeners(k)
    with _bootstrap_errors() as seen:
        try:
            return build()
        except KafkaTimeoutError as e:  # kafka-python 3: 'Unable to bootstrap from [...]'
            raise KafkaUnavailable(k, e, seen.last) from None
        except KafkaError as e:
            raise KafkaStartError(k, doing, e) from None


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
        **client_kwargs(k), **extra), "starting a consumer")


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
    return _reach(k, lambda: KafkaProducer(**opts), "starting a producer")


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
    try:
        _reach(k, p.init_transactions, f"initialising the transactions of {transactional_id(k)!r} (kafka.transactional_id)",
               check_tls=False)
    except Exception:
        p.close(timeout=k.delivery_timeout_s)
        raise
    return p


def ensure_topics(k, topics: list[str], partitions: int = 1) -> list[str]:
    """Create the topics that do not exist yet; returns those created. Failures are logged, not raised
    (a production cluster may forbid topic creation, or describing topics, and have them already); an unreachable
    broker raises ``KafkaUnavailable``. Replicated ``kafka.topic_replication`` times (-1: the broker's default; it was
    always 1, and a cluster with min.insync.replicas 2 then refused every acks=all send to the topics it made)."""
    created = []
    try:
        admin = _reach(k, lambda: KafkaAdminClient(client_id=k.client_id, **client_kwargs(k)), "starting an admin client")
    except KafkaStartError as e:
        log.warning({"event": "topic_admin_unavailable", "error": str(e)})
        return created
    try:
        try:
            existing = set(admin.list_topics())
        except KafkaError as e:  # an ACL without Describe, say: the clients that need the topics report what is wrong
            log.warning({"event": "topic_admin_unavailable", "error": describe(e)})
            return created
        for t in topics:
            if t in existing:
                continue
            try:
                admin.create_topics([NewTopic(t, partitions, k.topic_replication)])
                created.append(t)
            except TopicAlreadyExistsError:
                pass
            except KafkaError as e:  # a broker before 2.4 cannot take the default replication factor (-1)
                hint = " (kafka.topic_replication)" if isinstance(e, IncompatibleBrokerVersion) else settings_hint(e)
                log.warning({"event": "topic_create_failed", "topic": t, "error": describe(e) + hint})
    finally:
        admin.close()
    return created
