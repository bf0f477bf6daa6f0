"""Settings of the whole product: the offline sections plus the online ones.

Loaded from YAML with env overrides ``KDSM_<SECTION>__<KEY>`` (see
``offline_train.config.load_settings``).

>>> s = Settings()
>>> s.sigma.base
0.5
"""

from __future__ import annotations

import ipaddress
import os
import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from offline_train.config import Section, TrainSettings
from streamer.lifecycle.config import ArchiveConfig, DriftConfig, RegistryConfig, RetrainConfig

# kafka-python's consumer request timeout, which the streamer's consumers keep: a fetch the broker may hold longer fails
CONSUMER_REQUEST_TIMEOUT_MS = 30000
REDIS_URL_FORMS = "redis://[:password@]host[:port][/db], rediss://... (TLS) or unix:///path/to/redis.sock"


def check_redis_url(url: str) -> str:
    """``url`` if redis-py can build a client from it: scheme redis, rediss or unix, a port in 1..65535 when given.

    The message never repeats the URL: it may hold a password.

    >>> check_redis_url("rediss://:pw@[::1]:6380/0?ssl_ca_certs=/ca.pem")
    'rediss://:pw@[::1]:6380/0?ssl_ca_certs=/ca.pem'
    >>> check_redis_url("127.0.0.1:6379")
    Traceback (most recent call last):
    ...
    ValueError: no scheme: expected redis://[:password@]host[:port][/db], rediss://... (TLS) or unix:///path/to/redis.sock
    >>> check_redis_url("redis://127.0.0.1:99999/0")
    Traceback (most recent call last):
    ...
    ValueError: the port is not a number in 1..65535
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if not scheme:
        raise ValueError(f"no scheme: expected {REDIS_URL_FORMS}")
    if scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"scheme {scheme}:// is not redis://, rediss:// or unix://: expected {REDIS_URL_FORMS}")
    try:
        parts = urlsplit(url)
        port = parts.port  # urllib checks the port here, and the brackets of an IPv6 address above
    except ValueError as e:
        if "port" in str(e).lower():  # out of 0..65535, or not a number (not quoted: it may be a misplaced password)
            raise ValueError("the port is not a number in 1..65535") from None
        raise ValueError(f"not a URL ({e}): expected {REDIS_URL_FORMS}") from None
    if port == 0:
        raise ValueError("the port is not a number in 1..65535")
    if scheme == "unix" and not parts.path:
        raise ValueError("unix:// needs the socket's path: unix:///path/to/redis.sock")
    return url


_HOST_PORT = re.compile(r"(?P<host>\[[^\[\]]*\]|[^\s\[\]:/@,]+):(?P<port>[0-9]+)")


def check_bootstrap(value: str) -> str:
    """``value`` if it is a comma-separated list of ``host:port`` (``[IPv6]:port``), every port in 1..65535.

    >>> check_bootstrap("kafka-0:9092, 10.0.0.7:9093,[::1]:9094")
    'kafka-0:9092, 10.0.0.7:9093,[::1]:9094'
    >>> check_bootstrap("localhost:abc")
    Traceback (most recent call last):
    ...
    ValueError: 'localhost:abc' is not host:port with a port in 1..65535 (IPv6: [::1]:9092)
    """
    entries = [e.strip() for e in value.split(",")]
    if entries == [""]:
        raise ValueError("empty: expected a comma-separated host:port list, e.g. kafka-0:9092,kafka-1:9092")
    for entry in entries:
        if not entry:
            raise ValueError(f"an empty entry in {value!r}: expected a comma-separated host:port list")
        m = _HOST_PORT.fullmatch(entry)
        ok = m is not None and 1 <= int(m["port"]) <= 65535
        if ok and m["host"].startswith("["):
            try:
                ipaddress.IPv6Address(m["host"][1:-1])
            except ValueError:
                ok = False
        if not ok:
            raise ValueError(f"{entry!r} is not host:port with a port in 1..65535 (IPv6: [::1]:9092)")
    return value


# kafka-python 3's SASL mechanisms that these settings can drive (kafka.net.sasl): OAUTHBEARER needs a token provider
# object, which no setting can give.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "AWS_MSK_IAM")


def check_sasl_mechanism(value: str) -> str:
    """``value`` in capitals if kafka-python can authenticate with it from these settings.

    kafka-python takes an unknown name until a broker answers its handshake, and then retries until the connect
    timeout: the streamer said the broker was unreachable.

    >>> check_sasl_mechanism("scram-sha-512")
    'SCRAM-SHA-512'
    >>> check_sasl_mechanism("FOO")
    Traceback (most recent call last):
    ...
    ValueError: 'FOO' is not a SASL mechanism kdsm can use: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, GSSAPI or AWS_MSK_IAM
    """
    name = value.strip().upper()
    if name == "OAUTHBEARER":
        raise ValueError("OAUTHBEARER needs a token provider object (kafka-python's sasl_oauth_token_provider), which no "
                         f"setting can give: use {', '.join(SASL_MECHANISMS[:-1])} or {SASL_MECHANISMS[-1]}")
    if name not in SASL_MECHANISMS:
        raise ValueError(f"{value!r} is not a SASL mechanism kdsm can use: {', '.join(SASL_MECHANISMS[:-1])} or "
                         f"{SASL_MECHANISMS[-1]}")
    return name


def check_readable_file(path: str) -> str:
    """``path`` if this process can read it as a file. kafka-python opens the TLS files at each connection attempt,
    and a missing one made the streamer say the broker was unreachable."""
    if not os.path.exists(path):
        raise ValueError(f"no such file: {path}")
    if not os.path.isfile(path):
        raise ValueError(f"not a file: {path}")
    if not os.access(path, os.R_OK):
        raise ValueError(f"not readable by this process (user id {os.getuid()}): {path}")
    return path


_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]")


def check_topic(name: str) -> str:
    """``name`` if Kafka takes it for a topic: 1 to 249 ASCII letters, digits, '.', '_' and '-', not '.' or '..'.

    kafka-python refuses any other name only when the streamer subscribes (a ValueError traceback), and a broker at
    the first request.

    >>> check_topic("kdsm.events_v2-eu")
    'kdsm.events_v2-eu'
    >>> check_topic("bad topic!")
    Traceback (most recent call last):
    ...
    ValueError: 'bad topic!' is not a Kafka topic name: ' ', '!' not allowed (1 to 249 ASCII letters, digits, '.', '_' and '-'; not '.' or '..')
    """
    rule = "1 to 249 ASCII letters, digits, '.', '_' and '-'; not '.' or '..'"
    bad = sorted({c for c in name if not _TOPIC_CHARS.fullmatch(c)}, key=name.index)
    if bad:
        raise ValueError(f"{name!r} is not a Kafka topic name: {', '.join(map(repr, bad))} not allowed ({rule})")
    if not name or len(name) > 249 or name in (".", ".."):
        raise ValueError(f"{name[:60]!r}{'...' if len(name) > 60 else ''} is not a Kafka topic name "
                         f"({len(name)} characters; {rule})")
    return name


class KafkaConfig(Section):
    """Broker, topics and client settings of the streamer (kafka-python)."""

    bootstrap: str = Field("127.0.0.1:19092", description="comma-separated host:port list of the Kafka brokers (IPv6: [::1]:9092); a port in 1..65535")
    events_topic: str = Field("kdsm.events", description="topic the streamer consumes events from")
    alerts_topic: str = Field("kdsm.alerts", description="topic alerts are published to (key = alert_id)")
    deadletter_topic: str = Field("kdsm.deadletter", description="topic events that cannot be scored go to")
    group_id: str = Field("kdsm-stream", min_length=1, description="consumer group; run N streamers with one group to scale out")
    client_id: str = Field("kdsm-stream", description="client id shown in broker logs")
    topic_replication: int = Field(-1, ge=-1, le=32767, description="replication factor of the topics a kdsm command creates when they do not exist (alerts, dead letters, drift events); -1 = the broker's default.replication.factor (Kafka 2.4+; set that at least to min.insync.replicas, or acks=all sends to them are refused); a broker before 2.4 needs a number")
    connect_timeout_s: float = Field(10.0, gt=0, description="give up reaching a broker after this long (a kdsm command then says Kafka is unreachable)")
    auto_offset_reset: Literal["earliest", "latest"] = Field("earliest", description="where a group without committed offsets starts: earliest = the oldest retained event, latest = only events produced from then on")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field("PLAINTEXT", description="how the clients reach the brokers: plain TCP, TLS, SASL over TCP or SASL over TLS (kafka-python's names)")
    sasl_mechanism: str | None = Field(None, description="PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, GSSAPI or AWS_MSK_IAM; required by SASL_PLAINTEXT and SASL_SSL")
    sasl_username: str | None = Field(None, description="SASL user name")
    sasl_password: SecretStr | None = Field(None, description="SASL password (prefer env KDSM_KAFKA__SASL_PASSWORD)")
    ssl_cafile: str | None = Field(None, description="CA bundle to verify the brokers (SSL only); a file this process can read")
    ssl_certfile: str | None = Field(None, description="client certificate (mutual TLS); a file this process can read")
    ssl_keyfile: str | None = Field(None, description="client private key (mutual TLS); a file this process can read")
    session_timeout_ms: int = Field(10000, gt=0, description="group session timeout; a dead streamer's partitions move after this")
    heartbeat_interval_ms: int = Field(3000, gt=0, description="group heartbeat interval (below session_timeout_ms; a third of it or less is advised)")
    max_poll_interval_ms: int = Field(300000, gt=0, description="longest pause between polls before the group evicts the consumer")
    fetch_max_wait_ms: int = Field(20, ge=0, lt=CONSUMER_REQUEST_TIMEOUT_MS, description="longest the broker may hold a fetch, below the consumer's 30 s request timeout; some brokers (Tansu) wait it out even with data ready, so it bounds latency")
    max_event_bytes: int = Field(65536, gt=0, description="larger events go to the dead-letter topic as 'oversized'")
    deadletter_max_bytes: int = Field(262144, ge=4096, le=1000000, description="largest dead letter; a payload that does not fit is cut or left out (deadletter_oversize), its size and SHA-256 kept; stay under the producer's 1 MiB max_request_size and the broker's message.max.bytes")
    deadletter_oversize: Literal["truncate", "digest"] = Field("truncate", description="what a dead letter keeps of a payload that does not fit: truncate = its first bytes, digest = only its size and SHA-256")
    linger_ms: int = Field(5, ge=0, description="producer: wait this long to fill a batch of alerts")
    producer_batch_bytes: int = Field(262144, gt=0, description="producer: bytes per partition batch")
    delivery_timeout_s: float = Field(30.0, gt=0, description="longest wait for the broker to acknowledge a batch's alerts or answer an offset commit (an unanswered commit fails and is tried again with the next one; four in a row stop the streamer without committing); with exactly_once also for its answer to a transaction's offsets, commit or abort (then the streamer stops: transaction_unresolved); and for each client's close")
    idempotent_producer: bool = Field(True, description="at_least_once: the producer's retries are idempotent (a retried batch is never written twice on Kafka); false for a broker that answers a retried batch as a duplicate without having stored it (the durable Tansu dev broker after kill -9: docs/operations.md); exactly_once is always idempotent")
    delivery: Literal["at_least_once", "exactly_once"] = Field("at_least_once", description="at_least_once: alerts are acked, then offsets committed (a crash re-sends, subscribers de-duplicate by alert_id); exactly_once: a batch's alerts, dead letters and offsets commit in one Kafka transaction (subscribers read with isolation.level=read_committed)")
    commit_interval_ms: int = Field(0, ge=0, description="at_least_once: commit the acknowledged batches' offsets at most this often (0 = after every batch); fewer synchronous commits pay where a commit is a network round trip away (on a local broker the gain was within noise), and a crash re-sends up to this long's events more (de-duplicated by alert_id); the archive sees a batch after its commit; exactly_once commits every batch's transaction")
    transactional_id: str | None = Field(None, description="exactly_once: this instance's transactional id, stable across its restarts and unique in the group (a second process with the same id fences the first); None = <group_id>.<hostname>")

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap_parses(cls, v: str) -> str:
        return check_bootstrap(v)

    @field_validator("topic_replication")
    @classmethod
    def _replication_factor(cls, v: int) -> int:
        if v == 0:
            raise ValueError("a replication factor is at least 1, or -1 for the broker's default")
        return v

    @field_validator("events_topic", "alerts_topic", "deadletter_topic")
    @classmethod
    def _topic_names(cls, v: str) -> str:
        return check_topic(v)

    @field_validator("sasl_mechanism")
    @classmethod
    def _known_mechanism(cls, v: str | None) -> str | None:
        return check_sasl_mechanism(v) if v else None

    @field_validator("ssl_cafile", "ssl_certfile", "ssl_keyfile")
    @classmethod
    def _readable_files(cls, v: str | None) -> str | None:
        return check_readable_file(v) if v else None

    @model_validator(mode="after")
    def _sasl_has_a_mechanism(self) -> KafkaConfig:
        # kafka-python then connects without a handshake, the broker drops it, and the streamer said "unreachable"
        if self.security_protocol.startswith("SASL_") and not self.sasl_mechanism:
            raise ValueError(f"security_protocol {self.security_protocol} needs sasl_mechanism: "
                             f"{', '.join(SASL_MECHANISMS[:-1])} or {SASL_MECHANISMS[-1]}")
        return self

    @model_validator(mode="after")
    def _heartbeat_within_session(self) -> KafkaConfig:
        # kafka-python refuses it only when the consumer is built, with a traceback: say so at load, as a config error
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below session_timeout_ms "
                             f"({self.session_timeout_ms}); a third of it or less is advised")
        return self

    @model_validator(mode="after")
    def _linger_within_delivery(self) -> KafkaConfig:
        # kafka-python needs delivery_timeout_ms >= linger_ms + request_timeout_ms (make_producer fits the latter in)
        if self.linger_ms >= self.delivery_timeout_s * 1000:
            raise ValueError(f"linger_ms ({self.linger_ms}) must be below delivery_timeout_s "
                             f"({self.delivery_timeout_s:g} s): a record must have time to be sent before it expires")
        return self

    @model_validator(mode="after")
    def _interval_needs_at_least_once(self) -> KafkaConfig:
        if self.delivery == "exactly_once" and self.commit_interval_ms:
            raise ValueError("commit_interval_ms applies to at_least_once only: exactly_once commits each batch in "
                             "its own transaction")
        return self


class RedisConfig(Section):
    """The Redis control plane: live thresholds, model registry, retrain requests and lock (streamer.lifecycle.control)."""

    url: str = Field("redis://127.0.0.1:16379/0", description="redis://host:port/db, rediss:// (TLS) or unix:///path URL; a port in 1..65535")
    password: SecretStr | None = Field(None, description="Redis password (prefer env KDSM_REDIS__PASSWORD)")
    key_prefix: str = Field("kdsm:", description="prefix of every key and channel the product uses")
    socket_timeout_s: float = Field(0.5, gt=0, description="per-command timeout of the scoring path (live thresholds); a slow Redis never stalls scoring longer")
    command_timeout_s: float = Field(3.0, gt=0, description="per-command timeout of the control plane: registry, retrain, drift, the kdsm commands")
    connect_timeout_s: float = Field(3.0, gt=0, description="give up connecting to Redis after this long (a kdsm command then says Redis is unreachable)")
    refresh_s: float = Field(1.0, gt=0, description="periodic threshold re-read, in addition to pub/sub notifications")

    @field_validator("url")
    @classmethod
    def _url_parses(cls, v: str) -> str:
        return check_redis_url(v)


class StreamConfig(Section):
    """The scoring loop: micro-batches, device, event fields, backpressure."""

    model: str | None = Field(None, description="model artifact directory (the --model flag overrides it)")
    device: str = Field("auto", description="auto = CUDA when present, else CPU; or cpu, cuda, cuda:1")
    threads: int | None = Field(None, gt=0, le=1024, description="torch CPU threads of a kdsm stream process (at most 1024); None = torch default")
    switch_interval_ms: float = Field(0.5, gt=0, le=1000, description="longest the interpreter lets one thread hold the GIL before handing it on (sys.setswitchinterval; Python's own is 5 ms): shorter, the scoring thread gets it back sooner from the polling thread")
    max_batch: int = Field(2000, gt=0, description="most events per micro-batch")
    max_wait_ms: int = Field(100, ge=0, description="longest wait to fill a micro-batch")
    max_in_flight: int = Field(2, ge=1, description="batches sent but not yet acknowledged; at this many the partitions are paused")
    fetch_process: bool = Field(False, description="fetch and unpack records in a child process (kafka-python unpacks in Python, under the loop's GIL); the streamer's consumer keeps the group and commits. docs/streaming.md, The fetch process")
    id_field: str = Field("id", description="event field holding the event id (required)")
    ts_field: str = Field("ts", description="optional event field holding the event time (number or string)")
    schema_field: str = Field("schema", description="optional event field with the feature schema hash; a mismatch is dead-lettered")
    top_features: int = Field(5, gt=0, description="features explained in each alert")
    alert_headers: list[str] = Field([], description="Kafka header names an alert carries from its event (a trace id: [traceparent, tracestate]); matched exactly, in the event's order, duplicates included, each whole, 16 KiB in all (those past it left out and counted in kdsm.headers_left_out); [] = alerts carry no headers")


class MetricsConfig(Section):
    """Prometheus metrics and the health endpoint."""

    host: str = Field("127.0.0.1", description="address the metrics HTTP server binds to (0.0.0.0 in containers)")
    port: int = Field(9108, ge=0, le=65535, description="metrics port: /metrics and /healthz; 0 = any free port (a port already taken stops kdsm stream in one line)")
    enabled: bool = Field(True, description="serve metrics over HTTP")


class Settings(TrainSettings):
    """Every section; online sections are added by the streamer modules' configs."""

    kafka: KafkaConfig = KafkaConfig()
    redis: RedisConfig = RedisConfig()
    stream: StreamConfig = StreamConfig()
    metrics: MetricsConfig = MetricsConfig()
    archive: ArchiveConfig = ArchiveConfig()
    drift: DriftConfig = DriftConfig()
    registry: RegistryConfig = RegistryConfig()
    retrain: RetrainConfig = RetrainConfig()

    @field_validator("drift")
    @classmethod
    def _drift_topic_name(cls, v: DriftConfig) -> DriftConfig:
        # Checked here, not in DriftConfig: streamer.lifecycle.config sits below this module and cannot import it.
        if v.kafka_topic:
            try:
                check_topic(v.kafka_topic)
            except ValueError as e:
                raise ValueError(f"kafka_topic: {e}") from None
        return v
