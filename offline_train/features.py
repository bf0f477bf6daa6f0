"""The feature spec: from raw records (JSON objects online, Parquet rows offline) to the detector's columns.

One code path. ``infer_specs`` reads a Parquet schema and one pass of
column statistics; ``FittedFeatures.fit`` learns medians, modes,
vocabularies and frequencies from the same statistics; the transform turns a
batch into the numeric matrix the detector scores, from Python values
(``encode_records``: the streamer's JSON objects) or from Arrow columns
(``encode_arrow``: the offline job). Both reduce each feature to the same
(values, missing mask, bad rows) triple and call the same encoder, so a row
encodes to the same numbers offline and online. The fitted state is plain
JSON (``to_dict`` / ``from_dict``) kept in the artifact's metadata.

Encoded columns per feature:

- numeric: ``name`` (after clip, then signed log1p); boolean: ``name`` as 0/1;
- categorical one-hot: ``name=<category>`` per vocabulary entry plus
  ``name=<unseen>`` (a category outside the vocabulary: never seen in
  training, or rarer than the ``max_categories`` kept); frequency:
  ``name:frequency`` (the category's share of the training rows, 0 when
  unseen); hash: ``name#0`` .. ``name#<B-1>`` (crc32 of the text mod B);
- ``missing: impute`` adds ``name:missing`` (1 where the value was absent or
  null and the training median/mode stands in).

A row that cannot be encoded gets a dead-letter reason code (the streamer's
``REASONS``): ``missing_feature`` (absent or null under ``missing: reject``),
``non_numeric_feature`` (a numeric feature holding another JSON type),
``non_finite_feature`` (NaN, infinity), ``type_mismatch`` (a categorical or
boolean feature, or a nested feature's parent, holding a value of another
type). Unknown extra fields are ignored.

>>> import pyarrow as pa
>>> from offline_train.config import FeatureSpec
>>> t = pa.table({"amount": [1.0, 2.0, None, 4.0], "kind": ["a", "b", "a", None]})
>>> specs = [FeatureSpec(name="amount", type="numeric", missing="impute"),
...          FeatureSpec(name="kind", type="categorical", missing="zero")]
>>> ff = FittedFeatures.fit(specs, profile([t.to_batches()[0]], specs))
>>> ff.columns
['amount', 'amount:missing', 'kind=a', 'kind=b', 'kind=<unseen>']
>>> enc = ff.encode_records([{"amount": 3, "kind": "b"}, {"kind": "zzz"}, {"amount": "x", "kind": "a"}])
>>> enc.X[:2].tolist(), enc.reasons[2][0]
([[3.0, 0.0, 0.0, 1.0, 0.0], [2.0, 1.0, 0.0, 0.0, 1.0]], 'non_numeric_feature')
"""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .config import MAX_CATEGORIES, FeatureSpec
from .sampling import UniformSample

VERSION = 1
ABSENT = object()  # a field the record does not have (null is None)
UNSEEN = "<unseen>"
_MAX_DISTINCT = MAX_CATEGORIES  # categories counted per feature while profiling; later new ones count as one "other"
_MAX_FREQUENCIES = 10_000  # frequency encoding keeps the shares of this many most common categories
# Numeric values kept for the median: every one up to this many, else a uniform sample of this many (8 bytes a value,
# 12 past the cap: the sampler's positions). The sample before 2026-12 kept every value up to 2 x 200k before it
# thinned, so up to 400k values a median is still exact, as it was.
_SAMPLE = 400_000
_ID_SHARE = 0.5  # inference leaves out a string column with more distinct values than this share of rows ...
_ID_MIN = 1000  # ... and at least this many (an identifier, not a category)


class SpecError(ValueError):
    """A feature spec that does not fit the data; the message names the feature."""


# ----------------------------------------------------------------------------- inference
def _kind_of(t: pa.DataType) -> str | None:
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "numeric"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "categorical"
    if pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)):
        return "categorical"
    return None


def schema_leaves(schema: pa.Schema) -> dict[tuple[str, ...], pa.DataType]:
    """Every leaf column of ``schema`` by its keys (structs flattened), in schema order."""
    out: dict[tuple[str, ...], pa.DataType] = {}

    def walk(keys: tuple[str, ...], t: pa.DataType) -> None:
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                f = t.field(i)
                walk((*keys, f.name), f.type)
        else:
            out[keys] = t

    for f in schema:
        walk((f.name,), f.type)
    return out


def _spec_for(keys: tuple[str, ...], kind: str) -> FeatureSpec:
    """A nested leaf is named by its dotted path; a top-level column by its name."""
    dotted = ".".join(keys)
    return FeatureSpec(name=dotted, path=dotted if len(keys) > 1 else None, type=kind)


def candidate_specs(schema: pa.Schema, exclude: Iterable[str] = (), names: list[str] | None = None) -> tuple[list[FeatureSpec], list[str]]:
    """Specs typed from the schema (policies still ``reject``) and the leaves left out, with why.

    ``names``: only these paths, in this order (an unknown or unsupported one raises ``SpecError``).
    """
    leaves = schema_leaves(schema)
    by_name = {".".join(k): k for k in leaves}
    by_name.update({k[0]: k for k in leaves if len(k) == 1})  # a top-level column named "a.b" wins over a.b nested
    exclude = set(exclude)
    if names is not None:
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise SpecError(f"unknown feature column(s): {', '.join(unknown)}; the data has: {', '.join(by_name)}")
        bad = [f"{n} ({leaves[by_name[n]]})" for n in names if _kind_of(leaves[by_name[n]]) is None]
        if bad:
            raise SpecError(f"feature column(s) of a type no spec can read: {', '.join(bad)}")
        return [_spec_for(by_name[n], _kind_of(leaves[by_name[n]])) for n in names], []
    specs, left_out = [], []
    for keys, t in leaves.items():
        if keys[0] in exclude:
            continue
        kind = _kind_of(t)
        if kind is None:
            left_out.append(f"{'.'.join(keys)}: type {t} is not numeric, string or boolean")
        else:
            specs.append(_spec_for(keys, kind))
    return specs, left_out


def infer_specs(schema: pa.Schema, stats: dict[str, ColumnProfile], exclude: Iterable[str] = (),
                names: list[str] | None = None) -> tuple[list[FeatureSpec], list[str]]:
    """The inferred spec: types from the schema, ``impute`` where the data has nulls, identifiers and columns
    without a value (all null, as a column of the null type is) left out; columns named in ``names`` are kept."""
    specs, left_out = candidate_specs(schema, exclude, names)
    out = []
    for sp in specs:
        p = stats[sp.name]
        if names is None and p.missing and not p.present:  # nothing to learn a fill from; one such column refused all
            left_out.append(f"{sp.name}: no value in the training data ({p.missing} nulls)")
            continue
        if sp.type == "categorical" and names is None and len(p.counts) > max(_ID_MIN, _ID_SHARE * p.present):
            left_out.append(f"{sp.name}: {len(p.counts)} distinct strings in {p.present} rows (an identifier?)")
            continue
        if p.missing:
            sp = sp.model_copy(update={"missing": "impute"})
        out.append(sp)
    if not out:
        raise SpecError("no usable feature columns in the data (id, timestamp and label columns are excluded)")
    return out, left_out


def is_numeric_only(specs: list[FeatureSpec]) -> bool:
    """Plain named numeric columns, rejected when missing: the streamer's orjson fast path reads these as they are."""
    return all(s.type == "numeric" and s.missing == "reject" and not s.log1p and s.clip is None and s.path is None
               for s in specs)


def specs_yaml(specs: list[FeatureSpec], left_out: list[str] = ()) -> str:
    """The spec as the ``features:`` section of a config file (defaults left out), with the left-out columns as comments."""
    import yaml

    body = [s.model_dump(exclude_defaults=True) for s in specs]
    text = yaml.safe_dump({"features": body}, sort_keys=False, default_flow_style=False)
    notes = "".join(f"# left out: {why}\n" for why in left_out)
    return notes + text


# ----------------------------------------------------------------------------- raw values -> (values, missing, bad)
@dataclass
class Column:
    """One feature over a batch, before encoding: values, a missing mask and rows that cannot be read."""

    values: object  # numeric/boolean: float ndarray; categorical: list of str (None where missing)
    missing: np.ndarray  # bool
    bad: list[tuple[int, str, str]] = field(default_factory=list)  # (row, reason code, message)


_NUM = {int, float}


def column_from_values(spec: FeatureSpec, vals: list) -> Column:
    """Python values of one feature (``ABSENT`` for an absent field) as a ``Column``; JSON types are checked here."""
    n = len(vals)
    missing = np.zeros(n, bool)
    bad: list = []
    name = spec.name
    if spec.type == "numeric":
        types = set(map(type, vals))
        if types <= _NUM:
            try:
                arr = np.array(vals, dtype=np.float64)
            except OverflowError:
                arr = None
            if arr is not None:
                return _finite(name, arr, missing, bad)
        arr = np.zeros(n)
        for i, v in enumerate(vals):
            t = type(v)
            if t is int or t is float:
                try:
                    arr[i] = float(v)
                except OverflowError:
                    arr[i] = math.inf
            elif v is None or v is ABSENT:
                missing[i] = True
            else:
                bad.append((i, "non_numeric_feature", f"feature {name!r} is {_what(v)}, expected a number"))
        return _finite(name, arr, missing, bad)
    if spec.type == "boolean":
        arr = np.zeros(n)
        for i, v in enumerate(vals):
            if v is True:
                arr[i] = 1.0
            elif v is False:
                pass
            elif v is None or v is ABSENT:
                missing[i] = True
            else:
                bad.append((i, "type_mismatch", f"feature {name!r} is {_what(v)}, expected true or false"))
        return Column(arr, missing, bad)
    out = list(vals)
    for i, v in enumerate(vals):
        t = type(v)
        if t is str:
            continue
        if t is int:
            out[i] = str(v)
        elif v is None or v is ABSENT:
            out[i] = None
            missing[i] = True
        else:
            out[i] = None
            bad.append((i, "type_mismatch", f"feature {name!r} is {_what(v)}, expected a string"))
    return Column(out, missing, bad)


def float_values(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An Arrow number or boolean column as float64, NaN for nulls, booleans 0/1.

    A decimal goes through its text: Arrow's decimal-to-float cast is not correctly rounded, and an event's JSON
    number is, so the same value would differ by an ulp offline and online.

    >>> import decimal
    >>> float_values(pa.array([decimal.Decimal("2.675"), None], pa.decimal128(6, 3))).tolist()
    [2.675, nan]
    """
    if pa.types.is_decimal(col.type):
        col = col.cast(pa.string()).cast(pa.float64())
    elif pa.types.is_boolean(col.type):
        col = col.cast(pa.float64())
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)


def column_from_arrow(spec: FeatureSpec, col: pa.Array | pa.ChunkedArray) -> Column:
    """An Arrow column of one feature as a ``Column`` (the schema was checked against the spec)."""
    missing = np.asarray(col.is_null().to_numpy(zero_copy_only=False), bool)
    if spec.type in ("numeric", "boolean"):
        arr = np.where(missing, 0.0, float_values(col))
        return _finite(spec.name, arr, missing, [])
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    return Column(col.cast(pa.string()).to_pylist(), missing, [])


def _finite(name: str, arr: np.ndarray, missing: np.ndarray, bad: list) -> Column:
    fin = np.isfinite(arr)
    if not fin.all():
        for i in np.flatnonzero(~fin).tolist():
            bad.append((i, "non_finite_feature", f"feature {name!r} = {arr[i]} is not a finite float64"))
        arr = np.where(fin, arr, 0.0)
    return Column(arr, missing, bad)


def _what(v) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(type(v), type(v).__name__)


def record_getter(parts: list[str]):
    """``get(record) -> value | ABSENT | _Mismatch`` for the keys into nested JSON objects."""
    if len(parts) == 1:
        key = parts[0]
        return lambda o: o.get(key, ABSENT)

    def get(o):
        for p in parts[:-1]:
            o = o.get(p, ABSENT)
            if o is None or o is ABSENT:
                return o
            if type(o) is not dict:
                return _Mismatch(p, o)
        return o.get(parts[-1], ABSENT)

    return get


@dataclass
class _Mismatch:
    """A nested feature's parent that is not an object (a type change upstream)."""

    parent: str
    value: object


# ----------------------------------------------------------------------------- profiling (one pass)
@dataclass
class ColumnProfile:
    """What fitting needs of one feature: missing/present counts, category counts, a numeric sample."""

    missing: int = 0
    present: int = 0
    counts: Counter = field(default_factory=Counter)
    overflow: int = 0  # rows whose category arrived after _MAX_DISTINCT were counted
    sample: UniformSample = field(default_factory=lambda: UniformSample(_SAMPLE))  # numeric values

    def add(self, spec: FeatureSpec, col: Column) -> None:
        ok = ~col.missing
        if col.bad:
            ok[[b[0] for b in col.bad]] = False
        self.missing += int(col.missing.sum())
        self.present += int(ok.sum())
        if spec.type == "categorical":
            vals = [v for v, k in zip(col.values, ok.tolist(), strict=True) if k]
            new = Counter(vals)
            if len(self.counts) >= _MAX_DISTINCT:
                for k in list(new):
                    if k not in self.counts:
                        self.overflow += new.pop(k)
            self.counts.update(new)
        elif spec.type == "boolean":
            v = col.values[ok]
            self.counts.update({True: int((v > 0.5).sum()), False: int((v <= 0.5).sum())})
        else:
            self.sample.add(col.values[ok])  # a uniform sample, as the network's training rows are


def arrow_column(batch: pa.RecordBatch | pa.Table, parts: list[str]) -> pa.Array | None:
    """The leaf at ``parts`` (keys) of a batch (struct fields by name; a null parent reads as null); None if absent."""
    i = batch.schema.get_field_index(parts[0])
    if i < 0:
        return None
    col = batch.column(i)
    for p in parts[1:]:
        if not pa.types.is_struct(col.type) or col.type.get_field_index(p) < 0:
            return None
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        col = pc.struct_field(col, p)
    return col


def feature_column(spec: FeatureSpec, batch: pa.RecordBatch | pa.Table) -> Column:
    """One feature of a Parquet batch; an absent column or struct leaf reads as all null, as an absent JSON
    field does online, so the feature's missing policy decides (``check_schema`` refuses it first for reject)."""
    col = arrow_column(batch, spec.keys)
    if col is None:
        n = batch.num_rows
        return Column([None] * n if spec.type == "categorical" else np.zeros(n), np.ones(n, bool))
    return column_from_arrow(spec, col)


def _fits(kind: str, t: pa.DataType) -> bool:
    """Whether a column of type ``t`` can feed a ``kind`` feature: the kind inference would give it, or, for a
    categorical one, integer codes and any dictionary too."""
    return _kind_of(t) == kind or (kind == "categorical" and (pa.types.is_integer(t) or pa.types.is_dictionary(t)))


def check_schema(schema: pa.Schema, specs: list[FeatureSpec]) -> list[str]:
    """The top-level columns to read for ``specs`` (those the data has); ``SpecError`` where a leaf has the
    wrong type, or is absent and its feature's policy is ``reject``. An absent leaf of an ``impute`` or
    ``zero`` feature is allowed: ``feature_column`` reads it as all null. Offline training and scoring both
    call this, so a file follows the same policies as the streamer's events."""
    leaves = schema_leaves(schema)
    names = set(schema.names)
    for sp in specs:
        keys = tuple(sp.keys)
        where = ".".join(keys)
        t = leaves.get(keys)
        if t is not None:
            if not _fits(sp.type, t):
                raise SpecError(f"feature {sp.name!r} is {sp.type} in the spec but column {where!r} is {t}")
            continue
        for k in range(1, len(keys)):  # a parent that is a plain column is a type change, not an absence
            pt = leaves.get(keys[:k])
            if pt is not None:
                raise SpecError(f"feature {sp.name!r}: column {'.'.join(keys[:k])!r} is {pt}, not a struct holding {where!r}")
        if sp.missing == "reject":
            raise SpecError(f"feature {sp.name!r} (missing: reject): no column {where!r} in the data; it has: "
                            + ", ".join(".".join(k) for k in leaves))
    return list(dict.fromkeys(sp.keys[0] for sp in specs if sp.keys[0] in names))


def profile(batches: Iterable[pa.RecordBatch], specs: list[FeatureSpec], seed: int = 0) -> dict[str, ColumnProfile]:
    """One pass over Arrow batches: each spec's ``ColumnProfile``, keyed by feature name."""
    out = {s.name: ColumnProfile(sample=UniformSample(_SAMPLE, seed)) for s in specs}
    for rb in batches:
        for s in specs:
            out[s.name].add(s, feature_column(s, rb))
    return out


# ----------------------------------------------------------------------------- fitted encoder
@dataclass
class Fitted:
    """One feature's learned state and its encoded columns."""

    spec: FeatureSpec
    kind: str  # numeric | boolean | onehot | frequency | hash
    fill: object  # the training median (numeric), mode (boolean/categorical); None if never needed
    categories: list = field(default_factory=list)  # onehot: vocabulary; hash: the most common category per bucket
    frequencies: dict = field(default_factory=dict)  # frequency: category -> share of training rows
    columns: list = field(default_factory=list)  # value columns (the indicator excluded)
    indicator: bool = False

    def to_dict(self) -> dict:
        return {"spec": self.spec.model_dump(mode="json"), "kind": self.kind, "fill": self.fill,
                "categories": self.categories, "frequencies": self.frequencies, "columns": self.columns,
                "indicator": self.indicator}

    @classmethod
    def from_dict(cls, d: dict) -> Fitted:
        return cls(FeatureSpec.model_validate(d["spec"], context={"artifact": True}), d["kind"], d["fill"], list(d["categories"]), dict(d["frequencies"]),
                   list(d["columns"]), bool(d["indicator"]))

    def transform_number(self, v: np.ndarray) -> np.ndarray:
        """Clip, then signed log1p (the numeric transforms)."""
        s = self.spec
        if s.clip is not None:
            lo, hi = s.clip
            v = np.clip(v, -np.inf if lo is None else lo, np.inf if hi is None else hi)
        if s.log1p:
            v = np.sign(v) * np.log1p(np.abs(v))
        return v

    def inverse_number(self, v: np.ndarray) -> np.ndarray:
        if self.spec.log1p:
            v = np.sign(v) * np.expm1(np.minimum(np.abs(v), 700.0))
        return v


def _bucket(text: str, buckets: int) -> int:
    return zlib.crc32(text.encode("utf-8", "surrogatepass")) % buckets


def _fit_one(spec: FeatureSpec, p: ColumnProfile) -> Fitted:
    name = spec.name
    if p.present == 0 and spec.missing != "zero":
        raise SpecError(f"feature {name!r}: no value in the training data to learn from")
    indicator = spec.missing == "impute"
    if spec.type == "numeric":
        fill = float(np.median(p.sample.result()[0])) if p.sample.seen else 0.0
        return Fitted(spec, "numeric", fill, columns=[name], indicator=indicator)
    if spec.type == "boolean":
        fill = bool(p.counts[True] > p.counts[False])
        return Fitted(spec, "boolean", fill, columns=[name], indicator=indicator)
    ranked = sorted(p.counts.items(), key=lambda kv: (-kv[1], kv[0]))
    fill = ranked[0][0] if ranked else None
    kind = spec.encoding
    if kind == "auto":
        kind = "onehot" if len(ranked) <= spec.max_categories else "frequency"
    if kind == "onehot":
        vocab = [c for c, _ in ranked[:spec.max_categories]]
        return Fitted(spec, "onehot", fill, categories=vocab,
                      columns=[f"{name}={c}" for c in vocab] + [f"{name}={UNSEEN}"], indicator=indicator)
    if kind == "frequency":
        total = max(1, p.present)  # every row with a value (the overflow rows included)
        freqs = {c: n / total for c, n in ranked[:_MAX_FREQUENCIES]}
        return Fitted(spec, "frequency", fill, frequencies=freqs, columns=[f"{name}:frequency"], indicator=indicator)
    b = spec.hash_buckets
    examples: list = [None] * b
    for c, _ in reversed(ranked):  # most common last, so it wins its bucket
        examples[_bucket(c, b)] = c
    return Fitted(spec, "hash", fill, categories=examples, columns=[f"{name}#{k}" for k in range(b)], indicator=indicator)


@dataclass
class Encoded:
    """A batch encoded: the matrix (every row; rows with a reason hold zeros) and the rows that cannot be scored."""

    X: np.ndarray
    reasons: dict[int, tuple[str, str]]  # row -> (reason code, message), the first reason in feature order


class FittedFeatures:
    """The fitted spec: encoded column names, the transform, explanations in the user's terms, JSON state."""

    def __init__(self, features: list[Fitted]):
        self.features = features
        self.columns: list[str] = []
        self.slices: list[tuple[int, int, int | None]] = []  # (value start, value end, indicator column or None)
        for f in features:
            a = len(self.columns)
            self.columns += f.columns
            b = len(self.columns)
            ind = None
            if f.indicator:
                ind = b
                self.columns.append(f"{f.spec.name}:missing")
            self.slices.append((a, b, ind))
        if len(set(self.columns)) != len(self.columns):
            raise SpecError("two features encode to the same column name; rename one")
        self._getters = [record_getter(f.spec.keys) for f in features]
        self._index = [{c: j for j, c in enumerate(f.categories)} if f.kind == "onehot" else None for f in features]

    @classmethod
    def fit(cls, specs: list[FeatureSpec], stats: dict[str, ColumnProfile]) -> FittedFeatures:
        return cls([_fit_one(s, stats[s.name]) for s in specs])

    @property
    def specs(self) -> list[FeatureSpec]:
        return [f.spec for f in self.features]

    @property
    def category_columns(self) -> np.ndarray:
        """A mask of the encoded columns: True for one-hot and boolean columns (the scaler's ``categories``). Not hash
        buckets: a hashed feature has many categories, and a new one (in a bucket no training category hit) is routine."""
        mask = np.zeros(len(self.columns), bool)
        for f, (a, b, _) in zip(self.features, self.slices, strict=True):
            mask[a:b] = f.kind in ("onehot", "boolean")
        return mask

    def spec_hash(self) -> str:
        """The model's schema hash: the input contract (name, path, type per feature) and the encoded columns."""
        return spec_hash(self.to_dict())

    def to_dict(self) -> dict:
        return {"version": VERSION, "features": [f.to_dict() for f in self.features], "columns": self.columns}

    @classmethod
    def from_dict(cls, d: dict) -> FittedFeatures:
        if d.get("version") != VERSION:
            raise SpecError(f"feature spec version {d.get('version')!r}, this build reads {VERSION}")
        ff = cls([Fitted.from_dict(f) for f in d["features"]])
        if ff.columns != d["columns"]:
            raise SpecError("feature spec columns do not match its features")
        return ff

    # ------------------------------------------------------------------ transform
    def encode_records(self, records: list[dict]) -> Encoded:
        """JSON objects (the streamer's events) -> the matrix; values are checked for their JSON type."""
        cols = []
        for f, get in zip(self.features, self._getters, strict=True):
            vals = list(map(get, records))
            mism = [(i, v) for i, v in enumerate(vals) if type(v) is _Mismatch] if f.spec.path else []
            for i, _ in mism:
                vals[i] = ABSENT
            col = column_from_values(f.spec, vals)
            for i, m in mism:
                col.bad.append((i, "type_mismatch", f"feature {f.spec.name!r}: {m.parent!r} is {_what(m.value)}, expected an object"))
            cols.append(col)
        return self._encode(cols, len(records))

    def encode_arrow(self, batch: pa.RecordBatch | pa.Table) -> Encoded:
        """A Parquet batch (the offline job) -> the matrix."""
        cols = [feature_column(f.spec, batch) for f in self.features]
        return self._encode(cols, batch.num_rows)

    def _encode(self, cols: list[Column], n: int) -> Encoded:
        X = np.zeros((n, len(self.columns)))
        reasons: dict[int, tuple[str, str]] = {}
        for f, (a, b, ind), col, index in zip(self.features, self.slices, cols, self._index, strict=True):
            for i, reason, msg in col.bad:
                reasons.setdefault(i, (reason, msg))
            miss = col.missing
            any_missing = bool(miss.any())
            if any_missing and f.spec.missing == "reject":
                for i in np.flatnonzero(miss).tolist():
                    reasons.setdefault(i, ("missing_feature", f"feature {f.spec.name!r} is absent or null"))
            if ind is not None and any_missing:
                X[:, ind] = miss
            impute = f.spec.missing == "impute" and any_missing
            if f.kind in ("numeric", "boolean"):
                v = col.values
                if impute:
                    v = np.where(miss, float(f.fill), v)
                X[:, a] = f.transform_number(v) if f.kind == "numeric" else v
                continue
            vals = col.values
            if impute:
                vals = [f.fill if m else v for v, m in zip(vals, miss.tolist(), strict=True)]
            if f.kind == "onehot":
                unseen = b - a - 1
                hot = [index.get(v, unseen) if v is not None else -1 for v in vals]
                rows = np.arange(n)
                hot = np.asarray(hot, dtype=np.int64)
                keep = hot >= 0
                X[rows[keep], a + hot[keep]] = 1.0
            elif f.kind == "frequency":
                get = f.frequencies.get
                X[:, a] = [get(v, 0.0) if v is not None else 0.0 for v in vals]
            else:
                B = b - a
                for i, v in enumerate(vals):
                    if v is not None:
                        X[i, a + _bucket(v, B)] = 1.0
        return Encoded(X, reasons)

    # ------------------------------------------------------------------ explanations
    def explain(self, X: np.ndarray, share: np.ndarray, expected: np.ndarray, direction: np.ndarray,
                top_k: int, records: list[dict] | None = None, never_set: np.ndarray | None = None) -> list[list[dict]]:
        """Per row, the ``top_k`` features in the user's terms, most contributing first.

        A feature's contribution is the sum of its value columns' shares; its missing
        indicator is an item of its own (``device_id missing``). ``expected`` holds the
        Tweedie expected values of every encoded column in encoded units; a categorical
        feature's expected category is the column with the largest of them, among the
        columns set in training (``never_set`` marks the others, such as a
        ``name=<unseen>`` that no training row set: never an expected category).
        """
        settable = np.ones(len(self.columns), bool) if never_set is None else ~np.asarray(never_set, bool)
        out = []
        for r in range(len(X)):
            items = []
            rec = records[r] if records is not None else None
            for f, (a, b, ind), get in zip(self.features, self.slices, self._getters, strict=True):
                items.append(self._item(f, X[r], share[r], expected[r], direction[r], a, b, rec, get, settable))
                if ind is not None:
                    name = f.spec.name
                    was = bool(X[r, ind] > 0.5)
                    items.append({"name": name, "value": None if was else "present", "expected": "missing" if expected[r, ind] > 0.5 else "present",
                                  "contribution": float(share[r, ind]), "direction": 0,
                                  "text": f"{name} missing" if was else f"{name} present (expected missing)"})
            items.sort(key=lambda it: -it["contribution"])
            out.append(items[:top_k])
        return out

    def _item(self, f: Fitted, x, share, expected, direction, a, b, rec, get, settable) -> dict:
        name = f.spec.name
        contrib = float(share[a:b].sum())
        raw = get(rec) if rec is not None else ABSENT
        missing = raw is None or raw is ABSENT
        if f.kind == "numeric":
            value = float(raw) if rec is not None and not missing else float(f.inverse_number(x[a]))
            exp = float(f.inverse_number(expected[a]))
            text = f"{name} = {value:.6g} (expected {exp:.4g})"
            return {"name": name, "value": value, "expected": exp, "contribution": contrib,
                    "direction": int(np.sign(direction[a])), "text": text}
        if f.kind == "boolean":
            value = bool(raw) if rec is not None and not missing else bool(x[a] > 0.5)
            exp = bool(expected[a] > 0.5) if settable[a] else bool(f.fill)  # never set otherwise: its training mode
            return {"name": name, "value": value, "expected": exp, "contribution": contrib, "direction": 0,
                    "text": f"{name} = {str(value).lower()} (expected {str(exp).lower()})"}
        if f.kind == "frequency":
            value = str(raw) if rec is not None and not missing else None
            exp = float(expected[a])
            seen = float(x[a])
            text = (f'{name} = "{value}" ' if value is not None else f"{name} ") + \
                f"(a category in {seen:.2%} of training rows, expected about {max(exp, 0.0):.2%})"
            return {"name": name, "value": value, "expected": exp, "contribution": contrib,
                    "direction": int(np.sign(direction[a])), "text": text}
        j = int(np.argmax(np.where(settable[a:b], expected[a:b], -np.inf)))
        if f.kind == "onehot":
            exp = f.categories[j] if j < len(f.categories) else UNSEEN
            hot = np.flatnonzero(x[a:b] > 0.5)
            fallback = (f.categories[hot[0]] if hot[0] < len(f.categories) else UNSEEN) if len(hot) else None
        else:
            exp = f.categories[j] if f.categories[j] is not None else f"bucket {j}"
            fallback = None
        value = str(raw) if rec is not None and not missing else fallback
        if value is None:
            text = f'{name} = none (expected "{exp}")'
        elif value == exp:  # the category itself is expected; its columns still carry the score: the combination is odd
            text = f'{name} = "{value}" (expected "{exp}" too, but not with these other values)'
        else:
            text = f'{name} = "{value}" (expected "{exp}")'
        return {"name": name, "value": value, "expected": exp, "contribution": contrib, "direction": 0, "text": text}


def spec_hash(fitted: dict) -> str:
    """Stable short hash of a fitted spec's input contract (name, path, type) and encoded columns."""
    body = {"features": [[f["spec"]["name"], f["spec"].get("path"), f["spec"]["type"]]
                         for f in fitted["features"]], "columns": fitted["columns"]}
    return hashlib.sha256(json.dumps(body).encode()).hexdigest()[:16]
