"""The offline job: Parquet -> sigmas -> model -> train -> calibrate -> artifact (+ report).

Also batch scoring of a Parquet file with a saved artifact.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.metrics import average_precision_score, roc_auc_score

from . import storage
from .artifact import METADATA, ArtifactError, check_replaceable
from .config import TrainSettings
from .data import (
    DataError,
    ParquetSource,
    _dataset,
    resolve_paths,
    spec_columns,
    unreadable,
)
from .detector import KDSM
from .engine import make_engine
from .features import float_values
from .report import write_report


def label_metrics(y: np.ndarray, scores: np.ndarray) -> dict | None:
    """AUC-PR (average precision) and AUC-ROC, or None when only one class is present."""
    if y is None or len(np.unique(y)) < 2:
        return None
    return {"auc_pr": float(average_precision_score(y, scores)), "auc_roc": float(roc_auc_score(y, scores)),
            "n": int(len(y)), "anomalies": int(y.sum())}


def report_labels(source: ParquetSource, det: KDSM, dc, seed: int, log=print) -> dict | None:
    """The report's label metrics, read only now, after training: labels the report cannot use (not 0/1, none
    present, or unreadable: a later file's labels of another type) are one line and no metrics, never a failed job
    that loses the trained model. The rows are the training data's (in-sample), a seeded sample of
    data.max_train_rows where there are more."""
    try:
        X, y, n = source.labelled(dc.max_train_rows, seed)
    except (DataError, pa.ArrowException) as e:  # LabelError, and a label column Arrow cannot read as numbers
        e = e if isinstance(e, DataError) else unreadable(e)
        log(f"labels: {e}; the report has no label metrics")
        return None
    m = label_metrics(y, det.decision_function(X)) if len(y) else None
    if m is None:
        log(f"labels ({dc.label_column}): {len(y)} labelled row(s) of a single class or none; the report has no label metrics")
        return None
    sample = f"; a seeded sample of {m['n']} of {n}, data.max_train_rows" if m["n"] < n else ""
    log(f"labels ({dc.label_column}, never used for training): AUC-PR {m['auc_pr']:.3f}, AUC-ROC {m['auc_roc']:.3f} "
        f"on {m['n']} labelled rows, in-sample (the training data's rows{sample})")
    return m


def check_output(out, force: bool = False) -> Path:
    """Refuse an ``--out`` that training could not write, or would destroy, before any work is done.

    ``out`` may be new, an empty directory, or (with ``force``) a model
    artifact to replace; a file, or a directory holding anything else, is
    refused either way (replacing it would delete what is there).
    An object-store ``out`` is checked the same way (and its bucket must exist).
    """
    if storage.is_remote(out):
        storage.check_bucket(out)
        held = storage.list_files(out)
        if held and not storage.is_file(storage.join(out, METADATA)):
            raise ArtifactError(f"--out {out} holds other objects, not a model artifact: choose a new or empty prefix")
        if held and not force:
            raise ArtifactError(f"--out {out} already holds a model artifact: pass --force to replace it")
        return out
    out = Path(out)
    check_replaceable(out, f"--out {out}", "choose a new or empty directory")  # what writing the artifact would refuse
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ArtifactError(f"--out {out} already holds a model artifact: pass --force to replace it")
    parent = storage.nearest_existing(out)
    if not parent.is_dir():
        raise ArtifactError(f"--out {out}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"--out {out}: {parent} is not writable")
    return out


def train_job(settings: TrainSettings, data, out, progress: bool = True, log=print, force: bool = False) -> dict:
    """Train from Parquet ``data`` and write the artifact and its report to ``out``; returns the summary."""
    check_output(out, force)
    dc = settings.data
    source = ParquetSource(data, features=dc.features, id_column=dc.id_column, timestamp_column=dc.timestamp_column,
                           label_column=dc.label_column, batch_rows=dc.batch_rows,
                           max_skipped_fraction=dc.max_skipped_fraction,  # checked at the end of the first pass
                           spec=settings.features)
    if source.encoder is not None:
        log(f"features: {len(source.encoder.features)} in the spec -> {len(source.features)} encoded columns "
            f"({', '.join(f'{f.spec.name}: {f.kind}' for f in source.encoder.features)})")
    for why in source.left_out:
        log(f"features: left out {why}")
    log(f"data: {len(source.files)} file(s), {len(source.features)} features")
    with make_engine(dc.engine, dc.scheduler, dc.workers) as engine:
        if engine.name != "local":
            log(f"engine: {engine.name}, {engine.workers} worker(s)")
        det = KDSM.from_settings(settings).fit_source(source, progress=progress, on_phase=log, engine=engine)
    if source.rows_skipped:
        log(f"data: skipped {source.rows_skipped} of {source.rows_read} rows ({source.rows_skipped / source.rows_read:.1%}): "
            f"a feature is missing or non-finite (NaN/inf); bound data.max_skipped_fraction = {dc.max_skipped_fraction:g}")
    ts = det.train_summary_
    log(f"trained: {ts.steps} steps in {ts.seconds:.1f}s ({ts.steps_per_second} steps/s, {ts.precision}, {ts.device})"
        + (f", EMA filtered {ts.filtered_fraction:.1%} of rows" if ts.filtered_fraction is not None else ""))
    if ts.refine:
        r = ts.refine
        if r["rounds"]:
            ranker = "blend" if r.get("rank") == "blend" else "network"
            rounds = f"then {r['rounds']} rounds on the {r['keep']:.1%} of rows the {ranker} finds most normal"
        else:
            rounds = "no rounds: the network learns the core only"
        log(f"refined: contamination estimate {r['contamination_estimate']:.1%} (isolation forest); "
            f"warm start on the {r['start_keep']:.0%} core, {rounds} (history known to be clean: kdsm train --method kdsm learns "
            "every row)")
    if det.blend_ is not None and det.neighbours_ is not None:
        n = det.neighbours_.shape
        log(f"score: the blend of the network's score, an isolation forest's and the distance to the k-th nearest (k {n['k']}) "
            f"of {n['rows']} kept training rows (score.knn; the artifact carries those rows, standardised; alerts carry "
            "the three parts, explanations come from the network)")
    elif det.blend_ is not None:
        log("score: the blend of the network's score and an isolation forest's (score.isolation_forest; "
            "alerts carry both parts, explanations come from the network)")
    summary = {"version": det.version_, "data": {"paths": [str(p) for p in source.files], **det.data_summary_},
               "feature_spec": [s.model_dump(exclude_defaults=True) for s in source.encoder.specs] if source.encoder else None,
               "features": det.feature_names_, "sigmas": dict(zip(det.feature_names_, det.sigmas_.round(4).tolist(), strict=True)),
               "thresholds": det.thresholds_, "calibration_source": det.calibration_source_,
               "train": {k: v for k, v in ts.to_dict().items() if k != "loss_curve"}}
    if source.has_labels:
        summary["labels"] = report_labels(source, det, dc, settings.train.seed, log)
    extra = {"label_metrics": summary.get("labels"), "data_summary": summary["data"]}
    written = {}
    # The report goes into the new directory before it replaces --out: a failure leaves neither half-written.
    det.save(out, extra=extra, also=lambda tmp: written.update(write_report(tmp / "report", summary, det)))
    summary["report_files"] = {k: storage.join(out, "report", Path(v).name) for k, v in written.items()}
    log(f"artifact: {out} (version {det.version_}); report: {storage.join(out, 'report', 'report.json')}")
    return summary


def _masked(values: np.ndarray, ok: np.ndarray, fill, type: pa.DataType) -> pa.Array:
    """``values`` (one per valid row) spread over every row, null where a row was invalid; always of ``type`` (a batch
    without a valid row would otherwise be a column of the null type, which the file's schema refuses)."""
    full = np.full(len(ok), fill, dtype=values.dtype)
    full[ok] = values
    return pa.array(full.tolist() if values.dtype == object else full, mask=~ok, type=type)


def _numeric(t: pa.DataType) -> bool:
    """Whether a plain numeric model can read a column of type ``t`` (as the training reader does)."""
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t) \
        or pa.types.is_null(t)


def _next_batch(batches) -> pa.RecordBatch | None:
    """The next record batch, None at the end; a file that cannot be read is one line (``DataError``)."""
    try:
        return next(batches)
    except StopIteration:
        return None
    except (pa.ArrowException, OSError) as e:  # any Arrow error (a cast it does not implement, too)
        raise unreadable(e) from None


def _data_dirs(data, files: list) -> list:
    """The directories (local) or prefixes (object store) that ``--data`` names (``files``: what it resolved to):
    a later run would read a file written under them."""
    if isinstance(data, list):
        return [d for spec in data for d in _data_dirs(spec, files)]
    text = str(data)
    if any(ch in text for ch in "*?["):
        return []
    if storage.is_remote(text):
        return [] if text in map(str, files) else [text]
    return [text] if Path(text).is_dir() else []


def score_job(model, data, out, batch_rows: int = 65536, log=print) -> dict:
    """Score every row of Parquet ``data``; rows with bad features get a null score and ``invalid`` severity.

    ``out`` is refused before any work where it would destroy an input (one of the data files, inside the --data
    directory or the model's); it is written under a temporary name beside it and renamed over ``out`` only when
    complete (an object-store ``out``: written locally, then uploaded as one object), so a failure leaves what was
    there before.
    """
    files = resolve_paths(data)
    why = "a later run would read it as input; name a file elsewhere"
    storage.check_output_file(out, "Parquet", "scored.parquet", inputs=files,
                              outside=[*((d, "the --data directory", why) for d in _data_dirs(data, files)),
                                       (model, "the model directory (--model)",
                                        "writing there would corrupt the model; name a file elsewhere")])
    det = KDSM.load(model)
    dataset = _dataset(files)
    names = dataset.schema.names
    enc = det.features_
    if enc is None:  # plain numeric columns, rejected when missing
        inputs = det.feature_names_
        missing = [f for f in inputs if f not in names]
        if missing:
            raise DataError(f"the data lacks the model's feature column(s): {', '.join(missing)}")
        other = [f"{f} ({dataset.schema.field(f).type})" for f in inputs if not _numeric(dataset.schema.field(f).type)]
        if other:
            raise DataError(f"the model reads numbers; feature column(s) of another type: {', '.join(other)}")
    else:  # the spec's policies decide, as in training: an absent impute/zero column reads as all null
        inputs = spec_columns(dataset.schema, enc.specs)
    passthrough = [c for c in ("id", "ts", "label") if c in names]
    # The output's schema, fixed before the first batch: every batch writes it, a batch without a scored row too.
    parts = det.score_parts(np.zeros((0, det.n_features_in_))).by_name() or {}
    schema = pa.schema([dataset.schema.field(c).remove_metadata() for c in passthrough]
                       + [pa.field("score", pa.float64()), pa.field("p_value", pa.float64()),
                          pa.field("severity", pa.string())]
                       + [pa.field(f"score_{name}", pa.float64()) for name in parts]
                       + ([pa.field("leading_part", pa.string())] if parts else []))
    out_fs, out_path = storage.resolve(out)
    remote = storage.is_remote(out)
    if remote:
        storage.check_bucket(out)  # before any scoring
        tmp_dir = tempfile.mkdtemp(prefix="kdsm-score-")
        tmp = os.path.join(tmp_dir, "scored.parquet")
    else:
        try:
            Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DataError(f"cannot write {out}: {e}") from None
        tmp_dir, tmp = None, os.path.join(os.path.dirname(out_path), f".{os.path.basename(out_path)}.tmp-{os.getpid()}")
    writer, counts, done = None, {"rows": 0, "invalid": 0}, False
    batches = dataset.to_batches(columns=list(dict.fromkeys(passthrough + inputs)), batch_size=batch_rows)
    try:
        try:
            writer = pq.ParquetWriter(tmp, schema)
        except OSError as e:
            raise DataError(f"cannot write {out}: {e}") from None
        while (rb := _next_batch(batches)) is not None:
            if enc is None:
                # As training read them (an int past 2**53 has no exact float: Arrow's safe cast refused it; a
                # decimal through its text, correctly rounded)
                X = np.column_stack([float_values(rb.column(f)) for f in det.feature_names_])
                ok = np.isfinite(X).all(axis=1)
            else:  # the same encoder the streamer applies; a row it cannot read is invalid
                encoded = enc.encode_arrow(rb)
                X, ok = encoded.X, np.ones(rb.num_rows, bool)
                ok[list(encoded.reasons)] = False
            scored = det.score_parts(X[ok])
            scores = np.full(len(X), np.nan)
            scores[ok] = scored.scores
            sev = det.severity(np.where(ok, scores, -np.inf)).astype(object)  # str would size to the longest name: "invalid" cut to "i"
            sev[~ok] = "invalid"
            cols = [rb.column(c).cast(schema.field(c).type) for c in passthrough]
            cols += [pa.array(scores, mask=~ok, type=pa.float64()),
                     pa.array(det.p_values(np.where(ok, scores, 0)), mask=~ok, type=pa.float64()),
                     pa.array(sev, type=pa.string())]
            named = scored.by_name()
            if named is not None:  # the blend: each part, and the one the score equals, as alerts carry them
                cols += [_masked(values, ok, np.nan, pa.float64()) for values in named.values()]
                cols.append(_masked(det.blend_.leading(*named.values()), ok, None, pa.string()))
            try:
                writer.write_table(pa.Table.from_arrays(cols, schema=schema))
            except OSError as e:
                raise DataError(f"cannot write {out}: {e}") from None
            counts["rows"] += len(X)
            counts["invalid"] += int((~ok).sum())
        if counts["rows"] == 0:
            raise DataError(f"no rows in {data}")
        try:
            writer.close()
        except OSError as e:
            raise DataError(f"cannot write {out}: {e}") from None
        writer = None
        if remote:  # one object, whole or not at all
            with storage.guard(out):
                storage.pafs.copy_files(tmp, out_path, source_filesystem=storage.pafs.LocalFileSystem(),
                                        destination_filesystem=out_fs)
        else:
            try:
                os.replace(tmp, out_path)
            except OSError as e:
                raise DataError(f"cannot write {out}: {e}") from None
        done = True
    finally:
        if writer is not None:
            try:
                writer.close()
            except OSError:
                pass
        if tmp_dir is not None:
            shutil.rmtree(tmp_dir, ignore_errors=True)
        elif not done:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    log(f"scored {counts['rows']} rows ({counts['invalid']} invalid) with model {det.version_} -> {out}")
    return counts
