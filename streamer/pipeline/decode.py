"""Event bytes -> a float feature matrix, or a dead-letter reason code per bad event.

An event is a flat JSON object (UTF-8): an id, an optional timestamp, an
optional schema hash and one numeric value per model feature, by name
(DESIGN 5). Extra keys are ignored. (A model with a feature spec, whose
events carry categories, booleans, optional or nested fields, is read by
``decode_spec.SpecDecoder`` instead.)

Two paths, one behaviour:

- **fast** (``decode``): msgspec decodes each value straight into a typed
  event (an int or str id, a number per feature, an optional number, str or
  null timestamp; extra keys skipped), so every type check runs in C while
  parsing; then batch-wide steps: the matrix in one numpy step, ids and
  timestamps by one ``attrgetter`` map each. It accepts an event only when it
  is a clean, scorable row; anything else is *suspect*.
- **reference** (``decode_reference``): the ``json.loads`` path, unchanged
  (UTF-8 decode, ``json.loads``, per-row diagnosis). Suspect events (anything
  msgspec refuses: NaN/Infinity literals, lone surrogates, bad JSON, a field
  of the wrong type or a missing one; tombstones, oversized values, invalid
  UTF-8; a feature of magnitude >= 2**63; a bad schema) are decoded by it,
  event by event, and merged back by position: every dead letter carries
  exactly the reason code and message it had before, and a row decodes to the
  same values.

Where msgspec and ``json.loads`` could read the same text differently, the
fast path defers to the reference: msgspec checks the UTF-8 of what it reads
but not of extra keys it skips, so the batch's bytes are checked once (and
event by event only when that fails); it may read an integer literal of a
float field beyond 2**63 as a float, so such a feature is suspect; it nests
deeper than ``json.loads`` before stopping, so a value of ``_SHALLOW_BYTES``
or more goes to it only when it holds fewer than ``_SHALLOW_BYTES // 2``
brackets. Duplicate keys: both keep the last. Floats: both round correctly
(tests/test_decode.py compares them). A configuration that gives two fields
one name (the id field also a feature, say) has no typed event: its events
all take the reference path.

>>> d = Decoder(["a", "b"])
>>> out = d.decode([b'{"id": 1, "a": 1.5, "b": 2}', b'{"id": 2, "a": "x", "b": 2}', b'\\xff'])
>>> out.X.tolist(), out.rows.tolist(), out.ids
([[1.5, 2.0]], [0], [1])
>>> [(r.index, r.reason) for r in out.rejects]
[(1, 'non_numeric_feature'), (2, 'invalid_utf8')]
"""

from __future__ import annotations

import json
import math
import reprlib
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, islice
from operator import attrgetter, itemgetter

import msgspec
import numpy as np

# Every reason code a dead letter can carry, with what it means (docs/streaming.md lists them too).
REASONS = {
    "empty": "the message has no value (null or zero bytes)",
    "oversized": "the value is larger than kafka.max_event_bytes",
    "invalid_utf8": "the value is not UTF-8 text",
    "invalid_json": "the value is not parseable JSON (or nests too deeply, or escapes a lone UTF-16 surrogate)",
    "not_an_object": "the JSON value is not an object",
    "missing_id": "the id field is absent or null",
    "invalid_id": "the id is not a string or an integer",
    "invalid_timestamp": "the timestamp field is not a number or a string, or is NaN or infinite",
    "schema_mismatch": "the event names a feature schema hash other than the model's",
    "missing_feature": "a model feature is absent",
    "non_numeric_feature": "a feature value is not a JSON number (strings, booleans, null, arrays, objects)",
    "non_finite_feature": "a feature value is NaN, infinite or out of float64 range",
    "type_mismatch": "a categorical or boolean feature, or a nested feature's parent, has a value of another JSON type (feature spec)",
    "scoring_error": "the scorer failed on the event (should not happen; see the message)",
    "corrupt_record": "kafka-python could not read the Kafka record (a header name that is not UTF-8, say): no payload",
}

_NUMBER = (int, float)
INT_EXACT = float(2**63)  # msgspec and orjson may read an integer literal beyond this as a float; json.loads keeps ints
_SHALLOW_BYTES = 1000  # a shorter value nests < 500 deep: msgspec and json.loads both parse it
_ID, _TS, _SCHEMA = attrgetter("id"), attrgetter("ts"), attrgetter("schema")  # fields of the typed event
_isfinite = math.isfinite
_REPR = reprlib.Repr()  # quotes nested values to a bounded depth (6 levels), never recursing further


def _is_utf8(b: bytes) -> bool:
    if b.isascii():
        return True
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _is_unicode(obj) -> bool:
    """Whether every string of a parsed JSON object (keys too) is Unicode text, encodable as UTF-8.

    An object nested nearly as deep as ``json.loads`` goes is too deep for ``json.dumps``, called a few frames
    deeper than the parse (its RecursionError stopped the streamer): it is walked by an explicit stack instead.

    >>> _is_unicode(json.loads('{"id": "\\\\u00e9"}')), _is_unicode(json.loads('{"id": "\\\\ud800"}'))
    (True, False)
    """
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    except RecursionError:
        return _is_unicode_deep(obj)
    return True


def _is_unicode_deep(obj) -> bool:
    """``_is_unicode`` by an explicit stack, at any depth.

    >>> deep = ["\\udc00"]
    >>> for _ in range(5000):
    ...     deep = [deep]
    >>> _is_unicode_deep(deep), _is_unicode_deep([[{"k": "é"}]]), _is_unicode_deep({"\\ud800": 1})
    (False, True, False)
    """
    stack = [obj]
    while stack:
        o = stack.pop()
        t = type(o)
        if t is dict:
            stack.extend(o)  # the keys
            stack.extend(o.values())
        elif t is list:
            stack.extend(o)
        elif t is str:
            try:
                o.encode("utf-8")
            except UnicodeEncodeError:
                return False
    return True


def _quote(value) -> str:
    """At most 80 characters of an event's value, for a message. An array or object is quoted a few levels deep
    only: ``str`` walks all of it, and raised RecursionError on one nested 1000 deep (orjson, the feature-spec
    decoder's parser, reads 1024 levels), which stopped the streamer.

    >>> deep = []
    >>> for _ in range(5000):
    ...     deep = [deep]
    >>> _quote("abc"), _quote(5), _quote(["abc123"]), _quote(deep)
    ('abc', '5', "['abc123']", '[[[[[[[...]]]]]]]')
    """
    return (_REPR.repr(value) if type(value) in (list, dict) else str(value))[:80]


def event_decoder(features: list[str], id_field: str, ts_field: str, schema_field: str,
                  schema_hash: str | None) -> msgspec.json.Decoder | None:
    """A msgspec decoder of one event into typed fields (``id``, ``f0``.., ``ts``, ``schema``), or None where two
    fields share a JSON name or a name is one msgspec cannot rename a field to (a ``"``, a ``\\`` or a control
    character, as a Parquet column's name may hold): every event then takes the reference path.

    >>> dec = event_decoder(["a", "b"], "id", "ts", "schema", None)
    >>> e = dec.decode(b'{"id": "e1", "a": 1, "b": 2.5, "extra": [1]}')
    >>> e.id, e.f0, e.f1, e.ts
    ('e1', 1.0, 2.5, None)
    >>> event_decoder(["id"], "id", "ts", "schema", None) is None
    True
    >>> event_decoder(['temp "C"', "path\\\\x", "tab\\there"], "id", "ts", "schema", None) is None
    True
    """
    names = [id_field, ts_field, *features, *([schema_field] if schema_hash is not None else [])]
    if len(set(names)) < len(names):
        return None
    fields = [("id", int | str, msgspec.field(name=id_field))]
    fields += [(f"f{j}", float, msgspec.field(name=n)) for j, n in enumerate(features)]
    fields.append(("ts", int | float | str | None, msgspec.field(default=None, name=ts_field)))
    if schema_hash is not None:  # any JSON value: a mismatch is the reference's to name
        fields.append(("schema", object, msgspec.field(default=msgspec.UNSET, name=schema_field)))
    # gc=False: an event holds only decoded JSON values, never a cycle, so the collector need not track one
    # (200,000 tracked events a second would set off a young-generation collection every 700).
    try:
        return msgspec.json.Decoder(msgspec.defstruct("Event", fields, gc=False))
    except ValueError:  # "Renamed field names must not contain '\\', '"', or control characters"
        return None


@dataclass
class Reject:
    index: int  # position in the polled batch
    reason: str  # a key of REASONS
    message: str


@dataclass
class Decoded:
    """The valid rows of a batch (``rows`` = their positions in it) and the rejects."""

    X: np.ndarray  # (n_valid, d) float64
    rows: np.ndarray  # (n_valid,) int64 positions in the batch
    ids: list  # event ids of the valid rows
    ts: list  # event timestamps of the valid rows (None where absent)
    rejects: list[Reject] = field(default_factory=list)
    records: list | None = None  # the valid rows' JSON objects (feature-spec models: explanations quote them)


def mark_unreadable(dec: Decoded, unreadable: dict) -> None:
    """Reject each row of ``unreadable`` ({row: error}, records kafka-python could not read, their value None) as
    ``corrupt_record`` with its error, in place of the reason the decoder gave its missing value.

    >>> dec = Decoder(["a"]).decode([b'{"id": 1, "a": 1}', None, None])
    >>> mark_unreadable(dec, {2: "kafka-python could not read it"})
    >>> [(r.index, r.reason, r.message) for r in dec.rejects]
    [(1, 'empty', 'the message value is empty'), (2, 'corrupt_record', 'kafka-python could not read it')]
    """
    for r in dec.rejects:  # every decoder rejects a missing value ("empty"), so each such row has its reject
        if r.index in unreadable:
            r.reason, r.message = "corrupt_record", unreadable[r.index]


class Decoder:
    """Decodes batches of raw event values for one model's feature list."""

    def __init__(self, features: list[str], id_field: str = "id", ts_field: str = "ts",
                 schema_field: str = "schema", schema_hash: str | None = None, max_bytes: int = 65536):
        self.features = list(features)
        self.id_field, self.ts_field, self.schema_field = id_field, ts_field, schema_field
        self.schema_hash = schema_hash
        self.max_bytes = max_bytes
        # One C-level call pulls every feature of an object (KeyError if one is absent): the reference path.
        self._get_features = itemgetter(*self.features) if len(self.features) > 1 else (lambda o: (o[self.features[0]],))
        self._fast_max_bytes = min(max_bytes, _SHALLOW_BYTES - 1)

    # The fast path's typed events, built on first use (SpecDecoder, which reads dicts, never builds them).
    @cached_property
    def _struct(self) -> msgspec.json.Decoder | None:
        return event_decoder(self.features, self.id_field, self.ts_field, self.schema_field, self.schema_hash)

    @cached_property
    def _get_event_features(self):
        """One C-level call for a typed event's features, in model order."""
        return attrgetter(*(f"f{j}" for j in range(len(self.features)))) if len(self.features) > 1 else (lambda e: (e.f0,))

    def decode(self, values: list) -> Decoded:
        """The fast path; suspect events go through ``decode_reference`` and are merged back by position."""
        if self._struct is None:  # a field name used twice or one msgspec refuses: every event on the reference path
            return self.decode_reference(values)
        evs = self._load_all(values)
        if None in evs:
            idx = [i for i, e in enumerate(evs) if e is not None]
            evs = [evs[i] for i in idx]
        else:
            idx = None
        X, ids, ts, ok = self._fast_rows(evs)
        if idx is None and ok is None:
            return Decoded(X, np.arange(len(values), dtype=np.int64), ids, ts)
        clean = np.zeros(len(values), dtype=bool)
        clean[idx if idx is not None else slice(None)] = True if ok is None else ok
        return self._merge(values, X, ids, ts, clean)

    # ------------------------------------------------------------------ fast path
    def _load_all(self, values: list) -> list:
        """msgspec over the batch: a typed event per value, None for each suspect one."""
        decode = self._struct.decode
        try:
            lens = list(map(len, values))  # TypeError on a tombstone (None)
            shallow = not lens or (min(lens) > 0 and max(lens) <= self._fast_max_bytes)
            # msgspec checks the UTF-8 of the keys and values it reads, not of those it skips (extra keys). One
            # check of the whole batch covers every event msgspec accepts: each starts and ends with ASCII.
            utf8 = shallow and _is_utf8(b"".join(values))
        except TypeError:
            shallow = utf8 = False
        if utf8:  # every value non-empty, within max_bytes, too short to nest deeper than json.loads can
            out: list = []
            while True:  # list.extend keeps what it appended before the failing event: resume after it
                try:
                    out.extend(map(decode, islice(values, len(out), None)))
                    return out
                except (msgspec.DecodeError, RecursionError):  # bad JSON or a field of the wrong type
                    out.append(None)
        out = []
        for v in values:
            e = None
            if v and len(v) <= self.max_bytes and _is_utf8(v) and (
                    len(v) < _SHALLOW_BYTES or v.count(b"[") + v.count(b"{") < _SHALLOW_BYTES // 2):
                try:
                    e = decode(v)
                except (msgspec.DecodeError, RecursionError):
                    pass
            out.append(e)
        return out

    def _fast_rows(self, evs: list):
        """(X, ids, ts) of the clean events, and None when all are clean, else their bool mask.

        msgspec has checked every type already (a number for each feature, an int or str id, a number, str or
        null timestamp); what is left: magnitudes msgspec may read as floats where json.loads keeps exact ints,
        and the schema hash.
        """
        m, d = len(evs), len(self.features)
        X = np.array(list(chain.from_iterable(map(self._get_event_features, evs))), dtype=np.float64).reshape(m, d)
        ok = (np.abs(X) < INT_EXACT).all(axis=1)  # >= 2**63 (or inf) may be a big int literal: the reference decides
        ids, ts = list(map(_ID, evs)), list(map(_TS, evs))
        if self.schema_hash is not None:
            sch = list(map(_SCHEMA, evs))
            if sch.count(msgspec.UNSET) + sch.count(self.schema_hash) != m:
                ok &= np.fromiter((s is msgspec.UNSET or s == self.schema_hash for s in sch), bool, m)
        if ok.all():
            return X, ids, ts, None
        keep = np.flatnonzero(ok).tolist()
        return X[ok], [ids[k] for k in keep], [ts[k] for k in keep], ok

    def _merge(self, values: list, X: np.ndarray, ids: list, ts: list, clean: np.ndarray) -> Decoded:
        """The clean rows plus the reference decode of the suspect events, in batch order."""
        pos = np.flatnonzero(clean)
        sus = np.flatnonzero(~clean)
        ref = self.decode_reference([values[i] for i in sus.tolist()])
        rejects = [Reject(int(sus[r.index]), r.reason, r.message) for r in ref.rejects]
        if not len(ref.rows):
            return Decoded(X, pos.astype(np.int64), ids, ts, rejects)
        rows = np.concatenate([pos, sus[ref.rows]]).astype(np.int64)
        order = np.argsort(rows, kind="stable")
        all_ids, all_ts = ids + ref.ids, ts + ref.ts
        o = order.tolist()
        return Decoded(np.concatenate([X, ref.X])[order], rows[order], [all_ids[j] for j in o],
                       [all_ts[j] for j in o], rejects)

    # ------------------------------------------------------------------ reference path
    def decode_reference(self, values: list) -> Decoded:
        """The ``json.loads`` path: the decoder as it was before the fast path, for suspect events."""
        objs, pos, rejects = [], [], []
        for i, v in enumerate(values):
            obj = self._parse(i, v, rejects)
            if obj is not None:
                objs.append(obj)
                pos.append(i)
        # Fast path: every object has every feature and all values are JSON numbers.
        rows, keep = [], []
        get = self._get_features
        for k, o in enumerate(objs):
            try:
                rows.append(get(o))
                keep.append(k)
            except KeyError:
                self._diagnose(pos[k], o, rejects)
        types = set(map(type, (v for r in rows for v in r)))
        if not types <= {int, float}:
            ok_rows, ok_keep = [], []
            for r, k in zip(rows, keep, strict=True):
                if all(type(v) in _NUMBER for v in r):
                    ok_rows.append(r)
                    ok_keep.append(k)
                else:
                    self._diagnose(pos[k], objs[k], rejects)
            rows, keep = ok_rows, ok_keep
        X, keep = self._to_matrix(rows, keep, objs, pos, rejects)
        good = [objs[k] for k in keep]
        # ids/ts checks only run over valid rows and are cheap dict lookups.
        final_X, final_keep, ids, ts = [], [], [], []
        mask = np.ones(len(keep), dtype=bool)
        for j, (k, o) in enumerate(zip(keep, good, strict=True)):
            err = self._check_meta(o)
            if err:
                rejects.append(Reject(pos[k], *err))
                mask[j] = False
            else:
                ids.append(o[self.id_field])
                ts.append(o.get(self.ts_field))
        final_X = X[mask]
        final_keep = np.asarray([pos[k] for k in keep], dtype=np.int64)[mask]
        rejects.sort(key=lambda r: r.index)
        return Decoded(final_X, final_keep, ids, ts, rejects)

    # ------------------------------------------------------------------ reference steps
    def _parse(self, i: int, v, rejects: list[Reject]):
        if not v:
            rejects.append(Reject(i, "empty", "the message value is empty"))
            return None
        if len(v) > self.max_bytes:
            rejects.append(Reject(i, "oversized", f"{len(v)} bytes > max_event_bytes {self.max_bytes}"))
            return None
        try:
            text = v.decode("utf-8")
        except UnicodeDecodeError as e:
            rejects.append(Reject(i, "invalid_utf8", str(e)))
            return None
        try:
            obj = json.loads(text)
        except ValueError as e:
            rejects.append(Reject(i, "invalid_json", str(e)))
            return None
        except RecursionError:
            rejects.append(Reject(i, "invalid_json", "JSON nests too deeply"))
            return None
        if type(obj) is not dict:
            rejects.append(Reject(i, "not_an_object", f"JSON {type(obj).__name__}, expected an object"))
            return None
        if "\\u" in text and not _is_unicode(obj):
            # json.loads accepts an escaped lone surrogate ("\\ud800"); an alert, the archive or a dead letter
            # quoting that string could not be encoded as UTF-8 and would fail its whole batch.
            rejects.append(Reject(i, "invalid_json", "a string escapes a lone surrogate (\\ud800-\\udfff), not Unicode text"))
            return None
        return obj

    def _check_meta(self, o: dict) -> tuple[str, str] | None:
        eid = o.get(self.id_field)
        if eid is None:
            return "missing_id", f"field {self.id_field!r} is absent or null"
        if type(eid) not in (str, int):
            return "invalid_id", f"field {self.id_field!r} is a {type(eid).__name__}, expected a string or integer"
        ts = o.get(self.ts_field)
        if ts is not None and type(ts) not in (str, int):  # the common times cost one test
            if type(ts) is not float:
                return "invalid_timestamp", f"field {self.ts_field!r} is a {type(ts).__name__}"
            if not _isfinite(ts):  # NaN, Infinity, 1e999: no JSON number can pass it on
                return "invalid_timestamp", f"field {self.ts_field!r} is {ts}, not a finite number"
        if self.schema_hash is not None and self.schema_field in o and o[self.schema_field] != self.schema_hash:
            return "schema_mismatch", f"event schema {_quote(o[self.schema_field])!r} != model schema {self.schema_hash!r}"
        return None

    def _diagnose(self, i: int, o: dict, rejects: list[Reject]) -> None:
        """The first reason an object's features cannot be scored."""
        for name in self.features:
            if name not in o:
                rejects.append(Reject(i, "missing_feature", f"feature {name!r} is absent"))
                return
        for name in self.features:
            v = o[name]
            if type(v) not in _NUMBER:
                what = "null" if v is None else type(v).__name__
                rejects.append(Reject(i, "non_numeric_feature", f"feature {name!r} is {what}, expected a number"))
                return
        for name in self.features:
            v = o[name]
            try:
                ok = math.isfinite(float(v))
            except OverflowError:
                ok = False
            if not ok:
                rejects.append(Reject(i, "non_finite_feature", f"feature {name!r} = {str(v)[:40]} is not a finite float64"))
                return
        rejects.append(Reject(i, "non_numeric_feature", "features could not be converted"))  # pragma: no cover

    def _to_matrix(self, rows, keep, objs, pos, rejects):
        d = len(self.features)
        if not rows:
            return np.zeros((0, d)), []
        try:
            X = np.array(rows, dtype=np.float64).reshape(len(rows), d)
        except OverflowError:
            # An integer beyond float64 range: convert row by row to find it.
            ok_rows, ok_keep = [], []
            for r, k in zip(rows, keep, strict=True):
                try:
                    ok_rows.append([float(v) for v in r])
                    ok_keep.append(k)
                except OverflowError:
                    self._diagnose(pos[k], objs[k], rejects)
            rows, keep = ok_rows, ok_keep
            X = np.array(rows, dtype=np.float64).reshape(len(rows), d)
        finite = np.isfinite(X).all(axis=1)
        if not finite.all():
            for j in np.flatnonzero(~finite):
                self._diagnose(pos[keep[j]], objs[keep[j]], rejects)
            X = X[finite]
            keep = [k for k, f in zip(keep, finite, strict=True) if f]
        return X, keep
