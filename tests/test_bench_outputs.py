"""What the benches hand on: the SASL password to ``--processes`` children, and ``--out`` to an object store."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from offline_train import storage
from offline_train.config import StorageConfig, load_settings
from streamer.config import Settings
from streamer.dev import bench_scale
from streamer.dev.local_services import free_port
from streamer.ops.cli import main

SECRET = "s3cr3t-from-config"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def sasl_settings(tmp_path, monkeypatch):
    """Settings whose SASL password came from --config, none in the environment."""
    monkeypatch.delenv("KDSM_KAFKA__SASL_PASSWORD", raising=False)
    cfg = tmp_path / "sasl.yaml"
    cfg.write_text("kafka:\n  security_protocol: SASL_PLAINTEXT\n  sasl_mechanism: PLAIN\n  sasl_username: bench\n"
                   f"  sasl_password: {SECRET}\n")
    return load_settings(Settings, cfg)


def test_scale_children_get_a_config_password_by_environment(sasl_settings, monkeypatch):
    """--processes lost a password given in --config: the args file leaves it out and the child read the environment."""
    assert sasl_settings.kafka.sasl_password.get_secret_value() == SECRET
    args, env = bench_scale.child_launch(sasl_settings, {"model": "m"})
    assert SECRET not in json.dumps(args)
    assert env["KDSM_KAFKA__SASL_PASSWORD"] == SECRET
    # the child: Settings(**args["settings"]) under that environment
    monkeypatch.setenv("KDSM_KAFKA__SASL_PASSWORD", env["KDSM_KAFKA__SASL_PASSWORD"])
    child = Settings(**args["settings"])
    assert child.kafka.sasl_password.get_secret_value() == SECRET and child.kafka.sasl_username == "bench"


def test_scale_children_without_a_password_get_none(monkeypatch):
    monkeypatch.delenv("KDSM_KAFKA__SASL_PASSWORD", raising=False)
    _, env = bench_scale.child_launch(Settings(), {})
    assert "KDSM_KAFKA__SASL_PASSWORD" not in env


def test_scale_group_passes_the_password_to_popen_not_to_a_file_or_argv(sasl_settings, tmp_path, monkeypatch):
    launched = []

    class Stop(Exception):
        pass

    def fake_popen(argv, **kw):
        launched.append((argv, kw))
        raise Stop

    monkeypatch.setattr(subprocess, "Popen", fake_popen)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(Stop):
        bench_scale._group(sasl_settings, "model-dir", "cpu", None, 2, scratch, "g", {0: 1})
    (argv, kw), = launched
    assert SECRET not in " ".join(argv)
    assert kw["env"]["KDSM_KAFKA__SASL_PASSWORD"] == SECRET
    (args_file,) = scratch.glob("*.args")
    assert SECRET not in args_file.read_text() and str(args_file) in argv


@pytest.fixture
def unreachable_store(monkeypatch):
    """KDSM_STORAGE__* naming an endpoint where nothing listens; the storage options restored afterwards."""
    monkeypatch.setenv("KDSM_STORAGE__S3_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("KDSM_STORAGE__RETRIES", "1")
    monkeypatch.setenv("KDSM_STORAGE__CONNECT_TIMEOUT_S", "1")
    yield
    storage.configure(StorageConfig())


@pytest.mark.parametrize("bench", [["lifecycle", "--events", "100", "--batch", "50", "--rounds", "1"],
                                   ["features-quality", "--seeds", "1"],
                                   ["features-speed", "--events", "100", "--repeats", "1"]])
def test_an_unusable_store_is_one_line_before_the_bench(bench, unreachable_store, tmp_path, monkeypatch, capsys):
    """--out s3://... printed "written to s3://..." and wrote ./s3:/bucket/x.json; now the store is used, and one
    that cannot be reached is one line (exit 2) before the benchmark runs."""
    monkeypatch.chdir(tmp_path)
    assert main(["bench", *bench, "--out", "s3://kdsm/bench/x.json"]) == 2
    cap = capsys.readouterr()
    assert "cannot reach the object store" in cap.err and cap.err.count("\n") == 1, cap.err
    assert "us/event" not in cap.out and "wrote" not in cap.out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bench", [["train"], ["sigmas"]])
def test_the_offline_benches_check_the_bucket_before_the_timing(bench, unreachable_store, tmp_path, monkeypatch, capsys):
    """bench train and bench sigmas wrote --out s3://... as a local ./s3:/... file after minutes of timing."""
    monkeypatch.chdir(tmp_path)
    assert main(["bench", *bench, "--out", "s3://kdsm/bench/x.json"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach the object store" in err and err.count("\n") == 1, err
    assert os.environ["KDSM_STORAGE__S3_ENDPOINT"] in err, err  # the configured store, not AWS's
    assert list(tmp_path.iterdir()) == []


def test_bench_stream_checks_the_bucket_before_a_broker(unreachable_store, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "stream", "--bootstrap", f"127.0.0.1:{free_port()}", "--out", "s3://kdsm/b/x.json"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach the object store" in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_bench_outputs_are_uploaded(s3_root, tmp_path, monkeypatch, capsys):
    """Every writer of a bench's --out: the JSON and the sweep's PNG go to the object store, nothing local."""
    from streamer.dev.bench_features import _write
    from streamer.dev.bench_fixtures import write_result
    from streamer.dev.bench_stream import _plot_sweep

    monkeypatch.chdir(tmp_path)
    write_result(f"{s3_root}/stream.json", {"a": 1}, log=lambda _: None)
    assert json.loads(storage.read_bytes(f"{s3_root}/stream.json")) == {"a": 1}
    _write(f"{s3_root}/features.json", {"b": 2}, log=lambda _: None)
    assert json.loads(storage.read_bytes(f"{s3_root}/features.json")) == {"b": 2}
    pts = [{"max_batch": b, "max_wait_ms": w, "e2e_events_per_s": b * 10 + w, "to_alert_acked": {"p99_ms": 50.0 + w}}
           for b in (128, 512) for w in (10, 100)]
    _plot_sweep({"points": pts, "machine": {"cpu": "x", "cores": 2, "device": "cpu"}, "delivery": "at_least_once"},
                f"{s3_root}/sweep.png")
    assert storage.read_bytes(f"{s3_root}/sweep.png")[:8] == PNG_MAGIC
    # the whole command: storage from KDSM_STORAGE__* (bench lifecycle has no --config)
    out = f"{s3_root}/lifecycle.json"
    assert main(["bench", "lifecycle", "--events", "200", "--batch", "100", "--rounds", "1", "--out", out]) == 0
    assert f"written to {out}\n" in capsys.readouterr().out
    assert json.loads(storage.read_bytes(out))["events"] == 200
    # a bucket that does not exist: one line before the benchmark
    assert main(["bench", "lifecycle", "--rounds", "1", "--out", "s3://no-such-bucket-kdsm/x.json"]) == 2
    cap = capsys.readouterr()
    assert "bucket 'no-such-bucket-kdsm' does not exist" in cap.err and cap.err.count("\n") == 1, cap.err
    assert "us/event" not in cap.out
    assert list(tmp_path.iterdir()) == []  # no local folder named s3: (nor anything else)

