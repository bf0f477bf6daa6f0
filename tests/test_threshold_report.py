"""`kdsm thresholds report`: archive window -> PNG + alert rate per threshold, thresholds from real Redis."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import make_blobs

from offline_train.config import load_settings
from offline_train.detector import KDSM
from streamer.config import Settings
from streamer.lifecycle.archive import ArchiveSink, closed_files
from streamer.lifecycle.config import ArchiveConfig
from streamer.lifecycle.control import connect
from streamer.lifecycle.thresholds import ThresholdStore
from streamer.ops.cli import main
from streamer.ops.threshold_report import alert_rates

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _no_kdsm_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("KDSM_") and "__" in name:
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return KDSM.load(tiny_model_dir, device="cpu")


def _batch(model, X, offset0, version=None):
    scores = model.decision_function(X)
    n = len(X)
    return SimpleNamespace(topics=["events"] * n, partitions=np.zeros(n, np.int32),
                           offsets=np.arange(offset0, offset0 + n, dtype=np.int64),
                           timestamps_ms=np.full(n, 1_700_000_000_000, np.int64),
                           event_ids=[f"e{offset0 + i}" for i in range(n)], event_ts=[None] * n, X=X, scores=scores,
                           severities=model.severity(scores), model_version=version or model.version_,
                           schema_hash=model.schema_hash_, feature_names=list(model.feature_names_),
                           thresholds=model.thresholds_, n_dead_letters=0, committed_at=None)


def _archive(tmp_path, model, parts, version=None):
    """Writes real archive files through the streamer's ArchiveSink (one closed file per part)."""
    root = tmp_path / "archive"
    sink = ArchiveSink(ArchiveConfig(dir=str(root), fsync=False), background=False)
    off = 0
    for X in parts:
        sink.on_committed(_batch(model, X, off, version))
        sink.flush()
        off += len(X)
    sink.close()
    return root


def _config(tmp_path, redis_url, prefix):
    f = tmp_path / "c.yaml"
    f.write_text(f"redis:\n  url: {redis_url}\n  key_prefix: '{prefix}'\n")
    return f


def _window(tmp_path, model):
    X, out = make_blobs(n=900, n_out=40, seed=7)
    return X, out, [X[:500], np.vstack([X[500:], out])]


def test_report_rates_match_the_archive_and_follow_a_redis_override(tmp_path, model, tiny_model_dir, redis_url, unique, capsys):
    X, out, parts = _window(tmp_path, model)
    root = _archive(tmp_path, model, parts)
    cfg = _config(tmp_path, redis_url, f"kdsm-rep-{unique}:")
    png = tmp_path / "report.png"
    argv = ["thresholds", "report", "--model", str(tiny_model_dir), "--archive", str(root), "--config", str(cfg),
            "--out", str(png), "--json"]
    assert main(argv) == 0
    rep = json.loads(capsys.readouterr().out)
    # independent recomputation from the Parquet files
    stored = np.concatenate([pq.read_table(f, columns=["kdsm_score"])["kdsm_score"].to_numpy() for f in closed_files(root)])
    assert rep["window"]["rows"] == len(stored) == len(X) + len(out)
    rows = {r["severity"]: r for r in rep["thresholds"]}
    assert rep["thresholds_source"] == "artifact"
    for sev, t in model.thresholds_.items():
        assert rows[sev]["score"] == pytest.approx(t)
        assert rows[sev]["window_rate"] == pytest.approx(np.mean(stored >= t), abs=1e-6)
    # the planted outliers push the window's rate above the calibrated 1% at warning
    assert rows["warning"]["window_rate"] > rows["warning"]["expected_rate"]
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000
    # an ops override in Redis is what the report shows next
    new_t = float(np.quantile(stored, 0.5))
    store = ThresholdStore(connect(redis_url), f"kdsm-rep-{unique}:")
    store.set(model.version_, "warning", new_t, None, "test", model.thresholds_["warning"])
    assert main(argv) == 0
    rep2 = json.loads(capsys.readouterr().out)
    rows2 = {r["severity"]: r for r in rep2["thresholds"]}
    assert rep2["thresholds_source"] == "redis"
    assert rows2["warning"]["score"] == pytest.approx(new_t)
    assert rows2["warning"]["window_rate"] == pytest.approx(np.mean(stored >= new_t), abs=1e-6)
    assert rows2["critical"]["score"] == pytest.approx(model.thresholds_["critical"])
    # candidates come from the artifact's calibration scores
    cands = {c["quantile"]: c for c in rep2["candidates"]}
    assert cands[0.99]["score"] == pytest.approx(model.calibration_.threshold_for_quantile(0.99))


def test_a_redis_set_streamers_refuse_is_not_reported_as_in_force(tmp_path, model, tiny_model_dir, redis_url, unique,
                                                                   capsys):
    """A warning written by hand above critical: streamers refuse the set (`thresholds show` says refused), so the
    report shows the artifact's thresholds as in force and says the Redis set is refused."""
    _, _, parts = _window(tmp_path, model)
    root = _archive(tmp_path, model, parts)
    prefix = f"kdsm-rep-{unique}:"
    cfg = _config(tmp_path, redis_url, prefix)
    store = ThresholdStore(connect(redis_url), prefix)
    above = model.thresholds_["critical"] * 2
    store.set(model.version_, "warning", above, None, "by hand", model.thresholds_["warning"])  # no order check here
    argv = ["thresholds", "report", "--model", str(tiny_model_dir), "--archive", str(root), "--config", str(cfg),
            "--out", str(tmp_path / "r.png"), "--json"]
    assert main(argv) == 0
    rep = json.loads(capsys.readouterr().out)
    rows = {r["severity"]: r for r in rep["thresholds"]}
    assert rows["warning"]["score"] == pytest.approx(model.thresholds_["warning"])
    assert rep["thresholds_source"].startswith("artifact (the Redis set is refused by streamers: critical")
    assert main(["thresholds", "show", "--model", str(tiny_model_dir), "--config", str(cfg)]) == 0
    assert "refused" in json.loads(capsys.readouterr().out)  # what `show` says of the same set


def test_table_output_and_redis_down_falls_back_to_the_artifact(tmp_path, model, tiny_model_dir, capsys):
    from streamer.dev.local_services import free_port

    _, _, parts = _window(tmp_path, model)
    root = _archive(tmp_path, model, parts)
    cfg = _config(tmp_path, f"redis://127.0.0.1:{free_port()}/0", "kdsm:")
    png = tmp_path / "r.png"
    assert main(["thresholds", "report", "--model", str(tiny_model_dir), "--archive", str(root), "--config", str(cfg),
                 "--out", str(png)]) == 0
    text = capsys.readouterr().out
    assert "thresholds from artifact (Redis unreachable)" in text
    assert "warning" in text and "critical" in text and f"plot: {png}" in text and png.exists()


def test_other_versions_are_excluded_unless_rescored(tmp_path, model, tiny_model_dir, redis_url, unique, capsys):
    X, out, parts = _window(tmp_path, model)
    root = _archive(tmp_path, model, parts, version="some-older-version")
    cfg = _config(tmp_path, redis_url, f"kdsm-rep-{unique}:")
    base = ["thresholds", "report", "--model", str(tiny_model_dir), "--archive", str(root), "--config", str(cfg),
            "--out", str(tmp_path / "x.png"), "--json"]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "no archived rows scored by model version" in err and "--rescore" in err and "some-older-version" in err
    assert main(base + ["--rescore"]) == 0
    rep = json.loads(capsys.readouterr().out)
    scores = model.decision_function(np.vstack([X, out]))
    t = model.thresholds_["warning"]
    assert rep["window"]["rescored"] and rep["window"]["rows"] == len(scores)
    w = {r["severity"]: r for r in rep["thresholds"]}["warning"]
    assert w["window_rate"] == pytest.approx(np.mean(scores >= t), abs=1e-6)


def test_max_rows_keeps_the_newest(tmp_path, model, tiny_model_dir, redis_url, unique, capsys):
    X, out, parts = _window(tmp_path, model)
    root = _archive(tmp_path, model, parts)  # newest file = X[500:] + outliers
    cfg = _config(tmp_path, redis_url, f"kdsm-rep-{unique}:")
    n = len(parts[1])
    assert main(["thresholds", "report", "--model", str(tiny_model_dir), "--archive", str(root), "--config", str(cfg),
                 "--out", str(tmp_path / "x.png"), "--json", "--max-rows", str(n)]) == 0
    rep = json.loads(capsys.readouterr().out)
    newest = model.decision_function(parts[1])
    assert rep["window"]["rows"] == n
    assert rep["window"]["score_max"] == pytest.approx(newest.max(), rel=1e-5)


def test_empty_or_missing_archive_is_a_user_error(tmp_path, tiny_model_dir, capsys):
    (tmp_path / "empty").mkdir()
    for d in ("empty", "missing"):
        assert main(["thresholds", "report", "--model", str(tiny_model_dir), "--archive", str(tmp_path / d),
                     "--out", str(tmp_path / "x.png")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("kdsm thresholds: error:") and "Traceback" not in err


@pytest.mark.parametrize("argv,says", [
    (["thresholds", "report", "--max-rows", "0"], "expected a positive integer"),
    (["thresholds", "report", "--max-rows", "-5"], "expected a positive integer"),
    (["thresholds", "report", "--hours", "-1"], "expected a number >= 0"),  # 0 = every closed file; below is nothing
    (["thresholds", "report", "--hours", "nan"], "expected a number >= 0"),
    (["stream", "--max-events", "0"], "expected a positive integer"),  # 0 stopped the stream after its first poll
])
def test_counts_and_windows_that_cannot_run_are_one_usage_line(argv, says, capsys):
    """--max-rows 0 sliced the window empty and died in np.quantile with an IndexError traceback."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and "Traceback" not in err


def test_out_must_name_a_file_that_can_be_written(tmp_path, model, tiny_model_dir, capsys):
    """--out DIR printed a path that was never written (matplotlib wrote DIR.png); --out FILE/x.png raised
    FileExistsError. Both are one line now, before the model or the archive is read."""
    from streamer.dev.local_services import free_port

    _, _, parts = _window(tmp_path, model)
    root = _archive(tmp_path, model, parts)
    cfg = _config(tmp_path, f"redis://127.0.0.1:{free_port()}/0", "kdsm:")  # Redis down: the artifact's thresholds
    base = ["thresholds", "report", "--model", str(tiny_model_dir), "--archive", str(root), "--config", str(cfg)]
    outdir = tmp_path / "plots"
    outdir.mkdir()
    afile = tmp_path / "file.png"
    afile.write_bytes(b"x")
    for out, message in ((outdir, f"--out {outdir} is a directory: name the PNG file"),
                         (afile / "x.png", f"--out {afile / 'x.png'}: {afile} is a file, not a directory")):
        assert main([*base, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"kdsm thresholds: error: {message}") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".png") == ["file.png"]  # no plots.png
    # a name without a suffix is the file written, as printed
    assert main([*base, "--out", str(tmp_path / "report")]) == 0
    assert f"plot: {tmp_path / 'report'}" in capsys.readouterr().out
    assert (tmp_path / "report").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.integration
def test_out_may_be_an_object_store_uri(s3_root, tmp_path, model, tiny_model_dir, capsys, monkeypatch):
    """--out s3://kdsm/r.png exited 0, printed "plot: s3:/kdsm/r.png" and wrote a local folder named s3:."""
    from offline_train import storage
    from streamer.dev.local_services import free_port

    monkeypatch.chdir(tmp_path)
    _, _, parts = _window(tmp_path, model)
    root = _archive(tmp_path, model, parts)
    cfg = _config(tmp_path, f"redis://127.0.0.1:{free_port()}/0", "kdsm:")
    base = ["thresholds", "report", "--model", str(tiny_model_dir), "--archive", str(root), "--config", str(cfg)]
    out = f"{s3_root}/reports/r.png"
    assert main([*base, "--out", out]) == 0
    assert f"plot: {out}\n" in capsys.readouterr().out
    assert storage.read_bytes(out)[:8] == PNG_MAGIC
    assert not (tmp_path / "s3:").exists()
    # a bucket that does not exist: one line, before the model or the archive is read
    assert main([*base, "--model", str(tmp_path / "no-model"), "--out", "s3://no-such-bucket-kdsm/r.png"]) == 2
    err = capsys.readouterr().err
    assert "bucket 'no-such-bucket-kdsm' does not exist" in err and err.count("\n") == 1, err


def test_a_window_without_a_finite_score_is_one_line(tmp_path, model, tiny_model_dir, capsys):
    root = tmp_path / "archive"
    sink = ArchiveSink(ArchiveConfig(dir=str(root), fsync=False), background=False)
    b = _batch(model, make_blobs(n=200, n_out=0, seed=3)[0], 0)
    b.scores = np.full(len(b.scores), np.nan)
    sink.on_committed(b)
    sink.flush()
    sink.close()
    assert main(["thresholds", "report", "--model", str(tiny_model_dir), "--archive", str(root),
                 "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err == "kdsm thresholds: error: the window's 200 archived row(s) have no finite score: nothing to report on\n"


def test_alert_rates_edges():
    s = np.array([1.0, 2.0, 2.0, 3.0])
    assert alert_rates(s, {"a": 2.0, "b": 3.5, "c": 0.0}) == {"a": 0.75, "b": 0.0, "c": 1.0}


def test_default_model_is_the_registry_current_version(tmp_path, model, tiny_model_dir, redis_url, unique, capsys):
    from streamer.lifecycle.registry import ModelRegistry

    _, _, parts = _window(tmp_path, model)
    root = _archive(tmp_path, model, parts)
    prefix = f"kdsm-rep-{unique}:"
    cfg = tmp_path / "reg.yaml"
    cfg.write_text(f"redis:\n  url: {redis_url}\n  key_prefix: '{prefix}'\n"
                   f"registry:\n  enabled: true\n  store_dir: {tmp_path / 'store'}\n"
                   f"archive:\n  dir: {root}\n")
    argv = ["thresholds", "report", "--config", str(cfg), "--out", str(tmp_path / "x.png"), "--json"]
    assert main(argv) == 2  # registry empty and no stream.model
    assert "no model" in capsys.readouterr().err
    reg = ModelRegistry.from_settings(load_settings(Settings, cfg))
    version = reg.add(tiny_model_dir)
    reg.promote(version, reason="test", force=True)
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["version"] == version == model.version_


def test_one_expected_rate_per_threshold_and_unresolvable_quantiles_are_flagged():
    """The same threshold showed two "expected" rates (1 - q in one table, the calibration count in the other)."""
    from offline_train.calibrate import Calibration
    from streamer.ops.threshold_report import Window, build_report, format_table

    rng = np.random.default_rng(0)
    cal = Calibration.fit(rng.gamma(2.0, 1.0, 500), {"warning": 0.99, "critical": 0.999})
    model = SimpleNamespace(version_="v-test", calibration_=cal)
    window = Window(scores=rng.gamma(2.0, 1.0, 4000), files=1, rows_read=4000, first=None, last=None,
                    versions={"v-test": 4000}, rescored=False)
    rep = build_report(model, window, dict(cal.thresholds), "artifact")
    rows = {r["severity"]: r for r in rep.thresholds}
    cands = {c["quantile"]: c for c in rep.candidates}
    assert cands[0.99]["score"] == pytest.approx(rows["warning"]["score"])
    assert cands[0.99]["expected_rate"] == rows["warning"]["expected_rate"]  # one rate for one threshold
    assert cands[0.99]["expected_rate"] == pytest.approx(np.mean(cal.scores >= cal.thresholds["warning"]))
    assert cands[0.99]["nominal_rate"] == pytest.approx(0.01)
    # 500 calibration scores resolve 1 - q >= 1/500 only
    assert cands[0.99]["resolvable"] and cands[0.995]["resolvable"]
    assert not cands[0.999]["resolvable"] and not cands[0.9999]["resolvable"]
    text = format_table(rep)
    assert "q=0.9999 needs at least 10000 calibration scores, the artifact has 500" in text
    assert "would alert" in text and "not the alerts the streamer sent" in text


def test_foreign_archive_files_of_other_types_are_read_as_the_streamer_types_or_skipped(tmp_path, model,
                                                                                       tiny_model_dir, capsys):
    """Files in the archive folder that the streamer did not write, with other column types: a version stored as an
    integer, a commit time as text, a feature as non-numeric text. Each was a traceback (ArrowNotImplementedError,
    AttributeError in strftime, ValueError at rescoring); now a file castable to the streamer's types is read, any
    other is skipped with one JSON log line, and the report runs on the rest."""
    import pyarrow as pa

    _, _, parts = _window(tmp_path, model)
    root = _archive(tmp_path, model, parts)
    good = pq.read_table(closed_files(root)[0])
    day = next(root.glob("date=*"))
    n = 50
    # Castable: the commit time as ISO text and the score as text of numbers.
    castable = good.slice(0, n).set_column(good.schema.get_field_index("kdsm_committed_at"), "kdsm_committed_at",
                                            pa.array(["2026-12-01T00:00:00Z"] * n))
    pq.write_table(castable, day / "part-zz-castable.parquet")
    # Not castable: the model version as an integer list and a feature as words.
    f0 = model.feature_names_[0]
    broken = good.slice(0, n).set_column(good.schema.get_field_index(f0), f0, pa.array(["high"] * n))
    broken = broken.set_column(broken.schema.get_field_index("kdsm_model_version"), "kdsm_model_version",
                               pa.array([[1]] * n))
    pq.write_table(broken, day / "part-zz-broken.parquet")
    for rescore in ([], ["--rescore"]):
        assert main(["thresholds", "report", "--model", str(tiny_model_dir), "--archive", str(root), "--json",
                     "--hours", "0", "--out", str(tmp_path / "r.png"), *rescore]) == 0
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        logged = [json.loads(line) for line in err.splitlines()]  # Redis is not running here: its line too
        skipped = [e for e in logged if e["event"] == "report_skip_file"]
        assert len(skipped) == 1 and "broken" in skipped[0]["file"], logged
        assert json.loads(out)["window"]["rows"] == sum(len(p) for p in parts) + n
