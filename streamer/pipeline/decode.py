"""Event bytes -> a float feature matrix, or a dead-letter reason code per bad event.

An event is a flat JSON object (UTF-8): an id, an optional timestamp, an
optional schema hash and one numeric value per model feature, by name
(DESIGN 5). Extra keys are ignored. The only per-event Python work is the
UTF-8 decode, ``json.loads`` and one ``itemgetter`` call; the matrix is built
in one numpy step and checked for non-finite values vectorised. Only rows
that fail the fast path are diagnosed one by one, to name the reason.

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
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np

# Every reason code a dead letter can carry, with what it means (docs/streaming.md lists them too).
REASONS = {
    "empty": "the message has no value (null or zero bytes)",
    "oversized": "the value is larger than kafka.max_event_bytes",
    "invalid_utf8": "the value is not UTF-8 text",
    "invalid_json": "the value is not parseable JSON (or nests too deeply)",
    "not_an_object": "the JSON value is not an object",
    "missing_id": "the id field is absent or null",
    "invalid_id": "the id is not a string or an integer",
    "invalid_timestamp": "the timestamp field is not a number or a string",
    "schema_mismatch": "the event names a feature schema hash other than the model's",
    "missing_feature": "a model feature is absent",
    "non_numeric_feature": "a feature value is not a JSON number (strings, booleans, null, arrays, objects)",
    "non_finite_feature": "a feature value is NaN, infinite or out of float64 range",
    "scoring_error": "the scorer failed on the event (should not happen; see the message)",
}

_NUMBER = (int, float)


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


class Decoder:
    """Decodes batches of raw event values for one model's feature list."""

    def __init__(self, features: list[str], id_field: str = "id", ts_field: str = "ts",
                 schema_field: str = "schema", schema_hash: str | None = None, max_bytes: int = 65536):
        self.features = list(features)
        self.id_field, self.ts_field, self.schema_field = id_field, ts_field, schema_field
        self.schema_hash = schema_hash
        self.max_bytes = max_bytes
        # One C-level call pulls id, ts and every feature of an object (KeyError if one is absent).
        self._get_features = itemgetter(*self.features) if len(self.features) > 1 else (lambda o: (o[self.features[0]],))

    def decode(self, values: list) -> Decoded:
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

    # ------------------------------------------------------------------ steps
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
        return obj

    def _check_meta(self, o: dict) -> tuple[str, str] | None:
        eid = o.get(self.id_field)
        if eid is None:
            return "missing_id", f"field {self.id_field!r} is absent or null"
        if type(eid) not in (str, int):
            return "invalid_id", f"field {self.id_field!r} is a {type(eid).__name__}, expected a string or integer"
        ts = o.get(self.ts_field)
        if ts is not None and type(ts) not in (str, int, float):
            return "invalid_timestamp", f"field {self.ts_field!r} is a {type(ts).__name__}"
        if self.schema_hash is not None and self.schema_field in o and o[self.schema_field] != self.schema_hash:
            return "schema_mismatch", f"event schema {str(o[self.schema_field])[:80]!r} != model schema {self.schema_hash!r}"
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
