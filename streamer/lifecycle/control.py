"""The Redis control plane: one client factory and one key schema for every key and channel.

Every Redis client of the product is built by ``connect`` (``redis_client``
reads its arguments from the ``redis`` config section; ``undecoded`` copies
one for pub/sub, its settings unchanged); every key and
channel name comes from ``Keys``. The hot path (live thresholds) uses the
short ``redis.socket_timeout_s`` so a slow Redis never stalls scoring; the
control-plane callers (registry, retrain, drift, the ``kdsm`` commands) use
``redis.command_timeout_s``; ``blocking`` drops the read timeout (XREAD
BLOCK). All of them give up connecting after ``redis.connect_timeout_s``.

Keys (``P`` = ``redis.key_prefix``, ``V`` = model version):

========================  ====================================================
``P registry:versions``   zset of versions by creation time
``P registry:version:V``  JSON metadata of one version
``P registry:pointers``   hash: current, previous
``P registry:log``        stream: promote / rollback audit
``P registry:events``     channel: the new current version
``P retrain:lock``        the fleet-wide retrain lock
``P retrain:requests``    stream of retrain requests
``P retrain:runs``        list of retrain run records
``P drift:events``        stream of drift events
``P drift:cooldown``      fleet-wide drift cooldown key
``P thresholds:V``        hash: severity -> override JSON
``P thresholds:V:audit``  list: threshold audit records, newest first
``P thresholds:changed``  channel: the version whose thresholds changed
========================  ====================================================

>>> k = Keys("kdsm:")
>>> k.pointers, k.thresholds("v1"), k.thresholds_audit("v1"), k.thresholds_channel
('kdsm:registry:pointers', 'kdsm:thresholds:v1', 'kdsm:thresholds:v1:audit', 'kdsm:thresholds:changed')
>>> mask_url("redis://:hunter2@redis:6379/0")
'redis://:***@redis:6379/0'
"""

from __future__ import annotations

import json
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import unquote_plus, urlsplit, urlunsplit

MASK = "***"

log = logging.getLogger("kdsm.control")


@dataclass(frozen=True)
class Keys:
    """Every Redis key and channel of the product, under one prefix."""

    prefix: str

    def _k(self, name: str) -> str:
        return f"{self.prefix}{name}"

    # registry
    @property
    def versions(self) -> str:
        return self._k("registry:versions")

    def version(self, v: str) -> str:
        return self._k(f"registry:version:{v}")

    @property
    def pointers(self) -> str:
        return self._k("registry:pointers")

    @property
    def channel(self) -> str:
        return self._k("registry:events")

    @property
    def log(self) -> str:
        return self._k("registry:log")

    # retrain
    @property
    def lock(self) -> str:
        return self._k("retrain:lock")

    @property
    def requests(self) -> str:
        return self._k("retrain:requests")

    @property
    def runs(self) -> str:
        return self._k("retrain:runs")

    # drift
    @property
    def drift(self) -> str:
        return self._k("drift:events")

    @property
    def drift_cooldown(self) -> str:
        return self._k("drift:cooldown")

    # thresholds
    def thresholds(self, v: str) -> str:
        return self._k(f"thresholds:{v}")

    def thresholds_audit(self, v: str) -> str:
        return self._k(f"thresholds:{v}:audit")

    @property
    def thresholds_channel(self) -> str:
        return self._k("thresholds:changed")


# Query parameters that carry credentials: redis-py reads ``redis://host:6379/0?password=...`` (and ``username``).
SECRET_QUERY = ("password", "username")


def mask_url(value: str) -> str:
    """Replace the password of a ``scheme://user:password@host`` URL, and ``password`` / ``username`` query
    parameters, with ``***``; the other parameters stay as written.

    >>> mask_url("redis://h:6379/0?password=secret&ssl_ca_certs=/ca.pem")
    'redis://h:6379/0?password=***&ssl_ca_certs=/ca.pem'
    """
    try:
        parts = urlsplit(value)
        if not parts.scheme:
            return value
        netloc = parts.netloc
        if parts.password is not None:
            netloc = f"{parts.username or ''}:{MASK}@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    except ValueError:
        return value
    query = "&".join(f"{p.split('=', 1)[0]}={MASK}" if unquote_plus(p.split("=", 1)[0]).lower() in SECRET_QUERY else p
                     for p in parts.query.split("&")) if parts.query else parts.query
    if netloc == parts.netloc and query == parts.query:
        return value
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def connect(url: str, password: str | None = None, *, timeout_s: float | None = 0.5, connect_timeout_s: float = 3.0,
            health_check_interval: int = 0):
    """The one Redis client constructor (``decode_responses``; ``timeout_s=None`` = blocking reads).

    A URL redis-py cannot read (settings validate ``redis.url``; this catches what slips past, e.g. a bad query
    option) is a ``ConfigError``: one line naming ``redis.url``, not redis-py's traceback.
    """
    import redis

    from offline_train.config import ConfigError

    try:
        return redis.Redis.from_url(url, password=password, decode_responses=True, socket_timeout=timeout_s,
                                    socket_connect_timeout=connect_timeout_s, health_check_interval=health_check_interval)
    except ValueError as e:
        raise ConfigError(f"redis.url cannot be used: {e}") from None  # no URL: it may hold a password


def undecoded(client):
    """A client of ``client``'s server, with its settings, whose replies are not decoded: pub/sub, where ``read_raw``
    cannot help (the subscribed connection decodes each message as it reads it, and one that is not UTF-8 raises at
    every read after it). Decode each value with ``text_of``.
    """
    import redis

    pool = client.connection_pool
    return redis.Redis(connection_pool=pool.__class__(connection_class=pool.connection_class,
                                                      **{**pool.connection_kwargs, "decode_responses": False}))


class RedisUnavailable(ConnectionError):
    """Redis at ``redis.url`` did not answer within ``redis.connect_timeout_s``."""


class RedisRefused(RuntimeError):
    """Redis answered with an error reply: a DB index it does not have, an ACL user without access to the key prefix
    (NOPERM), LOADING, MISCONF (writes refused)."""


@contextmanager
def redis_replies(redis_cfg):
    """Within: an error reply of Redis is a ``RedisRefused`` naming ``redis.url`` (masked) and ``redis.key_prefix``
    (one line, exit 2 in ``kdsm``), not redis-py's traceback. A connection lost mid-command is left to the caller."""
    import redis

    try:
        yield
    except redis.BusyLoadingError as e:  # LOADING is a ConnectionError to redis-py, but a reply: the server is there
        raise _refused(redis_cfg, e) from None
    except (redis.ConnectionError, redis.TimeoutError):
        raise
    except redis.RedisError as e:
        raise _refused(redis_cfg, e) from None


def _refused(redis_cfg, e: Exception) -> RedisRefused:
    return RedisRefused(f"Redis at {mask_url(redis_cfg.url)} refused the command: {type(e).__name__}: {e} (redis.url: "
                        f"its DB index, user and password; redis.key_prefix {redis_cfg.key_prefix!r}: the user's ACL "
                        "must allow its keys)")


def require(client, redis_cfg):
    """``client`` after one PING; an unreachable Redis raises ``RedisUnavailable`` naming the (masked) address, an
    error reply (``SELECT`` of a DB index the server lacks, a PING the ACL refuses) ``RedisRefused``."""
    import redis

    with redis_replies(redis_cfg):
        try:
            client.ping()
        except redis.BusyLoadingError:
            raise
        except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
            raise RedisUnavailable(f"Redis at {mask_url(redis_cfg.url)} is unreachable within "
                                   f"{redis_cfg.connect_timeout_s:g} s (redis.url, redis.connect_timeout_s): {e}") from None
    return client


def redis_client(redis_cfg, *, blocking: bool = False, hot_path: bool = False):
    """A client from the ``redis`` section: control-plane timeouts, or the hot path's short one, or blocking."""
    pw = redis_cfg.password.get_secret_value() if redis_cfg.password else None
    timeout = None if blocking else (redis_cfg.socket_timeout_s if hot_path else redis_cfg.command_timeout_s)
    return connect(redis_cfg.url, pw, timeout_s=timeout, connect_timeout_s=redis_cfg.connect_timeout_s,
                   health_check_interval=0 if hot_path else 30)


class NotUtf8(str):
    """The text of a Redis value that is not UTF-8 (written by hand), each bad byte as U+FFFD: never a record kdsm wrote.

    Callers treat it as unreadable even where the replaced text happens to be JSON.
    """


def read_raw(client, *command):
    """``command``'s reply, not decoded: for values written by hand, which may not be UTF-8.

    The client decodes replies as UTF-8 (``connect``), so reading such a value raises ``UnicodeDecodeError``: a
    ``ValueError``, not a ``RedisError``, which stopped a streamer at start-up (and dropped the connection). Decode
    each value with ``text_of``. Works on a WATCHing pipeline too.
    """
    return client.execute_command(*command, NEVER_DECODE=True)


def text_of(value):
    """A value of ``read_raw``'s reply as text (None stays None); one that is not UTF-8 is a ``NotUtf8``.

    >>> text_of(b"ok"), text_of(None), type(text_of(b"\\xff\\xfe")).__name__, text_of(b"\\xff\\xfe") == "\\ufffd" * 2
    ('ok', None, 'NotUtf8', True)
    """
    if value is None or isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return NotUtf8(value.decode("utf-8", errors="replace"))


def json_of(value):
    """The JSON a value of ``read_raw``'s reply (or its ``text_of``) holds; ``ValueError`` when it is not UTF-8 (even
    where the replaced text happens to be JSON), not JSON, or nested too deep for the parser (a value written by hand:
    its ``RecursionError`` would otherwise escape every reader of the key).

    >>> json_of(b'{"a": 1}'), json_of('[2]')
    ({'a': 1}, [2])
    >>> json_of(b'{"a": "\\xff"}')
    Traceback (most recent call last):
    ValueError: not UTF-8
    >>> json_of("[" * 100_000 + "]" * 100_000)
    Traceback (most recent call last):
    ValueError: JSON nested too deep
    """
    text = text_of(value)
    if isinstance(text, NotUtf8):
        raise ValueError("not UTF-8")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def never_expires(client, key: str) -> bool:
    """``key`` exists without an expiry: written by hand, not by kdsm (its locks and cooldowns are ``SET NX PX``).

    False when it is missing, expires, or Redis does not answer (a blip: taken as kdsm's own key).
    """
    try:
        return client.pttl(key) == -1
    except Exception:  # noqa: BLE001 - Redis down or slow: the common case is kdsm's own key
        return False


def wrong_types(client, expected: dict[str, str]) -> str | None:
    """One line naming each key of ``expected`` (key -> Redis type) that holds another type, or None.

    A missing key is fine (the product creates it). Keys of the wrong type are state written by hand
    (``redis-cli SET`` where a hash belongs) or by another program sharing ``redis.key_prefix``.
    """
    bad = {}
    for key, want in expected.items():
        have = client.type(key)
        have = have.decode() if isinstance(have, bytes) else have
        if have not in ("none", want):
            bad[key] = f"Redis key {key} holds a {have}, not the {want} kdsm keeps there"
    if not bad:
        return None
    return ("; ".join(bad.values()) + " (written by hand, or another program uses redis.key_prefix): look at it "
            f"(redis-cli TYPE, DUMP), then delete it (redis-cli DEL {' '.join(bad)})")


@contextmanager
def expect_types(client, error: type[Exception], expected: dict[str, str]):
    """Within: Redis's WRONGTYPE reply raises ``error`` with ``wrong_types``' line, naming the key, not a traceback.

    Only on that reply (no extra round trip on the way that works); other errors pass through unchanged.
    """
    import redis

    try:
        yield
    except redis.ResponseError as e:
        if "WRONGTYPE" not in str(e):
            raise
        try:
            line = wrong_types(client, expected)
        except (redis.RedisError, OSError):
            line = None
        raise error(line or f"a Redis key among {', '.join(expected)} holds the wrong type: {e}") from None


BAD_NOTIFICATION_EVERY_S = 60.0  # at most one bad_notification line per watcher (one channel) in this time


class ChannelWatcher:
    """Pub/sub plus a periodic re-read, in a daemon thread: the one watcher of the live thresholds and the registry.

    ``on_message(data)`` runs for each notification on ``channel`` (its text);
    ``on_tick()`` runs every ``period_s`` without one, and right after each
    (re)subscription (a notification may have been missed meanwhile). Pub/sub
    may drop messages, so the tick bounds how stale a value can get. Any
    exception (Redis down, a bug in a callback) goes to ``on_error(exc)``,
    drops the subscription and retries after ``retry_s``: the watcher never
    dies while the process serves. A notification that is not UTF-8 (published
    by hand: kdsm publishes version names) is read undecoded and ignored, with
    a ``bad_notification`` warning naming the channel: the subscription stays.
    The warnings are rate-limited: the first at once, then at most one every
    ``bad_every_s``, whose ``count`` is the notifications ignored since the last
    line (it comes when the period ends, and when the watcher stops), so a
    publisher flooding the channel cannot flood the log; the counts add up to
    all those ignored, ``data`` quotes the latest.
    """

    def __init__(self, client, channel: str, *, period_s: float, on_message, on_tick, on_error,
                 wait_s: float = 1.0, retry_s: float = 1.0, name: str = "kdsm-watch",
                 bad_every_s: float = BAD_NOTIFICATION_EVERY_S):
        self.client, self.channel, self.period_s = client, channel, period_s
        self.bad_every_s = bad_every_s
        self._bad_count, self._bad_data, self._bad_next = 0, "", 0.0  # ignored since the last line; next line's time
        self._raw = undecoded(client)  # the subscription's connection: notifications are read undecoded
        self.on_message, self.on_tick, self.on_error = on_message, on_tick, on_error
        self.wait_s, self.retry_s = min(wait_s, period_s), retry_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> ChannelWatcher:
        self._thread.start()
        return self

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout)

    @staticmethod
    def _close(pubsub) -> None:
        try:
            pubsub.close()
        except Exception:  # noqa: BLE001 - closing a dead connection may fail any way
            pass

    def _run(self) -> None:
        pubsub = None
        next_tick = 0.0
        while not self._stop.is_set():
            try:
                if pubsub is None:
                    pubsub = self._raw.pubsub(ignore_subscribe_messages=True)
                    pubsub.subscribe(self.channel)
                    next_tick = 0.0
                msg = pubsub.get_message(timeout=self.wait_s)
                data = text_of(msg["data"]) if msg is not None else None
                if isinstance(data, NotUtf8):
                    self._bad_count, self._bad_data = self._bad_count + 1, data[:80]
                elif msg is not None:
                    self.on_message(data)
                    next_tick = time.monotonic() + self.period_s
                if time.monotonic() >= next_tick:  # after any message too: a flood must not starve the re-read
                    self.on_tick()
                    next_tick = time.monotonic() + self.period_s
                if self._bad_count:
                    self._log_bad()  # the first at once, the rest when the period ends
            except Exception as e:  # noqa: BLE001 - keep serving the last values, retry later
                self.on_error(e)
                if pubsub is not None:
                    self._close(pubsub)
                pubsub = None
                self._stop.wait(self.retry_s)
        if self._bad_count:
            self._log_bad(force=True)
        if pubsub is not None:
            self._close(pubsub)
        self._raw.connection_pool.disconnect()

    def _log_bad(self, force: bool = False) -> None:
        """One ``bad_notification`` line for the ``count`` ignored since the last, unless one was written less than
        ``bad_every_s`` ago (``force``: the watcher stops)."""
        now = time.monotonic()
        if now < self._bad_next and not force:
            return
        log.warning({"event": "bad_notification", "channel": self.channel, "count": self._bad_count,
                     "data": self._bad_data, "why": "not UTF-8 (published by hand?)", "action": "ignored",
                     "every_s": self.bad_every_s})
        self._bad_count, self._bad_next = 0, now + self.bad_every_s
