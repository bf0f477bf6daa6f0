"""Parquet input: resolve files, choose feature columns, stream clean float batches.

The offline job never holds more than one record batch of raw Parquet in
memory while computing statistics; rows with a missing or non-finite feature
are counted and skipped, never fatal.

Features come from the spec (``offline_train.features``): given in the
config, or inferred from the schema. Plain numeric columns without nulls are
read as they always were (named float columns); any other spec (strings,
booleans, nested structs, nulls to impute, transforms) is fitted in one extra
pass and every batch goes through its encoder, the same transform the
streamer applies to JSON events.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import posixpath
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from . import storage
from .features import (
    FittedFeatures,
    SpecError,
    candidate_specs,
    check_schema,
    float_values,
    infer_specs,
    is_numeric_only,
    profile,
)
from .sampling import UniformSample


class DataError(ValueError):
    """Input data that cannot be used; the message says what and where."""


class LabelError(DataError):
    """A label column that is not numbers 0 and 1: the report's metrics are left out, training is not refused."""


def unreadable(e: Exception) -> DataError:
    """A Parquet file that cannot be read, in one line (Arrow's thrift errors span two).

    >>> str(unreadable(OSError("Couldn't deserialize thrift: \\nDeserializing page header failed.")))
    "cannot read Parquet data: Couldn't deserialize thrift: Deserializing page header failed."
    """
    return DataError("cannot read Parquet data: " + " ".join(str(e).split()))


def resolve_paths(spec: str | os.PathLike | list) -> list[Path | str]:
    """Parquet files named by a file, a directory (searched recursively) or a glob; local Paths or URIs."""
    if isinstance(spec, list):
        return [p for s in spec for p in resolve_paths(s)]
    text = str(spec)
    if storage.is_remote(text):
        return _resolve_remote(text)
    path = Path(text)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.parquet") if p.is_file())
    elif path.is_file():
        files = [path]
    elif any(ch in text for ch in "*?["):
        files = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
    else:
        raise DataError(f"no such file or directory: {text}")
    if not files:
        raise DataError(f"no Parquet files found at {text}")
    return files


def _resolve_remote(uri: str) -> list[str]:
    """The object-store side of ``resolve_paths``; a prefix holding published archive files yields only those."""
    if any(ch in uri for ch in "*?["):
        head = uri[:min(uri.index(ch) for ch in "*?[" if ch in uri)].rsplit("/", 1)[0]
        pattern = storage.resolve(uri)[1]
        files = sorted(storage.to_location(uri, f.path) for f in storage.list_files(head)
                       if fnmatch.fnmatchcase(f.path, pattern))
    else:
        kind = storage.info(uri).type
        if kind == storage.pafs.FileType.File:
            files = [uri]
        elif kind == storage.pafs.FileType.NotFound:
            storage.check_bucket(uri)  # a missing bucket says so
            raise DataError(f"no such object or prefix: {uri}")
        else:
            # Archive files (date=*/part-*.parquet) count only once published (a marker names them).
            listed = storage.list_files(uri)
            marker = f"/{storage.MARKERS}/"
            published = {f.path.replace(marker, "/", 1)[:-len(".json")] for f in listed
                         if marker in f.path and f.path.endswith(".parquet.json")}
            files = []
            for f in listed:
                archived = f.base_name.startswith("part-") and posixpath.basename(posixpath.dirname(f.path)).startswith("date=")
                if (f.base_name.endswith(".parquet") and not f.base_name.startswith((".", "_"))
                        and (f.path in published or not archived)):
                    files.append(storage.to_location(uri, f.path))
            files.sort()
    if not files:
        raise DataError(f"no Parquet files found at {uri}")
    return files


def open_parquet(location) -> pq.ParquetFile:
    """A ``ParquetFile`` for a local path or a URI."""
    fs, path = storage.resolve(location)
    with storage.guard(location):
        return pq.ParquetFile(fs.open_input_file(path))


# The demo's data (ADBench cardio), shipped as package data; kept out of a ``data/`` folder beside this module.
BUNDLED_CARDIO = Path(__file__).resolve().parent / "bundled" / "cardio.parquet"
# Mixed events for ``kdsm demo --mixed``: Solar Flare from river's wheel (offline_train.evaluation.solar_flare).
BUNDLED_SOLAR_FLARE = Path(__file__).resolve().parent / "bundled" / "solar_flare.parquet"


def read_table(spec: str | os.PathLike | list) -> pa.Table:
    """Every row of the Parquet file(s) at ``spec`` (file, directory, glob or list) as one table."""
    return _dataset(resolve_paths(spec)).to_table()


# A pass over Parquet holds a few record batches, whatever the file size. The scanner's defaults do not:
# pre-buffering keeps the byte ranges it read until the scan ends, and threaded read-ahead outruns a
# slower consumer (apache/arrow#39808; measured here: peak RSS grew with the row count). Parallelism
# comes from the engine's partitions instead (offline_train.engine).
_PARQUET = ds.ParquetFileFormat(default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=False))
_STREAMING = {"batch_readahead": 1, "fragment_readahead": 1, "use_threads": False}


def _dataset(files: list[Path | str]) -> ds.Dataset:
    if files and any(storage.is_remote(f) for f in files):
        resolved = [storage.resolve(f) for f in files]
        if len({type(fs).__name__ + fs.type_name for fs, _ in resolved}) > 1:
            raise DataError("local files and object-store files cannot be mixed in one data set")
        try:
            with storage.guard(files[0]):
                return ds.dataset([p for _, p in resolved], format=_PARQUET, filesystem=resolved[0][0])
        except pa.ArrowException as e:
            raise DataError(f"cannot read Parquet ({', '.join(map(str, files[:3]))}): {e}") from None
    try:
        return ds.dataset([str(f) for f in files], format=_PARQUET)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"cannot read Parquet ({', '.join(map(str, files[:3]))}): {e}") from None


def spec_columns(schema: pa.Schema, specs: list) -> list[str]:
    """The top-level columns to read for ``specs``, checked against ``schema`` by ``features.check_schema`` (types;
    an absent reject feature); ``DataError`` in one line otherwise. Training, ``kdsm score`` and the engines share it."""
    try:
        return check_schema(schema, specs)
    except SpecError as e:
        raise DataError(str(e)) from None


@dataclass
class Partition:
    """Whole row groups of one file (``fragment``), starting at row ``offset`` of the dataset."""

    fragment: ds.ParquetFileFragment
    offset: int
    rows: int
    rows_skipped: int = 0  # set by a pass over it


def named_twice(names) -> list[str]:
    """The names that occur more than once, sorted.

    >>> named_twice(["a", "b", "a", "c", "b"])
    ['a', 'b']
    """
    return sorted({f for f in names if names.count(f) > 1})


@dataclass
class ParquetSource:
    """Streams a Parquet dataset as float64 feature batches (plus labels when named)."""

    path: str | os.PathLike | list
    features: list[str] | None = None
    id_column: str = "id"
    timestamp_column: str = "ts"
    label_column: str | None = "label"
    batch_rows: int = 65536
    max_skipped_fraction: float | None = None  # a full pass that skips more raises DataError (None: no bound)
    spec: list | None = None  # FeatureSpec list (the config's ``features:``); None = inferred (``features`` names narrow it)
    encoder: FittedFeatures | None = None  # a fitted spec to apply as it is (scoring, retraining); None = fit one if needed
    files: list[Path] = field(init=False)
    left_out: list[str] = field(init=False, default_factory=list)  # columns inference left out, with why
    specs: list = field(init=False, default_factory=list)  # the spec in use (given, inferred or the encoder's)
    rows_read: int = field(init=False, default=0)
    rows_skipped: int = field(init=False, default=0)

    def __post_init__(self):
        self.files = resolve_paths(self.path)
        self._ds = _dataset(self.files)
        schema = self._ds.schema
        exclude = {self.id_column, self.timestamp_column}
        if self.label_column:
            exclude.add(self.label_column)
        self.has_labels = bool(self.label_column) and self.label_column in schema.names
        if self.features is not None and self.encoder is None:
            twice = named_twice(self.features)
            if twice:
                raise DataError(f"feature(s) named twice: {', '.join(twice)}")
            reserved = [f for f in self.features if f in exclude]
            if reserved:  # the label is read only for reports, id and timestamp only to name events
                raise DataError(f"feature(s) {', '.join(reserved)}: the id, timestamp or label column cannot be a "
                                "feature (data.id_column, data.timestamp_column, data.label_column)")
        if self.encoder is None:
            self.encoder = self._fit_encoder(schema, exclude)
        self._inputs = None  # the top-level columns a batch reads; None: the named numeric ones
        if self.encoder is not None:
            self._inputs = spec_columns(schema, self.encoder.specs)  # the spec, checked against the data once
            self.features = list(self.encoder.columns)
            self.specs = self.encoder.specs

    def _fit_encoder(self, schema: pa.Schema, exclude: set[str]) -> FittedFeatures | None:
        """None where the features are plain numeric columns without nulls (read as named float columns)."""
        try:
            if self.spec is None:
                specs, self.left_out = candidate_specs(schema, exclude, self.features)
                if not specs:
                    raise DataError("no usable feature columns in the data (id, timestamp and label columns are excluded)")
                if is_numeric_only(specs) and not self._nulls([s.name for s in specs]):
                    self.features, self.specs = [s.name for s in specs], specs
                    return None
                stats = self._profile(specs)
                specs, self.left_out = infer_specs(schema, stats, exclude, self.features)
            else:
                specs = list(self.spec)
                stats = self._profile(specs)  # checks the spec against the schema first
            self.specs = specs
            if is_numeric_only(specs):
                self.features = [s.name for s in specs]
                return None
            return FittedFeatures.fit(specs, stats)
        except SpecError as e:
            raise DataError(str(e)) from None

    def _nulls(self, names: list[str]) -> bool:
        try:
            return any(rb.column(i).null_count for rb in self._ds.to_batches(columns=names, batch_size=self.batch_rows)
                       for i in range(len(names)))
        except (pa.ArrowException, OSError) as e:
            raise unreadable(e) from None

    def _profile(self, specs: list) -> dict:
        cols = spec_columns(self._ds.schema, specs)
        try:
            return profile(self._ds.to_batches(columns=cols, batch_size=self.batch_rows), specs)
        except (pa.ArrowException, OSError) as e:
            raise unreadable(e) from None

    def partitions(self, target_rows: int) -> list[Partition]:
        """The dataset cut into pieces of whole row groups, about ``target_rows`` each, in stored order."""
        parts, offset = [], 0
        try:
            for frag in self._ds.get_fragments():
                group, rows = [], 0
                for rg in frag.row_groups:
                    group.append(rg.id)
                    rows += rg.num_rows
                    if rows >= target_rows:
                        parts.append(Partition(frag.subset(row_group_ids=group), offset, rows))
                        offset, group, rows = offset + rows, [], 0
                if group:
                    parts.append(Partition(frag.subset(row_group_ids=group), offset, rows))
                    offset += rows
        except (pa.ArrowException, OSError) as e:
            raise DataError(f"cannot read Parquet metadata: {e}") from None
        return parts

    def batches(self, with_labels: bool = False, part: Partition | None = None,
                keep_rows: Callable[[int, int], np.ndarray] | None = None,
                count: bool = True) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        """Yield (X, y) batches of finite rows (y as float64); counts skipped rows on each full pass.

        ``part``: only that partition's rows. ``keep_rows(offset, n)``: a mask of the rows to
        yield among the batch's ``n`` rows, which are rows ``offset..offset+n-1`` of the whole
        dataset in stored order, skipped ones included (rows it drops are not "skipped").
        ``count`` False: a pass that neither records the counts nor enforces max_skipped_fraction.
        """
        enc = self.encoder
        inputs = self._inputs if enc is not None else list(self.features)
        label = [self.label_column] if with_labels and self.has_labels else []
        columns = list(dict.fromkeys(inputs + label))
        read = skipped = 0
        offset = part.offset if part else 0
        try:
            record_batches = (part.fragment.to_batches(schema=self._ds.schema, columns=columns, batch_size=self.batch_rows,
                                                       **_STREAMING)
                              if part else self._ds.to_batches(columns=columns, batch_size=self.batch_rows, **_STREAMING))
            for rb in record_batches:
                if rb.num_rows == 0:
                    continue
                if enc is None:
                    X = np.column_stack([float_values(rb.column(i)) for i in range(len(self.features))])
                    ok = np.isfinite(X).all(axis=1)
                else:
                    encoded = enc.encode_arrow(rb)
                    X, ok = encoded.X, np.ones(rb.num_rows, bool)
                    ok[list(encoded.reasons)] = False
                y = None
                if with_labels and self.has_labels:
                    y = float_values(rb.column(rb.schema.get_field_index(self.label_column)))
                    ok &= np.isfinite(y)
                read += rb.num_rows
                skipped += int((~ok).sum())
                if keep_rows is not None:
                    ok &= keep_rows(offset, rb.num_rows)
                offset += rb.num_rows
                yield X[ok], (None if y is None else y[ok])
        except (pa.ArrowException, OSError) as e:
            raise unreadable(e) from None
        if not count:
            return
        if part is None:
            self.count_rows(read, skipped)
        else:
            part.rows_skipped = skipped

    def count_rows(self, read: int, skipped: int) -> None:
        """Record a full pass's row counts; more skipped rows than ``max_skipped_fraction`` is a DataError."""
        self.rows_read, self.rows_skipped = read, skipped
        if self.max_skipped_fraction is not None and read and skipped / read > self.max_skipped_fraction:
            raise DataError(f"{skipped} of {read} rows ({skipped / read:.1%}) have a missing or non-finite feature "
                            f"and would be skipped, more than data.max_skipped_fraction = {self.max_skipped_fraction:g}: "
                            "fix the data or raise the bound")

    def load(self, max_rows: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray | None]:
        """All finite rows (X, y) in stored order, or a uniform sample of ``max_rows`` of them."""
        X, y = bounded_sample(self.batches(with_labels=True), max_rows, seed)
        if len(X) == 0:
            raise DataError(f"no usable rows in {self.path}: {self.rows_read} read, "
                            f"{self.rows_skipped} with missing or non-finite features")
        return X, (None if y is None else y.astype(np.int64))

    def labelled(self, max_rows: int | None, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
        """(X, y, n): the rows with usable features and a label (a seeded sample of at most ``max_rows``), their
        labels, and how many rows had both. For the report only: a pass of its own, which neither records row counts
        nor enforces max_skipped_fraction (a row without a label is not a skipped row). ``LabelError`` when the
        labels are not numbers 0 and 1."""
        t = self._ds.schema.field(self.label_column).type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
                or pa.types.is_decimal(t) or pa.types.is_null(t)):
            raise LabelError(f"label column {self.label_column} holds {t}, not numbers 0 and 1")
        n = 0

        def counted():
            nonlocal n
            for X, y in self.batches(with_labels=True, count=False):
                n += len(X)
                yield X, y

        X, y = bounded_sample(counted(), max_rows, seed)
        if y is None:  # no batch at all
            return np.zeros((0, len(self.features))), np.zeros(0), 0
        other = np.unique(y[(y != 0) & (y != 1)])
        if len(other):
            raise LabelError(f"label column {self.label_column} holds values other than 0 and 1 "
                             f"({', '.join(f'{v:g}' for v in other[:5])}{', ...' if len(other) > 5 else ''})")
        return X, y, n


def bounded_sample(batches, max_rows: int | None, seed: int = 0) -> tuple[np.ndarray, np.ndarray | None]:
    """Concatenate (X, y) batches, keeping a uniform sample of at most ``max_rows`` rows in stored order
    (``UniformSample``); all of them, as they came, where there are no more."""
    sample = UniformSample(max_rows, seed)
    for X, y in batches:
        sample.add(X, y)
    return sample.result()


def write_parquet(path: str | os.PathLike, X: np.ndarray, feature_names: list[str], y: np.ndarray | None = None,
                  ids: np.ndarray | None = None) -> Path:
    """Write a feature matrix (and optional labels/ids) as a Parquet file."""
    cols = {}
    if ids is not None:
        cols["id"] = pa.array(ids)
    for j, name in enumerate(feature_names):
        cols[name] = pa.array(np.asarray(X[:, j], dtype=np.float64))
    if y is not None:
        cols["label"] = pa.array(np.asarray(y, dtype=np.int64))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), path)
    return path


def load_npz(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """An ADBench ``.npz`` (keys X, y; 1 = anomaly) as float64 X and int y. No pickle.

    Refused (``DataError``): a value of X that is not finite (the scaler's exact sums raised OverflowError at an inf,
    which stopped a whole bench run) and a label other than 0 or 1 (cast to int, 0.7 became 0 and NaN -2**63).
    """
    try:
        with np.load(path, allow_pickle=False) as d:
            X, y = d["X"].astype(np.float64), d["y"].astype(np.float64).ravel()
    except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile) as e:
        raise DataError(f"cannot read {path} as an ADBench .npz (keys X, y): {e}") from None
    if X.ndim != 2 or len(X) != len(y):
        raise DataError(f"{path}: X must be 2-D with one label in y per row, got X {X.shape} and y {y.shape}")
    bad = ~np.isfinite(X)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise DataError(f"{path}: X holds {int(bad.sum())} value(s) that are not finite (the first: X[{i}, {j}] = "
                        f"{X[i, j]})")
    labels = ~np.isin(y, (0.0, 1.0))
    if labels.any():
        raise DataError(f"{path}: y must be 0 (normal) or 1 (anomaly); {int(labels.sum())} label(s) are not "
                        f"(the first: y[{int(np.argmax(labels))}] = {y[labels][0]})")
    return X, y.astype(np.int64)


def npz_to_parquet(npz: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Export an ADBench ``.npz`` as Parquet with columns id, f0..f{d-1}, label."""
    X, y = load_npz(npz)
    names = [f"f{j}" for j in range(X.shape[1])]
    return write_parquet(out, X, names, y=y, ids=np.arange(len(X)))
