"""Dead-letter messages: the original bytes, where they came from, and why they were not scored.

The payload is kept as text when it is valid UTF-8, else base64, so nothing
is lost. The Kafka key is the original key.

>>> import json
>>> m = json.loads(dead_letter(b"\\xff", "t", 0, 7, "invalid_utf8", "bad byte", None, "v1"))
>>> m["reason"], m["payload_encoding"], m["payload"], m["source"]
('invalid_utf8', 'base64', '/w==', {'topic': 't', 'partition': 0, 'offset': 7, 'timestamp_ms': None})
"""

from __future__ import annotations

import base64
import json
import time


def dead_letter(value: bytes | None, topic: str, partition: int, offset: int, reason: str, message: str,
                timestamp_ms: int | None, model_version: str | None) -> bytes:
    payload, enc = None, "none"
    if value is not None:
        try:
            payload, enc = value.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            payload, enc = base64.b64encode(value).decode("ascii"), "base64"
    msg = {"reason": reason, "message": message,
           "source": {"topic": topic, "partition": int(partition), "offset": int(offset),
                      "timestamp_ms": None if timestamp_ms is None or timestamp_ms < 0 else int(timestamp_ms)},
           "model_version": model_version, "dead_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "payload_encoding": enc, "payload": payload}
    return json.dumps(msg, separators=(",", ":")).encode()
