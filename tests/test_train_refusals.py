"""`kdsm train` refuses what it cannot do before doing it, in one line, and never replaces a good model with a bad one."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_blobs

from offline_train.data import write_parquet
from offline_train.detector import KDSM
from streamer.ops.cli import main


@pytest.fixture
def events(tmp_path):
    X, _ = make_blobs(n=400, seed=2)
    return write_parquet(tmp_path / "events.parquet", X, [f"f{j}" for j in range(X.shape[1])],
                         y=np.zeros(len(X), dtype=int), ids=np.arange(len(X)))


@pytest.fixture
def tiny(tmp_path):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("model:\n  width: 32\n  depth: 1\ntrain:\n  steps: 40\n")
    return cfg


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_a_diverging_training_leaves_the_model_at_out_as_it_was(events, tiny, tmp_path, capsys, monkeypatch):
    """A learning rate of 1e300 (finite, so the config takes it) trained NaN weights, saved them over the good model
    at --out (--force), then crashed in the report: the model no longer loaded."""
    out = tmp_path / "m"
    assert main(["train", "--quiet", "--data", str(events), "--out", str(out), "--config", str(tiny)]) == 0
    before = KDSM.load(out, device="cpu").version_
    capsys.readouterr()
    monkeypatch.setenv("KDSM_TRAIN__LR", "1e300")
    assert main(["train", "--quiet", "--data", str(events), "--out", str(out), "--config", str(tiny), "--force"]) == 2
    assert "training diverged" in _one_line(capsys)
    assert KDSM.load(out, device="cpu").version_ == before


@pytest.mark.parametrize(("extra", "message"), [
    (["--features", "f0", "f0"], "feature(s) named twice: f0"),
    (["--features", "f0", "label"], "the id, timestamp or label column cannot be a feature"),
    (["--device", "mps"], "device 'mps' is not supported"),
    (["--device", "meta"], "device 'meta' is not supported")])
def test_features_and_devices_that_cannot_train_are_one_line(events, tiny, tmp_path, capsys, extra, message):
    """Each was a traceback (IndexError in the reader, RuntimeError from torch); the label column as a feature trained
    on the labels the README says are never read for training."""
    assert main(["train", "--quiet", "--data", str(events), "--out", str(tmp_path / "m"), "--config", str(tiny),
                 *extra]) == 2
    assert message in _one_line(capsys)
    assert not (tmp_path / "m").exists()


def test_features_flag_with_a_feature_spec_in_the_config_is_refused(events, tmp_path, capsys):
    """The spec won silently (the flag was ignored); KDSM_DATA__FEATURES beside a spec was refused already."""
    cfg = tmp_path / "spec.yaml"
    cfg.write_text("model: {width: 16, depth: 1}\ntrain: {steps: 5}\n"
                   "features:\n  - {name: f0, type: numeric}\n  - {name: f1, type: numeric}\n")
    assert main(["train", "--quiet", "--data", str(events), "--out", str(tmp_path / "m"), "--config", str(cfg),
                 "--features", "f2", "f3"]) == 2
    assert "set either features (the spec, in the config) or --features (column names), not both" in _one_line(capsys)
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("where", ["weights", "report"])
def test_a_full_disk_while_saving_is_one_line_and_leaves_the_old_model(events, tiny, tmp_path, capsys, monkeypatch,
                                                                      where):
    """ENOSPC was a SafetensorError or OSError traceback; the report was written after the swap, so a failure there
    left a half-written report/ beside the new model."""
    import errno

    import safetensors.torch
    from safetensors import SafetensorError

    import offline_train.job

    out = tmp_path / "m"
    assert main(["train", "--quiet", "--data", str(events), "--out", str(out), "--config", str(tiny)]) == 0
    before = KDSM.load(out, device="cpu").version_
    report = (out / "report" / "report.json").read_text()
    capsys.readouterr()

    def full(*a, **k):
        if where == "weights":
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        raise OSError(errno.ENOSPC, "No space left on device")

    if where == "weights":
        monkeypatch.setattr(safetensors.torch, "save_file", full)
    else:
        monkeypatch.setattr(offline_train.job, "write_report", full)
    assert main(["train", "--quiet", "--data", str(events), "--out", str(out), "--config", str(tiny), "--force"]) == 2
    assert f"cannot write the model to {out}" in _one_line(capsys)
    assert KDSM.load(out, device="cpu").version_ == before and (out / "report" / "report.json").read_text() == report
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary directory left


def test_an_out_under_a_file_is_refused_before_training(events, tiny, tmp_path, capsys, monkeypatch):
    """`--out afile/sub` trained in full, then failed to save with a FileExistsError traceback."""
    (tmp_path / "afile").write_text("x")
    trained = []
    monkeypatch.setattr(KDSM, "fit_source", lambda *a, **k: trained.append(1))
    assert main(["train", "--quiet", "--data", str(events), "--out", str(tmp_path / "afile" / "sub"),
                 "--config", str(tiny)]) == 2
    assert "afile is a file, not a directory" in _one_line(capsys) and not trained


@pytest.mark.parametrize("other", [pa.array([{"z": 1.0}] * 50), pa.array(np.arange(50).astype("datetime64[us]"))],
                         ids=["struct", "timestamp"])
@pytest.mark.parametrize("command", ["train", "features infer"])
def test_files_that_disagree_on_a_column_type_are_one_line(tmp_path, tiny, capsys, other, command):
    """Arrow's ArrowNotImplementedError (Unsupported cast) escaped the reader, which caught only ArrowInvalid: a
    traceback, exit 1."""
    data = tmp_path / "d"
    data.mkdir()
    pq.write_table(pa.table({"a": np.linspace(0, 1, 50), "b": np.linspace(1, 2, 50)}), data / "p1.parquet")
    pq.write_table(pa.table({"a": other, "b": np.linspace(1, 2, 50)}), data / "p2.parquet")
    args = (["train", "--quiet", "--out", str(tmp_path / "m"), "--config", str(tiny)] if command == "train"
            else command.split())
    assert main([*args, "--data", str(data)]) == 2
    assert "cannot read Parquet data" in _one_line(capsys)
    assert not (tmp_path / "m").exists()
