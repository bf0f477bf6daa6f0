"""``kdsm thresholds report``: the recent score distribution from the archive, the thresholds in force,
and the alert rate each threshold gives on that window, as a PNG and a printed table.

A threshold is then chosen by looking: the candidate rows show what a few
calibration quantiles would give on the same window, before anyone runs
``kdsm thresholds set``.

Scores of different model versions are not comparable, so only archived rows
scored by the model's own version are used; ``--rescore`` instead scores the
archived features of the whole window with the model (e.g. a new version
that has not served yet).

>>> import numpy as np
>>> rates = alert_rates(np.array([0.5, 1.0, 2.0, 3.0]), {"warning": 1.0, "critical": 2.5})
>>> rates["warning"], rates["critical"]
(0.75, 0.25)
"""

from __future__ import annotations

import io
import json
import logging
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from offline_train import storage
from offline_train.data import open_parquet
from streamer.lifecycle.archive import archive_schema, closed_files
from streamer.lifecycle.registry import serving_model_dir
from streamer.lifecycle.thresholds import ThresholdError

log = logging.getLogger("kdsm.thresholds")

CANDIDATE_QUANTILES = (0.95, 0.99, 0.995, 0.999, 0.9999)


class ReportError(ThresholdError):
    """No data to report on (empty archive, no rows of the model's version, ...): exit status 2, one line."""


def alert_rates(scores: np.ndarray, thresholds: dict[str, float]) -> dict[str, float]:
    """Fraction of ``scores`` at or above each threshold (the streamer alerts on ``score >= threshold``)."""
    s = np.sort(np.asarray(scores, dtype=np.float64))
    n = max(len(s), 1)
    return {name: float((len(s) - np.searchsorted(s, t, side="left")) / n) for name, t in thresholds.items()}


@dataclass
class Window:
    scores: np.ndarray
    files: int
    rows_read: int
    first: str | None
    last: str | None
    versions: dict[str, int]
    rescored: bool


def read_window(archive_dir: str | Path, model, hours: float | None = 24.0, max_rows: int = 200_000,
                rescore: bool = False, now: float | None = None) -> Window:
    """Scores of the most recent archived rows (closed files only), newest ``max_rows``.

    Without ``rescore`` only rows of ``model.version_`` are kept; with it, the
    window's features are scored by ``model``.
    """
    root = storage.as_location(archive_dir)
    if not storage.is_remote(root) and not root.is_dir():
        raise ReportError(f"archive directory {root} does not exist (archive.dir; is the streamer archiving?)")
    now = time.time() if now is None else now
    files = closed_files(root)
    if hours is not None:
        files = [f for f in files if f.stat().st_mtime >= now - hours * 3600]
    if not files:
        window = f"in the last {hours:g} h " if hours is not None else ""
        raise ReportError(f"no closed archive files {window}under {root} (files close every archive.max_file_seconds)")
    cols = ["kdsm_score", "kdsm_model_version", "kdsm_committed_at"] + (list(model.feature_names_) if rescore else [])
    expected = archive_schema(list(model.feature_names_))
    want = pa.schema([expected.field(c) for c in cols])  # the streamer's types: a foreign file's may differ
    tables, total, versions = [], 0, {}
    for f in reversed(files):  # newest first, stop once max_rows are in hand
        try:
            t = open_parquet(f).read(columns=cols).cast(want)
        except (pa.ArrowException, KeyError, OSError) as e:  # a foreign or damaged file is skipped, not fatal
            log.warning({"event": "report_skip_file", "file": str(f), "error": str(e)})
            continue
        for v in t["kdsm_model_version"].to_pylist():
            versions[str(v)] = versions.get(str(v), 0) + 1
        if not rescore:
            t = t.filter(pa.compute.equal(t["kdsm_model_version"], model.version_))
        if t.num_rows:
            tables.append(t)
            total += t.num_rows
        if total >= max_rows:
            break
    if not tables:
        raise ReportError(f"no archived rows scored by model version {model.version_} in the window "
                          f"(versions found: {versions or 'none'}); use --rescore to score the window with this model")
    table = pa.concat_tables(tables[::-1])
    if table.num_rows > max_rows:
        table = table.slice(table.num_rows - max_rows)
    if rescore:
        X = np.column_stack([table[c].to_numpy(zero_copy_only=False) for c in model.feature_names_]).astype(np.float64)
        finite = np.isfinite(X).all(axis=1)
        scores = np.asarray(model.decision_function(X[finite]), dtype=np.float64)
    else:
        scores = table["kdsm_score"].to_numpy(zero_copy_only=False).astype(np.float64)
    scores = scores[np.isfinite(scores)]
    if not len(scores):
        raise ReportError(f"the window's {table.num_rows} archived row(s) have no finite score: nothing to report on")
    ts = table["kdsm_committed_at"]
    return Window(scores=scores, files=len(tables), rows_read=table.num_rows,
                  first=_iso(pa.compute.min(ts).as_py()), last=_iso(pa.compute.max(ts).as_py()),
                  versions=versions, rescored=rescore)


def _iso(v) -> str | None:
    return v.strftime("%Y-%m-%dT%H:%M:%SZ") if v is not None else None


def current_thresholds(settings, model) -> tuple[dict[str, float], str]:
    """Thresholds in force for ``model.version_``: Redis overrides over the artifact's; the artifact's if Redis is down,
    or if the Redis set is out of the artifact's order (written by hand: streamers refuse it, as `show` says)."""
    import redis

    from streamer.lifecycle.control import redis_client
    from streamer.lifecycle.thresholds import (
        ThresholdStore,
        effective_thresholds,
        order_violation,
        order_why,
    )

    r = settings.redis
    try:
        over = ThresholdStore(redis_client(r), r.key_prefix).overrides(model.version_)
    except ThresholdError as e:  # the overrides key holds another Redis type: the streamers use the artifact's too
        log.warning({"event": "report_bad_threshold_key", "error": str(e), "action": "using the artifact's thresholds"})
        return dict(model.thresholds_), "artifact (the overrides key is unusable)"
    except (redis.RedisError, OSError) as e:
        log.warning({"event": "report_redis_unreachable", "error": str(e), "action": "using the artifact's thresholds"})
        return dict(model.thresholds_), "artifact (Redis unreachable)"
    eff = effective_thresholds(model.thresholds_, over)
    bad = order_violation(model.thresholds_, eff)
    if bad is not None:
        why = order_why(eff, bad)
        log.warning({"event": "report_thresholds_refused", "why": why, "action": "using the artifact's thresholds"})
        return dict(model.thresholds_), f"artifact (the Redis set is refused by streamers: {why}; see kdsm thresholds show)"
    return eff, ("redis" if over else "artifact")


@dataclass
class Report:
    version: str
    thresholds_source: str
    window: dict
    thresholds: list[dict] = field(default_factory=list)
    candidates: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what a column means; quantiles the calibration cannot resolve
    png: str | None = None


WOULD_ALERT = ("events of the window at or above the threshold, recomputed from the archived scores: what this "
               "threshold would alert on, not the alerts the streamer sent (those followed the thresholds in force then)")


def expected_rate(cal, t: float) -> float:
    """The calibrated alert rate of threshold ``t``: the fraction of calibration scores at or above it.

    One definition for every table (the window rate is the same count on the window's scores).
    """
    return float(alert_rates(cal.scores, {"t": t})["t"])


def resolvable(cal, q: float) -> bool:
    """Whether ``n`` calibration scores can tell quantile ``q`` apart from the largest score (``(1 - q) * n >= 1``)."""
    return (1 - q) * len(cal.scores) >= 1


def build_report(model, window: Window, thresholds: dict[str, float], source: str) -> Report:
    cal = model.calibration_
    n_cal = len(cal.scores)
    rates = alert_rates(window.scores, thresholds)
    rows = [{"severity": sev, "score": t, "calibration_quantile": round(cal.quantile_of(t), 6),
             "expected_rate": round(expected_rate(cal, t), 6), "window_rate": round(rates[sev], 6),
             "window_alerts": int(round(rates[sev] * len(window.scores))),
             "resolvable": bool(expected_rate(cal, t) > 0)}
            for sev, t in sorted(thresholds.items(), key=lambda kv: kv[1])]
    cands = []
    for q in CANDIDATE_QUANTILES:
        t = cal.threshold_for_quantile(q)
        cands.append({"quantile": q, "score": t, "expected_rate": round(expected_rate(cal, t), 6),
                      "nominal_rate": round(1 - q, 6), "resolvable": resolvable(cal, q),
                      "window_rate": round(alert_rates(window.scores, {"x": t})["x"], 6)})
    s = window.scores
    win = {"rows": int(len(s)), "files": window.files, "first": window.first, "last": window.last,
           "rescored": window.rescored, "versions_in_archive": window.versions,
           "score_p50": float(np.quantile(s, 0.5)), "score_p99": float(np.quantile(s, 0.99)), "score_max": float(s.max())}
    notes = [f"window_alerts: {WOULD_ALERT}"]
    for c in cands:
        if not c["resolvable"]:
            notes.append(f"q={c['quantile']} needs at least {math.ceil(round(1 / (1 - c['quantile']), 6))} calibration scores, the "
                         f"artifact has {n_cal}: its threshold is about the largest calibration score, and its expected "
                         "rate is not a measured one")
    for r in rows:
        if not r["resolvable"]:
            notes.append(f"{r['severity']} ({r['score']:.5g}) is above every calibration score: its expected rate is "
                         f"below 1/{n_cal}, not measurable with this calibration set")
    return Report(version=model.version_, thresholds_source=source, window=win, thresholds=rows, candidates=cands,
                  notes=notes)


def plot(report: Report, scores: np.ndarray, calibration_scores: np.ndarray, out: str | Path) -> Path | str:
    """Top: histogram of the window's scores (and the calibration scores), one line per threshold.
    Bottom: the alert rate any threshold would give on the window, next to the calibrated (expected) rate.
    ``out`` a local file or an object-store URI (uploaded as one object; ``Path`` would make ``s3:/`` a folder)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pos = np.concatenate([scores[scores > 0], calibration_scores[calibration_scores > 0]])
    lo = math.log10(max(float(pos.min()) if len(pos) else 1e-6, 1e-9))
    hi = math.log10(max(float(pos.max()) if len(pos) else 1.0, *(r["score"] for r in report.thresholds)) * 1.05)
    bins = np.logspace(lo, hi, 80)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 8), dpi=110, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    ax.hist(np.clip(scores, bins[0], None), bins=bins, alpha=0.7, color="#4c72b0",
            label=f"archive window ({len(scores)} events)")
    ax.hist(np.clip(calibration_scores, bins[0], None), bins=bins, alpha=0.45, color="#999999",
            weights=np.full(len(calibration_scores), len(scores) / max(len(calibration_scores), 1)),
            label="calibration scores (held out at training, rescaled)")
    colors = {"warning": "#dd8452", "critical": "#c44e52"}
    for i, r in enumerate(report.thresholds):
        c = colors.get(r["severity"], "#55a868")
        for a in (ax, ax2):
            a.axvline(r["score"], color=c, lw=2)
        ax.text(r["score"], 0.97 - 0.17 * i, f" {r['severity']} >= {r['score']:.4g}\n"
                f" window {100 * r['window_rate']:.2f}% alerts\n expected {100 * r['expected_rate']:.2f}%",
                color=c, va="top", fontsize=9, transform=ax.get_xaxis_transform(),
                bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.7)  # single far outliers (count 1) stay visible
    ax.set_ylabel("events")
    w = report.window
    fig.suptitle(f"model {report.version}: {w['first']} .. {w['last']}{' (rescored)' if w['rescored'] else ''}; "
                 f"thresholds from {report.thresholds_source}", fontsize=10)
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, fontsize=9, frameon=False)  # above the bars and labels
    grid = np.logspace(lo, hi, 400)
    ss, cs = np.sort(scores), np.sort(calibration_scores)
    ax2.plot(grid, (len(ss) - np.searchsorted(ss, grid, side="left")) / max(len(ss), 1), color="#4c72b0",
             label="alert rate on the window")
    ax2.plot(grid, (len(cs) - np.searchsorted(cs, grid, side="left")) / max(len(cs), 1), color="#777777", ls="--",
             label="expected rate (calibration)")
    ax2.set_yscale("log")
    ax2.set_ylim(max(0.5 / max(len(ss), 1), 1e-5), 1.05)
    ax2.set_xlabel("threshold = anomaly score (log scale)")
    ax2.set_ylabel("fraction of events alerted")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(loc="lower left", fontsize=9)
    fig.tight_layout()
    if storage.is_remote(out):
        png = io.BytesIO()
        try:
            fig.savefig(png, format="png")
        finally:
            plt.close(fig)
        storage.write_bytes(out, png.getvalue())  # StorageError: one line
        return str(out)
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, format="png")  # the file named, whatever its suffix (matplotlib would append .png to none)
    except OSError as e:
        raise ReportError(f"cannot write --out {out}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return out


def format_table(report: Report) -> str:
    w = report.window
    lines = [f"model {report.version}; window {w['rows']} events from {w['files']} file(s), {w['first']} .. {w['last']}"
             f"{' (rescored)' if w['rescored'] else ''}; thresholds from {report.thresholds_source}",
             f"{'severity':<10} {'threshold':>12} {'cal. quantile':>14} {'expected rate':>14} {'window rate':>12} "
             f"{'would alert':>12}"]
    for r in report.thresholds:
        lines.append(f"{r['severity']:<10} {r['score']:>12.5g} {r['calibration_quantile']:>14.4f} "
                     f"{100 * r['expected_rate']:>13.3f}% {100 * r['window_rate']:>11.3f}% {r['window_alerts']:>12d}")
    lines.append("candidates (kdsm thresholds set --severity S --quantile Q):")
    for c in report.candidates:
        lines.append(f"  q={c['quantile']:<7} threshold {c['score']:>10.5g}  expected {100 * c['expected_rate']:.3f}%"
                     f"  window {100 * c['window_rate']:.3f}%" + ("" if c["resolvable"] else "  (not resolvable, see note)"))
    lines += [f"note: {n}" for n in report.notes]
    if report.png:
        lines.append(f"plot: {report.png}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- CLI (parser: streamer.ops.commands)
def run(a, settings_cls) -> int:
    from offline_train.config import load_settings
    from offline_train.detector import KDSM

    s = load_settings(settings_cls, a.config)
    storage.check_output_file(a.out, "PNG", "thresholds-report.png")
    storage.check_bucket(a.out)  # an object-store --out: its bucket, before the model and the archive are read
    model_dir = a.model or serving_model_dir(s)
    archive_dir = a.archive or s.archive.dir
    if not archive_dir:
        raise ReportError("no archive: pass --archive DIR or set archive.dir in the config")
    model = KDSM.load(model_dir, device="cpu")
    window = read_window(archive_dir, model, hours=a.hours or None, max_rows=a.max_rows, rescore=a.rescore)
    thresholds, source = current_thresholds(s, model)
    report = build_report(model, window, thresholds, source)
    report.png = str(plot(report, window.scores, model.calibration_.scores, a.out))
    if a.json:
        json.dump(asdict(report), sys.stdout, indent=2)
        print()
    else:
        print(format_table(report))
    return 0
