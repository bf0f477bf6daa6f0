"""The small record that replaces an alert or dead letter the producer or broker would not take.

It keeps the message's short top-level fields (ids, reason, source, score,
severity, sizes, digest ...), names the fields left out, and says why the
original was refused, so its offset is still accounted for and a reader can
find the event again. A key longer than ``SHORT`` bytes is replaced by its
SHA-256. Of the original's headers (a dead letter's: the event's own) it keeps
the short ones (``fallback_headers``), counting those left out.

>>> import json
>>> m = json.loads(fallback_record(b'{"alert_id": "a1", "score": 9.5, "top_features": [' + b'1,' * 200 + b'1]}', "too large"))
>>> m["alert_id"], m["score"], m["publish_fallback"]
('a1', 9.5, {'error': 'too large', 'original_bytes': 453, 'left_out': ['top_features']})
>>> len(fallback_key(b"k" * 5000))
64
>>> fallback_headers([("trace", b"t1"), ("blob", b"x" * 5000)])
[('trace', b't1'), ('kdsm.headers_left_out', b'1')]
"""

from __future__ import annotations

import hashlib
import json

from .headers import bounded_headers

SHORT = 256  # bytes of JSON a field may take to be kept
_HEADER_BYTES = 16 * SHORT  # the kept headers' total: a trace id, a schema id and their like, not a bulk of them


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


def fallback_headers(headers) -> list[tuple[str, bytes]]:
    """The headers a fallback record keeps: each within ``SHORT`` bytes (name and value), ``_HEADER_BYTES`` in all;
    the message may have been refused for them."""
    return bounded_headers(headers, _HEADER_BYTES, each=SHORT)[0]
