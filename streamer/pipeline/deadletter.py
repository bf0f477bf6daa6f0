"""Dead-letter messages: the original bytes, where they came from, and why they were not scored.

The payload is kept as text when it is valid UTF-8, else base64. A dead
letter never exceeds ``max_bytes`` (``kafka.deadletter_max_bytes``), so no
payload, however large, can be refused by the producer or the broker and
stop its partition: a longer payload is cut to its first bytes
(``oversize="truncate"``) or left out (``"digest"``), with
``payload_truncated: true``; ``payload_bytes`` and ``payload_sha256``
always describe the whole original. The Kafka key is the original key, its
headers the original headers (``dead_letter_headers``): they take up to half
of ``max_bytes``, and the value is built within what they leave.

>>> import json
>>> m = json.loads(dead_letter(b"\\xff", "t", 0, 7, "invalid_utf8", "bad byte", None, "v1"))
>>> m["reason"], m["payload_encoding"], m["payload"], m["source"], m["payload_bytes"], m["payload_truncated"]
('invalid_utf8', 'base64', '/w==', {'topic': 't', 'partition': 0, 'offset': 7, 'timestamp_ms': None}, 1, False)
>>> big = dead_letter(b"x" * 5000, "t", 0, 8, "oversized", "too big", None, "v1", max_bytes=1000)
>>> len(big) <= 1000, json.loads(big)["payload_truncated"], json.loads(big)["payload_bytes"]
(True, True, 5000)
>>> dead_letter_headers([("traceparent", b"00-ab-cd-01")], 1000)
([('traceparent', b'00-ab-cd-01')], 32)
>>> kept, size = dead_letter_headers([("", None)] * 600_000)  # each costs bytes on the wire, though empty
>>> len(kept), size <= 262144 // 2 + 64, kept[-1]
(13108, True, ('kdsm.headers_left_out', b'586893'))
"""

from __future__ import annotations

import base64
import hashlib
import json
import time

from .headers import bounded_headers

_MESSAGE_CHARS = 1000  # the reason's message is ours, but may quote an event's field


def dead_letter(value: bytes | None, topic: str, partition: int, offset: int, reason: str, message: str,
                timestamp_ms: int | None, model_version: str | None, max_bytes: int = 262144,
                oversize: str = "truncate") -> bytes:
    msg = {"reason": reason, "message": message[:_MESSAGE_CHARS],
           "source": {"topic": topic, "partition": int(partition), "offset": int(offset),
                      "timestamp_ms": None if timestamp_ms is None or timestamp_ms < 0 else int(timestamp_ms)},
           "model_version": model_version, "dead_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "payload_encoding": "none", "payload": None, "payload_bytes": 0, "payload_truncated": False,
           "payload_sha256": None}
    if value is None:
        return _dump(msg)
    msg["payload_bytes"], msg["payload_sha256"] = len(value), hashlib.sha256(value).hexdigest()
    text = _utf8(value)
    # Every byte kept takes at least one byte of the message (JSON text, \u escapes or base64), so no more than
    # max_bytes can fit: a prefix that long is the first try. (The whole value was: a 50 MB event of control bytes
    # was escaped whole, 300 MB of JSON, taking 620 MB and 2 s, before being cut.)
    keep = min(len(value), max_bytes) if len(value) <= max_bytes or oversize == "truncate" else 0
    while True:  # shrink the kept prefix until the whole message fits (escaping may grow text up to 6x)
        if keep or not value:  # an empty value is kept as "" (utf-8); null stays "none"
            prefix = value[:keep]
            msg["payload_encoding"], msg["payload"] = ("utf-8", prefix.decode("utf-8", "ignore")) if text \
                else ("base64", base64.b64encode(prefix).decode("ascii"))
        else:
            msg["payload_encoding"], msg["payload"] = "none", None
        msg["payload_truncated"] = keep < len(value)
        out = _dump(msg)
        if len(out) <= max_bytes or not keep:
            return out
        keep = int(keep * max_bytes / len(out) * 0.95) if oversize == "truncate" else 0


def dead_letter_headers(headers, max_bytes: int = 262144) -> tuple[list[tuple[str, bytes]], int]:
    """The original record's headers for its dead letter, and the bytes they take: the value gets ``max_bytes``
    less these. At most half of ``max_bytes``, so headers never crowd the payload's digest and sizes out, and
    value and headers together stay within ``max_bytes`` (docs/streaming.md, "Dead letter")."""
    return bounded_headers(headers, max_bytes // 2)


def _utf8(value: bytes) -> bool:
    """Whether the whole value is UTF-8 (a cut prefix then only loses a split last character)."""
    if value.isascii():  # no copy: a large ASCII value is not decoded only to be thrown away
        return True
    try:
        value.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _dump(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode()
