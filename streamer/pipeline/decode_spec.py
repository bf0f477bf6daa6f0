"""Mixed events (a model with a feature spec): JSON objects -> the spec's encoded matrix, or a reason code.

Used instead of ``Decoder``'s numeric fast path when the model carries a
feature spec (categorical, boolean, optional or nested fields). Each event is
parsed by ``orjson``; one it refuses goes through the reference parser
(``Decoder``'s ``json.loads`` step), so a malformed event gets the same reason
code and message on both paths. Ids, timestamps and the schema hash are
checked as there; an integer event time beyond 64 bits, which orjson reads as
the nearest float, is read again by the reference parser and passed on exactly,
as the numeric decoder does. The features go through
``FittedFeatures.encode_records``: the transform the offline job applies to
Parquet rows, so an event scores as its row did in training. Unknown extra
fields are ignored; a missing field follows its missing policy; a value of
the wrong JSON type is a dead letter (``non_numeric_feature`` for a numeric
feature, ``type_mismatch`` otherwise); an unseen category is scored.

The valid rows' objects travel on in ``Decoded.records``: explanations quote
the event's own values (an unseen category by name).

>>> import pyarrow as pa
>>> from offline_train.config import FeatureSpec
>>> from offline_train.features import FittedFeatures, profile
>>> specs = [FeatureSpec(name="kind", type="categorical"), FeatureSpec(name="n", path="m.n", type="numeric", missing="zero")]
>>> t = pa.table({"kind": ["a", "b"], "m": [{"n": 1.0}, {"n": 2.0}]})
>>> d = SpecDecoder(FittedFeatures.fit(specs, profile(t.to_batches(), specs)))
>>> out = d.decode([b'{"id": 1, "kind": "zz", "m": {}}', b'{"id": 2, "kind": 3.5, "m": {"n": 1}}', b'{"id": 3, "kind": "a", "m": 7}'])
>>> out.X.tolist(), out.ids, [(r.index, r.reason) for r in out.rejects]
([[0.0, 0.0, 1.0, 0.0]], [1], [(1, 'type_mismatch'), (2, 'type_mismatch')])
>>> out = d.decode([b'{"id": 4, "ts": 18446744073709551615, "kind": "a"}', b'{"id": 5, "ts": 18446744073709551616, "kind": "a"}'])
>>> out.ts, out.rejects
([18446744073709551615, 18446744073709551616], [])
"""

from __future__ import annotations

import numpy as np
import orjson

from offline_train.features import FittedFeatures

from .decode import INT_EXACT, Decoded, Decoder, Reject


class SpecDecoder(Decoder):
    """Decodes batches of raw event values for one model's fitted feature spec."""

    def __init__(self, spec: FittedFeatures, id_field: str = "id", ts_field: str = "ts", schema_field: str = "schema",
                 schema_hash: str | None = None, max_bytes: int = 65536):
        super().__init__(spec.columns, id_field, ts_field, schema_field, schema_hash, max_bytes)
        self.spec = spec

    def decode(self, values: list) -> Decoded:
        loads, max_bytes = orjson.loads, self.max_bytes
        objs, pos, rejects = [], [], []
        for i, v in enumerate(values):
            o = None
            if v and len(v) <= max_bytes:
                try:
                    o = loads(v)
                except ValueError:  # orjson.JSONDecodeError
                    pass
            if type(o) is not dict or type(o.get(self.id_field)) is float:  # orjson reads ints beyond 2**64 as floats
                o = self._parse(i, v, rejects)  # the reference parser: the object (NaN literals) or the reason
                if o is None:
                    continue
            elif type(ts := o.get(self.ts_field)) is float and abs(ts) >= INT_EXACT:
                exact = self._parse(i, v, [])  # an integer beyond 64 bits read as the nearest float? json.loads says
                if exact is not None and type(exact.get(self.ts_field)) is int:
                    o = exact  # the time the event gave, as the numeric decoder passes it on
            err = self._check_meta(o)
            if err:
                rejects.append(Reject(i, *err))
                continue
            objs.append(o)
            pos.append(i)
        enc = self.spec.encode_records(objs)
        keep = list(range(len(objs)))
        X = enc.X
        if enc.reasons:
            keep = [k for k in keep if k not in enc.reasons]
            rejects.extend(Reject(pos[k], reason, msg) for k, (reason, msg) in enc.reasons.items())
            rejects.sort(key=lambda r: r.index)
            X = X[keep]
        good = [objs[k] for k in keep]
        return Decoded(X, np.asarray([pos[k] for k in keep], dtype=np.int64), [o[self.id_field] for o in good],
                       [o.get(self.ts_field) for o in good], rejects, records=good)
