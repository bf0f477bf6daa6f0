"""The small record that replaces an alert or dead letter the producer or broker would not take.

It keeps the message's short top-level fields (ids, reason, source, score,
severity, sizes, digest ...), names the fields left out, and says why the
original was refused, so its offset is still accounted for and a reader can
find the event again. A key longer than ``SHORT`` bytes is replaced by its
SHA-256.

>>> import json
>>> m = json.loads(fallback_record(b'{"alert_id": "a1", "score": 9.5, "top_features": [' + b'1,' * 200 + b'1]}', "too large"))
>>> m["alert_id"], m["score"], m["publish_fallback"]
('a1', 9.5, {'error': 'too large', 'original_bytes': 453, 'left_out': ['top_features']})
>>> len(fallback_key(b"k" * 5000))
64
"""

from __future__ import annotations

import hashlib
import json

SHORT = 256  # bytes of JSON a field may take to be kept


def fallback_record(value: bytes, error: str) -> bytes:
    try:
        msg = json.loads(value)
    except ValueError:  # not ours to parse (never happens for what the streamer builds): the digest only
        msg = {"original_sha256": hashlib.sha256(value).hexdigest()}
    if not isinstance(msg, dict):
        msg = {"original_sha256": hashlib.sha256(value).hexdigest()}
    kept, left_out = {}, []
    for name, v in msg.items():
        if len(json.dumps(v)) <= SHORT and len(name) <= SHORT:
            kept[name] = v
        else:
            left_out.append(name[:SHORT])
    kept["publish_fallback"] = {"error": error[:500], "original_bytes": len(value), "left_out": left_out}
    return json.dumps(kept, separators=(",", ":")).encode()


def fallback_key(key: bytes | None) -> bytes | None:
    if key is None or len(key) <= SHORT:
        return key
    return hashlib.sha256(key).hexdigest().encode()
