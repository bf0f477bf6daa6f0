"""`kdsm train` / `kdsm score` end to end on small Parquet files, and their clear errors."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_blobs

from offline_train.data import write_parquet
from offline_train.detector import KDSM
from streamer.ops.cli import main


@pytest.fixture
def small_parquet(tmp_path):
    X, out = make_blobs(n=500, n_out=15, seed=2)
    rows = np.vstack([X, out])
    y = np.r_[np.zeros(len(X)), np.ones(len(out))].astype(int)
    path = write_parquet(tmp_path / "events.parquet", rows, [f"f{j}" for j in range(rows.shape[1])], y=y,
                         ids=np.arange(len(rows)))
    return path


@pytest.fixture
def tiny_config(tmp_path):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("model:\n  width: 32\n  depth: 1\ntrain:\n  steps: 60\n")
    return cfg


def test_train_then_score_end_to_end(small_parquet, tiny_config, tmp_path, capsys):
    out = tmp_path / "model"
    assert main(["train", "--data", str(small_parquet), "--out", str(out), "--config", str(tiny_config),
                 "--seed", "1", "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["labels"]["auc_pr"] > 0.5  # planted outliers are far away
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["labels"]["n"] == 515 and report["train"]["steps"] == 60
    assert report["train"]["ema"] is True  # the offline job defaults to K-DSM-EMA
    for name in ("sigmas.png", "loss.png", "calibration.png"):
        assert (out / "report" / name).stat().st_size > 1000
    assert KDSM.load(out).feature_names_ == [f"f{j}" for j in range(6)]  # id and label excluded

    scored = tmp_path / "scored.parquet"
    assert main(["score", "--model", str(out), "--data", str(small_parquet), "--out", str(scored)]) == 0
    t = pq.read_table(scored)
    assert t.num_rows == 515
    assert {"id", "label", "score", "p_value", "severity"} <= set(t.column_names)
    # The default's blend: each part, and the part the score equals (a far row led by the k-NN part or the forest).
    assert {"score_network", "score_isolation", "score_knn", "leading_part"} <= set(t.column_names)
    assert set(t.column("leading_part").to_pylist()) <= {"network", "isolation", "knn"}
    sev = np.array(t.column("severity").to_pylist())
    score = np.array(t.column("score").to_pylist())
    # A 60-step model ranks the planted outliers on top. The training history holds them too (3%), so the
    # warning threshold (q0.99 of a held-out fifth of it) falls among them: about half alert.
    assert (score[-15:] > np.quantile(score[:-15], 0.99)).mean() >= 0.8
    assert (sev[-15:] != "").mean() >= 0.4 and (sev[:-15] != "").mean() <= 0.02


def test_rows_with_missing_values_are_skipped_and_counted(tmp_path, tiny_config):
    X, _ = make_blobs(n=300, seed=4)
    X[::10, 1] = np.nan
    X[5, 2] = np.inf
    path = write_parquet(tmp_path / "holes.parquet", X, [f"f{j}" for j in range(X.shape[1])])
    out = tmp_path / "m"
    assert main(["train", "--data", str(path), "--out", str(out), "--config", str(tiny_config), "--quiet"]) == 0
    data = json.loads((out / "report" / "report.json").read_text())["data"]
    assert data["rows_read"] == 300 and data["rows_skipped"] == 31


def test_skipped_rows_are_reported_and_bounded(tmp_path, tiny_config, capsys, monkeypatch):
    """NaN in half the rows used to train silently on the other half (exit 0): now it is said, and bounded."""
    X, _ = make_blobs(n=300, seed=5)
    X[::2, 0] = np.nan
    path = write_parquet(tmp_path / "half.parquet", X, [f"f{j}" for j in range(X.shape[1])])
    out = tmp_path / "m"
    assert main(["train", "--data", str(path), "--out", str(out), "--config", str(tiny_config), "--quiet"]) == 2
    cap = capsys.readouterr()
    assert "150 of 300 rows (50.0%)" in cap.err and "data.max_skipped_fraction = 0.25" in cap.err
    assert "Traceback" not in cap.err and "trained:" not in cap.out and not out.exists()  # failed before training
    monkeypatch.setenv("KDSM_DATA__MAX_SKIPPED_FRACTION", "0.6")
    assert main(["train", "--data", str(path), "--out", str(out), "--config", str(tiny_config), "--quiet"]) == 0
    cap = capsys.readouterr()
    assert "skipped 150 of 300 rows (50.0%)" in cap.out and "non-finite" in cap.out
    assert json.loads(cap.out.strip().splitlines()[-1])["rows_skipped"] == 150


@pytest.mark.parametrize("labels, line", [
    ([None, 0] * 100, "AUC-PR"),  # half the rows unlabelled: not "skipped" rows, just left out of the metrics
    (["a", "b"] * 100, "label column label holds string, not numbers 0 and 1"),
    ([0, 1, 2, 0] * 50, "label column label holds values other than 0 and 1 (2)"),
])
def test_labels_the_report_cannot_use_never_fail_training(tmp_path, capsys, monkeypatch, labels, line):
    X, _ = make_blobs(n=200, d=3, seed=6)
    if line == "AUC-PR":
        labels = [None if lab is None else int(i % 20 == 1) for i, lab in enumerate(labels)]
    pq.write_table(pa.table({**{f"f{j}": X[:, j] for j in range(3)}, "label": labels}), tmp_path / "l.parquet")
    monkeypatch.setenv("KDSM_DATA__MAX_TRAIN_ROWS", "60")
    out = tmp_path / "m"
    assert main(["train", "--data", str(tmp_path / "l.parquet"), "--out", str(out), "--steps", "5", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert line in printed and (out / "weights.safetensors").exists()
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["data"]["rows_skipped"] == 0
    if line == "AUC-PR":  # the 100 labelled rows, sampled down to data.max_train_rows, and said to be in-sample
        assert report["labels"]["n"] == 60 and "in-sample" in printed and "a seeded sample of 60 of 100" in printed
    else:
        assert report["labels"] is None


@pytest.mark.parametrize("later", [["yes", "no"] * 50, [[0], [1]] * 50], ids=["strings", "lists"])
def test_a_label_a_later_file_cannot_read_never_loses_the_model(tmp_path, capsys, later):
    """The first file's labels are numbers, the second's strings or lists: reading them after training failed the job
    (a one-line error for strings, a traceback for lists) and the trained model was not saved."""
    X, _ = make_blobs(n=200, d=3, seed=6)
    data = tmp_path / "d"
    data.mkdir()
    for i, labels in enumerate([[0, 1] * 50, later]):
        pq.write_table(pa.table({**{f"f{j}": X[i * 100:(i + 1) * 100, j] for j in range(3)}, "label": labels}),
                       data / f"p{i}.parquet")
    out = tmp_path / "m"
    assert main(["train", "--data", str(data), "--out", str(out), "--steps", "5", "--quiet"]) == 0
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err
    line = next(x for x in cap.out.splitlines() if x.startswith("labels:"))
    assert "cannot read Parquet data" in line and line.endswith("the report has no label metrics")
    assert json.loads((out / "report" / "report.json").read_text())["labels"] is None
    assert KDSM.load(out).feature_names_ == ["f0", "f1", "f2"]


def test_directory_and_glob_inputs(small_parquet, tiny_config, tmp_path):
    for spec in (str(small_parquet.parent), str(small_parquet.parent / "*.parquet")):
        assert main(["train", "--data", spec, "--out", str(tmp_path / "m"), "--config", str(tiny_config),
                     "--quiet", "--features", "f0", "f1", "f2", "--force"]) == 0  # the second replaces the first
        assert KDSM.load(tmp_path / "m").feature_names_ == ["f0", "f1", "f2"]


def _err(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_clear_errors_without_traceback(small_parquet, tiny_config, tmp_path, capsys):
    def train(*extra, data=str(small_parquet), config=str(tiny_config)):
        return main(["train", "--data", data, "--out", str(tmp_path / "m"), "--config", config, "--quiet", *extra])

    assert train(data=str(tmp_path / "missing.parquet")) == 2
    assert "no such file" in _err(capsys)

    ids_only = tmp_path / "ids.parquet"  # strings with a distinct value per row are identifiers, not categories
    pq.write_table(pa.table({"name": [f"n{i}" for i in range(1500)], "blob": pa.array([b"x"] * 1500)}), ids_only)
    assert train(data=str(ids_only)) == 2
    assert "no usable feature columns" in _err(capsys)

    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"f0": pa.array([], pa.float64())}), empty)
    assert train(data=str(empty)) == 2
    assert "rows" in _err(capsys)

    one_row = tmp_path / "one.parquet"  # its one row falls in calibration's hold-out: the message says where it went
    pq.write_table(pa.table({"f0": [0.5], "f1": [1.5]}), one_row)
    assert train(data=str(one_row)) == 2
    assert "0 of 1 read (0 with missing or non-finite features, 1 held out for calibration)" in _err(capsys)

    assert train("--features", "f0", "nope") == 2
    assert "unknown feature column(s): nope" in _err(capsys)

    bad_cfg = tmp_path / "bad.yaml"
    bad_cfg.write_text("train:\n  stepz: 10\n")
    assert train(config=str(bad_cfg)) == 2
    assert "train.stepz: unknown key" in _err(capsys)

    not_parquet = tmp_path / "junk.parquet"
    not_parquet.write_bytes(b"this is not parquet")
    assert train(data=str(not_parquet)) == 2
    assert "Parquet" in _err(capsys)

    assert main(["score", "--model", str(tmp_path / "nomodel"), "--data", str(small_parquet),
                 "--out", str(tmp_path / "s.parquet")]) == 2
    assert "no model artifact" in _err(capsys)


def test_config_errors_are_one_line(small_parquet, tmp_path, capsys):
    """The README promises one line; the message was "invalid configuration in F:" and then a line per bad key."""
    cfg = tmp_path / "unk.yaml"
    cfg.write_text("train:\n  stpes: 5\n")
    assert main(["train", "--data", str(small_parquet), "--out", str(tmp_path / "m"), "--config", str(cfg)]) == 2
    err = _err(capsys)
    assert err == f"kdsm train: error: invalid configuration in {cfg}: train.stpes: unknown key\n"
    cfg.write_text("train:\n  stpes: 5\nsigma:\n  base: -1\n")
    assert main(["train", "--data", str(small_parquet), "--out", str(tmp_path / "m"), "--config", str(cfg)]) == 2
    err = _err(capsys)
    assert err.count("\n") == 1 and ("train.stpes: unknown key; " in err or "; train.stpes: unknown key" in err)
    assert "sigma.base: " in err and not (tmp_path / "m").exists()


def test_score_refuses_unreadable_data_and_outputs_in_one_line(small_parquet, tiny_config, tmp_path, capsys):
    model = tmp_path / "m"
    assert main(["train", "--data", str(small_parquet), "--out", str(model), "--config", str(tiny_config),
                 "--quiet"]) == 0
    capsys.readouterr()
    names = [f"f{j}" for j in range(6)]

    def score(table_or_bytes, out=None) -> str:
        data = tmp_path / "in.parquet"
        if isinstance(table_or_bytes, bytes):
            data.write_bytes(table_or_bytes)
        else:
            pq.write_table(table_or_bytes, data)
        assert main(["score", "--model", str(model), "--data", str(data),
                     "--out", str(out or tmp_path / "s.parquet")]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        return err

    good = pa.table({n: np.linspace(0, 1, 50) for n in names})
    # A column of another type: the whole file is refused, naming it (it raised ArrowInvalid while casting).
    assert "f0 (string)" in score(good.set_column(0, "f0", pa.array(["x"] * 50)))
    assert "f1 (list<" in score(good.set_column(1, "f1", pa.array([[1.0]] * 50)))
    # A damaged page header behind an intact footer: Arrow's two-line thrift error, in one line.
    pq.write_table(good, tmp_path / "good.parquet")
    damaged = bytearray((tmp_path / "good.parquet").read_bytes())
    damaged[4:24] = b"\xff" * 20
    assert "cannot read Parquet data" in score(bytes(damaged))
    # Outputs that cannot be written, checked before scoring.
    assert "is a directory" in score(good, out=tmp_path)
    (tmp_path / "a_file").write_text("")
    assert "cannot write" in score(good, out=tmp_path / "a_file" / "s.parquet")


@pytest.mark.parametrize("option,value", [("--seed", "-1"), ("--seed", "4294967296"), ("--steps", "0"),
                                          ("--steps", "-3")])
def test_train_refuses_a_seed_or_step_count_that_cannot_run(small_parquet, tmp_path, capsys, option, value):
    """A negative seed was a pydantic traceback (numpy refuses it); --steps 0 was silently the profile's budget."""
    with pytest.raises(SystemExit) as e:
        main(["train", "--data", str(small_parquet), "--out", str(tmp_path / "m"), f"{option}={value}"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"argument {option}: expected" in err and "Traceback" not in err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("env,argv,says", [
    ({}, ["--steps", "10000000000"], "kdsm train: error: invalid value for steps: Input should be less than or equal to"),
    ({"KDSM_TRAIN__THREADS": "9999"}, [], "train.threads: Input should be less than or equal to 1024"),
])
def test_train_refuses_a_budget_or_thread_count_no_machine_runs(small_parquet, tmp_path, capsys, monkeypatch, env,
                                                                argv, says):
    """--steps 10**20 was a pydantic traceback, 10**12 trained for ever; 9999 threads were handed to torch."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code = main(["train", "--data", str(small_parquet), "--out", str(tmp_path / "m"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err, err
    assert not (tmp_path / "m").exists()


def test_every_subcommand_has_help(capsys):
    from streamer.ops.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in sub.choices:
        with pytest.raises(SystemExit) as e:
            main([name, "--help"])
        assert e.value.code == 0
        assert "usage: kdsm" in capsys.readouterr().out


def test_train_shows_its_phases_when_not_on_a_tty(small_parquet, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  width: 32\n  depth: 1\ntrain:\n  steps: 200\n")
    assert main(["train", "--data", str(small_parquet), "--out", str(tmp_path / "m"), "--config", str(cfg)]) == 0
    lines = capsys.readouterr().out.splitlines()
    order = ["reading: pass 1 of 5", "sigma passes", "sampling:", "training: 200 steps", "calibrating:", "trained:", "refined:"]
    found = [next(i for i, line in enumerate(lines) if line.startswith(p)) for p in order]
    assert found == sorted(found)
    steps = [line for line in lines if line.startswith("training: step ")]
    assert 2 <= len(steps) <= 10 and steps[-1].startswith("training: step 200/200 (100%)")


def test_method_trains_a_published_method_by_name(small_parquet, tiny_config, tmp_path, capsys):
    """``--method kdsm`` (history known to be clean) learns every row and scores with the network alone; the default
    refines, blends and says how to train on clean history; ``--method dsm-ema`` has one sigma and the teacher."""
    out = {m: tmp_path / m for m in ("default", "kdsm", "dsm-ema")}
    logs = {}
    for method, path in out.items():
        assert main(["train", "--data", str(small_parquet), "--out", str(path), "--config", str(tiny_config),
                     "--method", method]) == 0
        logs[method] = capsys.readouterr().out
    default, kdsm, dsm_ema = (KDSM.load(out[m], device="cpu") for m in out)
    assert default.blend_ is not None and default.neighbours_ is not None and default.train_summary_.refine
    assert "refined:" in logs["default"] and "--method kdsm" in logs["default"]
    assert kdsm.blend_ is None and kdsm.neighbours_ is None and not kdsm.train_summary_.refine
    assert kdsm.train_summary_.filtered_fraction is None and "refined:" not in logs["kdsm"]
    assert len(set(kdsm.sigmas_.round(6))) > 1  # kurtosis sigmas, one per feature
    assert dsm_ema.blend_ is None and not dsm_ema.train_summary_.refine
    assert dsm_ema.train_summary_.filtered_fraction is not None and len(set(dsm_ema.sigmas_.round(6))) == 1
    # The same settings as the bench's method of that name (one code path) and as configs/clean-history.yaml.
    from offline_train.config import load_settings
    from offline_train.evaluation.methods import make_kdsm
    from streamer.config import Settings

    clean = load_settings(Settings, Path(__file__).resolve().parents[1] / "configs" / "clean-history.yaml")
    trained = {k: v for k, v in kdsm.get_params().items() if k in ("sigma", "ema", "refine", "score")}
    assert trained == {k: v for k, v in make_kdsm("kdsm", Settings(), seed=0).get_params().items() if k in trained}
    assert trained == {k: getattr(clean, k) for k in trained}


def _score_refused(capsys, model, data, out) -> str:
    """``kdsm score`` exits 2 with one line on stderr and no traceback; that line."""
    assert main(["score", "--model", str(model), "--data", str(data), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_score_refuses_an_out_that_is_its_own_input(tiny_model_dir, tmp_path, capsys):
    """--out equal to the --data file (or under the --data directory) exited 0 and overwrote the data it read."""
    names = [f"f{j}" for j in range(6)]
    data = tmp_path / "in" / "in.parquet"
    data.parent.mkdir()
    pq.write_table(pa.table({n: np.linspace(0, 1, 50) for n in names}), data)
    before = data.read_bytes()
    assert "is one of the input files" in _score_refused(capsys, tiny_model_dir, data, data)
    # The same file spelt another way, or matched by a glob, or anything under the --data directory.
    assert "is one of the input files" in _score_refused(capsys, tiny_model_dir, data, data.parent / ".." / "in" / "in.parquet")
    assert "is one of the input files" in _score_refused(capsys, tiny_model_dir, tmp_path / "in" / "*.parquet", data)
    assert "the --data directory" in _score_refused(capsys, tiny_model_dir, data.parent, data.parent / "s" / "x.parquet")
    assert data.read_bytes() == before and sorted(p.name for p in data.parent.iterdir()) == ["in.parquet"]


def test_score_refuses_an_out_inside_the_model_directory(tiny_model_dir, small_parquet, tmp_path, capsys):
    """--out m/weights.safetensors exited 0 and wrote Parquet over the weights (checksum mismatch on the next load)."""
    import shutil

    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "m"))  # a copy: the session's model is shared
    for out in (model / "weights.safetensors", model / "report" / "scored.parquet"):
        assert "inside the model directory" in _score_refused(capsys, model, small_parquet, out)
    assert not (model / "report").exists()
    assert KDSM.load(model).feature_names_ == [f"f{j}" for j in range(6)]


def test_score_writes_every_row_when_a_row_group_has_no_scorable_row(tiny_model_dir, tmp_path, capsys):
    """A second row group with f0 all null made a batch of null-typed columns (leading_part: null vs. string): a
    ValueError traceback, and --out cut short to the first batch's rows."""
    names = [f"f{j}" for j in range(6)]
    first = pa.table({"id": np.arange(40), **{n: np.linspace(0, 1, 40) for n in names}})
    second = pa.table({"id": np.arange(40, 70), **{n: np.linspace(0, 1, 30) for n in names}})
    second = second.set_column(1, "f0", pa.nulls(30, pa.float64()))
    data = tmp_path / "twogroups.parquet"
    with pq.ParquetWriter(data, first.schema) as w:
        w.write_table(first)
        w.write_table(second)
    assert pq.ParquetFile(data).metadata.num_row_groups == 2
    out = tmp_path / "tg.parquet"
    assert main(["score", "--model", str(tiny_model_dir), "--data", str(data), "--out", str(out)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    t = pq.read_table(out)
    assert t.column("id").to_pylist() == list(range(70))
    assert t.schema.field("leading_part").type == pa.string()
    for name in ("score", "p_value", "score_network", "score_isolation", "score_knn", "leading_part"):
        assert t.column(name).slice(0, 40).null_count == 0 and t.column(name).slice(40).null_count == 30, name
    assert t.column("severity").to_pylist()[40:] == ["invalid"] * 30
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tg.parquet", "twogroups.parquet"]  # no temp file left


def test_score_failing_midway_leaves_the_old_out_untouched(tiny_model_dir, small_parquet, tmp_path, monkeypatch):
    """--out was written in place: a failure after the first batch left it holding that batch alone."""
    from offline_train import job
    from offline_train.data import DataError

    out = tmp_path / "scored.parquet"
    out.write_bytes(b"the previous run's scores")
    real, calls = job._next_batch, []

    def fail_second(batches):
        calls.append(1)
        if len(calls) == 2:
            raise DataError("cannot read Parquet data: provoked")
        return real(batches)

    monkeypatch.setattr(job, "_next_batch", fail_second)
    with pytest.raises(DataError, match="provoked"):
        job.score_job(tiny_model_dir, small_parquet, out, batch_rows=100, log=lambda _: None)
    assert len(calls) == 2 and out.read_bytes() == b"the previous run's scores"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.parquet", "scored.parquet"]  # no temp file left
    monkeypatch.setattr(job, "_next_batch", real)
    assert job.score_job(tiny_model_dir, small_parquet, out, batch_rows=100, log=lambda _: None)["rows"] == 515
    assert pq.read_table(out).num_rows == 515


def test_feature_names_matplotlib_reads_as_maths_and_big_integers_train_and_score(tmp_path, tiny_config, capsys):
    """A column named with two ``$`` raised matplotlib's mathtext error while the report was drawn, after training,
    and the model was never written (a traceback, exit 1). An int64 column past 2**53 (nanosecond timestamps) trained,
    and ``kdsm score`` refused the same file with Arrow's safe cast (a traceback): it now reads it as training did."""
    rng = np.random.default_rng(3)
    n = 300
    table = pa.table({"cost_$_per_$_unit": rng.normal(size=n), "$x$": rng.normal(size=n),
                      "nanos": pa.array(1_700_000_000_000_000_000 + rng.integers(0, 10**12, n), pa.int64())})
    data = tmp_path / "dollars.parquet"
    pq.write_table(table, data)
    out = tmp_path / "model"
    assert main(["train", "--data", str(data), "--out", str(out), "--config", str(tiny_config), "--quiet"]) == 0
    capsys.readouterr()
    report = json.loads((out / "report" / "report.json").read_text())
    assert "plots_failed" not in report and (out / "report" / "sigmas.png").stat().st_size > 1000
    assert KDSM.load(out).feature_names_ == ["cost_$_per_$_unit", "$x$", "nanos"]
    scored = tmp_path / "scored.parquet"
    assert main(["score", "--model", str(out), "--data", str(data), "--out", str(scored)]) == 0
    t = pq.read_table(scored)
    assert t.num_rows == n and t.column("score").null_count == 0
    # The same scores as the model gives the rows training read.
    X = np.column_stack([table.column(c).to_numpy().astype(np.float64) for c in table.column_names])
    assert np.allclose(t.column("score").to_numpy(), KDSM.load(out).decision_function(X))


def test_a_plot_that_fails_is_left_out_and_the_model_is_written(small_parquet, tiny_config, tmp_path, monkeypatch, capsys):
    from offline_train import report

    def broken(det):
        raise RuntimeError("no font")

    monkeypatch.setattr(report, "_loss", broken)
    out = tmp_path / "model"
    assert main(["train", "--data", str(small_parquet), "--out", str(out), "--config", str(tiny_config), "--quiet"]) == 0
    written = json.loads((out / "report" / "report.json").read_text())
    assert written["plots_failed"] == {"loss": "RuntimeError: no font"}
    assert not (out / "report" / "loss.png").exists() and (out / "report" / "sigmas.png").exists()
    assert KDSM.load(out).n_features_in_ == 6
