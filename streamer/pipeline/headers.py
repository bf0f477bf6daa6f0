"""The original record's headers on what the streamer publishes for it: its dead letter, its alert, a fallback record.

A reader who traces events by header (a trace id, a schema id) finds them as they came: in order, duplicates
included, each whole (a cut trace id is a wrong one). Bounded like the rest of the message, so none can make it
too large to publish: those past the budget are left out and ``kdsm.headers_left_out`` (the count, ASCII digits)
is appended after the kept ones. Ours come last and only under ``kdsm.`` names; a header of that name among the
originals (a re-driven dead letter's) is kept as it came, so a reader takes the last one of a name (Java's
``Headers.lastHeader``). A null value becomes empty bytes: kafka-python's producer takes bytes only (TypeError).

>>> bounded_headers([("trace", b"t1"), ("blob", b"x" * 100), ("schema", None)], budget=40)
([('trace', b't1'), ('schema', b''), ('kdsm.headers_left_out', b'1')], 65)
"""

from __future__ import annotations

LEFT_OUT = "kdsm.headers_left_out"  # our header after the kept ones: how many were left out
# What a header costs on the wire besides its name and value: the two lengths (varints, at most 5 bytes each). Counted,
# so thousands of empty headers cannot pass a byte budget that counts only names and values, then make the message
# too large to publish (its dead letter, then its fallback, refused: the streamer stops at every restart).
HEADER_OVERHEAD = 10


def bounded_headers(headers, budget: int, each: int | None = None) -> tuple[list[tuple[str, bytes]], int]:
    """``headers`` ((name, value) pairs) as the producer takes them, within ``budget`` bytes of names, values and
    ``HEADER_OVERHEAD`` each (each header within ``each``), then our ``LEFT_OUT`` header if any was left out (a few
    bytes past the budget); returns them and the bytes they take, ours included."""
    if not headers:  # the common case: no header, no work
        return [], 0
    kept, used, left_out = [], 0, 0
    for name, value in headers:
        value = b"" if value is None else bytes(value)
        size = len(name.encode()) + len(value) + HEADER_OVERHEAD
        if used + size > budget or (each is not None and size > each):
            left_out += 1  # a later, smaller header may still fit: a trace id after a large blob is kept
            continue
        kept.append((name, value))
        used += size
    if left_out:
        kept.append((LEFT_OUT, str(left_out).encode()))
        used += len(LEFT_OUT) + len(kept[-1][1]) + HEADER_OVERHEAD
    return kept, used
