"""Object storage against a real S3 server (SeaweedFS, started by the test session): archive, registry store,
``kdsm train/score`` on s3://, ``kdsm retrain``, and crashes mid-write that leave nothing a reader picks up."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml
from conftest import make_blobs
from stream_support import (
    create_topics,
    event,
    make_settings,
    produce,
    read_topic,
    write_stream_config,
)

from offline_train import storage
from offline_train.artifact import ArtifactError, artifact_exists, publish_artifact, schema_hash
from offline_train.config import load_settings
from offline_train.data import DataError, ParquetSource, resolve_paths, write_parquet
from offline_train.detector import KDSM
from streamer.config import Settings
from streamer.lifecycle.archive import ArchiveSink, closed_files, example_batch
from streamer.lifecycle.config import ArchiveConfig
from streamer.lifecycle.registry import ArtifactStore, ModelRegistry, RegistryModelProvider
from streamer.ops.cli import main as kdsm_main

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]
FEATURES = [f"f{j}" for j in range(6)]


def kdsm(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KDSM_TRAIN__THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "streamer", *args], capture_output=True, text=True, env=env,
                           cwd=ROOT, timeout=timeout)


def archive_rows(root) -> pa.Table:
    return ParquetSource([str(f) for f in closed_files(root)], features=FEATURES)._ds.to_table()


def write_archive(cfg: ArchiveConfig, X: np.ndarray, per_file: int = 500) -> None:
    """Archive files as a streamer serving a model of ``FEATURES`` writes them: that schema hash in each row (a retrain
    trains only on files of its current model's schema)."""
    sink = ArchiveSink(cfg, background=False)
    for i in range(0, len(X), per_file):
        b = example_batch(len(X[i:i + per_file]), features=FEATURES, offset0=i)
        b.X, b.schema_hash = X[i:i + per_file], schema_hash(FEATURES)
        sink.on_committed(b)
        sink.flush()
    sink.close()


def run_and_kill_itself(code: str) -> None:
    """Run ``code`` in a child whose ``storage`` hook SIGKILLs it; the child must die by SIGKILL."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]


def test_archive_publishes_objects_then_markers_and_trains_from_them(s3_root, tmp_path):
    cfg = ArchiveConfig(dir=f"{s3_root}/archive", spool_dir=str(tmp_path / "spool"), fsync=False)
    X, _ = make_blobs(n=1500)
    write_archive(cfg, X)
    files = closed_files(cfg.dir)
    assert len(files) == 3 and all(str(f).startswith(f"{s3_root}/archive/date=") for f in files)
    assert all(storage.exists(storage.marker_of(cfg.dir, str(f)[len(cfg.dir) + 1:])) for f in files)
    table = archive_rows(cfg.dir)
    assert table.num_rows == 1500 and sorted(table["kdsm_offset"].to_pylist()) == list(range(1500))
    # kdsm train --data on the archive root reads exactly the published files.
    assert sorted(resolve_paths(cfg.dir)) == sorted(str(f) for f in files)
    # Retention deletes marker and object.
    sink = ArchiveSink(cfg.model_copy(update={"retention_max_bytes": files[-1].size + 1}), background=False)
    sink.close()
    left = closed_files(cfg.dir)
    assert [str(f) for f in left] == [str(files[-1])]
    assert not storage.exists(str(files[0]))


def test_archive_killed_between_object_and_marker_recovers_once(s3_root, tmp_path):
    """The object is whole but unpublished: no reader sees it; the next start publishes the spool under the same key."""
    cfg = ArchiveConfig(dir=f"{s3_root}/archive", spool_dir=str(tmp_path / "spool"), fsync=True)
    run_and_kill_itself(f"""
        import os, signal
        from offline_train import storage
        from offline_train.config import StorageConfig
        from streamer.lifecycle.archive import ArchiveSink, example_batch
        from streamer.lifecycle.config import ArchiveConfig
        storage.configure(StorageConfig(s3_endpoint={os.environ['KDSM_STORAGE__S3_ENDPOINT']!r},
                                        s3_access_key="kdsm", s3_secret_key="kdsm-dev-secret"))
        storage.write_marker = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
        sink = ArchiveSink(ArchiveConfig(**{cfg.model_dump()!r}), background=False)
        sink.on_committed(example_batch(300, features={FEATURES!r}))
        sink.flush()
    """)
    data = storage.list_files(cfg.dir, ".parquet")
    assert len(data) == 1  # the whole object is there ...
    assert closed_files(cfg.dir) == []  # ... but no reader trusts it
    with pytest.raises(DataError):
        resolve_paths(cfg.dir)
    sink = ArchiveSink(cfg, background=False)  # the next streamer recovers the dead one's spool
    sink.close()
    files = closed_files(cfg.dir)
    assert len(files) == 1 and str(files[0]).endswith(data[0].base_name)
    assert archive_rows(cfg.dir).num_rows == 300


def test_archive_publish_is_retried_after_a_store_outage(s3_root, s3_endpoint, tmp_path, monkeypatch, caplog):
    """The store goes away while a file closes: the spool stays, the roll thread publishes it once the store is back."""
    from offline_train.config import StorageConfig
    from streamer.lifecycle import archive

    monkeypatch.setattr(archive, "RETRY_S", 0.5)
    up = StorageConfig(s3_endpoint=s3_endpoint, s3_access_key="kdsm", s3_secret_key="kdsm-dev-secret")
    cfg = ArchiveConfig(dir=f"{s3_root}/archive", spool_dir=str(tmp_path / "spool"), fsync=False, max_file_seconds=0.5)
    sink = ArchiveSink(cfg)  # with its background roll thread
    archive_log = logging.getLogger("kdsm.archive")  # its own handler: the CLI's logging setup may stop propagation
    archive_log.addHandler(caplog.handler)
    try:
        storage.configure(up.model_copy(update={"s3_endpoint": "http://127.0.0.1:1", "retries": 1}))
        sink.on_committed(example_batch(200, features=FEATURES))
        deadline = time.monotonic() + 20
        while "archive_roll_failed" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "archive_roll_failed" in caplog.text  # the close happened while the store was down
        assert len(list((tmp_path / "spool" / "_spool").glob("*.arrows"))) == 1  # ... and the rows wait in the spool
        storage.configure(up)
        deadline = time.monotonic() + 20
        while not closed_files(cfg.dir) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        archive_log.removeHandler(caplog.handler)
        sink.close()
    assert archive_rows(cfg.dir).num_rows == 200
    assert not list((tmp_path / "spool" / "_spool").glob("*.arrows"))


def test_upload_killed_mid_object_leaves_nothing(s3_root):
    """A multipart upload that never completes is no object: a killed writer leaves nothing to list or read."""
    run_and_kill_itself(f"""
        import os, signal
        from offline_train import storage
        from offline_train.config import StorageConfig
        storage.configure(StorageConfig(s3_endpoint={os.environ['KDSM_STORAGE__S3_ENDPOINT']!r},
                                        s3_access_key="kdsm", s3_secret_key="kdsm-dev-secret"))
        fs, path = storage.resolve({s3_root!r} + "/data/big.parquet")
        out = fs.open_output_stream(path)
        out.write(os.urandom(12 * 2**20))  # more than one part: parts are uploaded, the object is not completed
        out.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    assert storage.list_files(f"{s3_root}/data") == []
    with pytest.raises(DataError, match="no such object or prefix|no Parquet files"):
        resolve_paths(f"{s3_root}/data")


def test_artifact_killed_before_its_manifest_is_no_artifact(s3_root, tiny_model_dir):
    dst = f"{s3_root}/models/v-crash"
    run_and_kill_itself(f"""
        import os, signal
        import pyarrow.fs as pafs
        from offline_train import storage
        from offline_train.artifact import publish_artifact
        from offline_train.config import StorageConfig
        storage.configure(StorageConfig(s3_endpoint={os.environ['KDSM_STORAGE__S3_ENDPOINT']!r},
                                        s3_access_key="kdsm", s3_secret_key="kdsm-dev-secret"))
        real = pafs.copy_files
        def copy(src, dst, **kw):
            if src.endswith("metadata.json"):
                os.kill(os.getpid(), signal.SIGKILL)
            real(src, dst, **kw)
        pafs.copy_files = copy
        publish_artifact({str(tiny_model_dir)!r}, {dst!r})
    """)
    assert storage.exists(storage.join(dst, "weights.safetensors"))  # the data objects were uploaded ...
    assert not artifact_exists(dst) and not ArtifactStore(f"{s3_root}/models").exists("v-crash")
    with pytest.raises(ArtifactError, match="no metadata.json"):  # ... but no reader loads them
        KDSM.load(dst, device="cpu")


def test_registry_store_on_s3_serves_and_swaps(s3_root, redis_client, unique, tiny_model_dir, tmp_path):
    reg = ModelRegistry(redis_client, ArtifactStore(f"{s3_root}/models"), prefix=f"t{unique}:")
    v0 = reg.add(tiny_model_dir)
    assert reg.store.exists(v0) and str(reg.store.location(v0)) == f"{s3_root}/models/{v0}"
    reg.promote(v0)
    provider = RegistryModelProvider(reg, device="cpu", check_interval_s=0.2)
    try:
        assert provider.version == v0
        det = KDSM.load(tiny_model_dir, device="cpu")
        det.version_ = "v-second"
        det.save(f"{s3_root}/trained/second")  # trained straight to the bucket, then added from there
        v1 = reg.add(f"{s3_root}/trained/second")
        reg.promote(v1)
        assert provider.wait_for(v1, timeout=20)
        X, _ = make_blobs(n=50)
        np.testing.assert_allclose(provider.current().decision_function(X), det.decision_function(X), rtol=1e-6)
    finally:
        provider.close()
    reg.store.delete(v1)
    assert not reg.store.exists(v1)


def test_kdsm_stream_loads_its_model_from_s3_without_the_registry_and_archives_to_s3(
        s3_root, kafka_bootstrap, redis_url, unique, tiny_model_dir, tmp_path):
    """``stream.model: s3://...`` with the registry off (a static model) and ``archive.dir: s3://...``, through the
    real ``kdsm stream``: every event is scored by the model read from the bucket, outliers alert, rows are archived."""
    model_uri = f"{s3_root}/bootstrap-model"
    publish_artifact(tiny_model_dir, model_uri)  # the local copy is named nowhere below
    det = KDSM.load(tiny_model_dir, device="cpu")
    normal = make_blobs(n=1400, seed=0)[0][1200:]  # 200 rows of the training distribution the model did not see
    planted = make_blobs(n=10, n_out=10, seed=8)[1]
    ids = [f"n{i}" for i in range(len(normal))] + [f"p{i}" for i in range(len(planted))]
    s = make_settings(kafka_bootstrap, redis_url, unique, model=model_uri, max_batch=64)
    assert not s.registry.enabled
    create_topics(s)
    produce(s, [event(i, x, det.feature_names_) for i, x in zip(ids, np.vstack([normal, planted]), strict=True)])
    cfg = write_stream_config(s, tmp_path / "stream.yaml", drift={"enabled": False},
                              archive={"dir": f"{s3_root}/archive", "spool_dir": str(tmp_path / "spool"), "fsync": False})
    r = kdsm("stream", "--config", cfg, "--max-events", str(len(ids)), "--log-level", "WARNING", timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["events"] == len(ids)
    expect = {f"p{i}" for i, sc in enumerate(det.decision_function(planted)) if sc >= det.thresholds_["warning"]}
    assert len(expect) >= 8
    alerts = [json.loads(a.value) for a in read_topic(kafka_bootstrap, s.kafka.alerts_topic, len(expect), timeout=30)]
    assert expect <= {a["event_id"] for a in alerts}
    assert {a["model_version"] for a in alerts} == {det.version_}
    # The open archive file was closed at exit and published to the bucket (object, then marker).
    assert sorted(archive_rows(f"{s3_root}/archive")["id"].to_pylist()) == sorted(ids)


def test_kdsm_train_and_score_on_s3_and_clear_errors(s3_root, s3_endpoint, tmp_path, monkeypatch, capsys):
    X, out = make_blobs(n=800)
    local = write_parquet(tmp_path / "train.parquet", np.vstack([X, out]), FEATURES)
    storage.upload_dir(local.parent, f"{s3_root}/data", manifest="train.parquet")
    r = kdsm("train", "--data", f"{s3_root}/data", "--out", f"{s3_root}/model", "--steps", "60", "--quiet")
    assert r.returncode == 0, r.stderr
    version = json.loads(r.stdout.strip().splitlines()[-1])["version"]
    assert artifact_exists(f"{s3_root}/model") and storage.exists(f"{s3_root}/model/report/report.json")
    r = kdsm("score", "--model", f"{s3_root}/model", "--data", f"{s3_root}/data/train.parquet",
             "--out", f"{s3_root}/scores/out.parquet")
    assert r.returncode == 0, r.stderr
    scored = ParquetSource(f"{s3_root}/scores/out.parquet", features=["score"])._ds.to_table()
    assert scored.num_rows == 830 and version in r.stdout
    # A second train to the same prefix needs --force; a missing bucket and an unreachable endpoint are one line
    # (in-process: the same `kdsm` entry point, without a torch import per case).
    def one_line_error(argv: list[str], capsys) -> str:
        assert kdsm_main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        return err

    assert "already holds a model artifact" in one_line_error(
        ["train", "--data", f"{s3_root}/data", "--out", f"{s3_root}/model", "--steps", "10", "--quiet"], capsys)
    assert "bucket 'no-such-bucket-kdsm' does not exist" in one_line_error(
        ["train", "--data", "s3://no-such-bucket-kdsm/data", "--out", str(tmp_path / "m"), "--quiet"], capsys)
    assert "bucket 'no-such-bucket-kdsm' does not exist" in one_line_error(
        ["score", "--model", f"{s3_root}/model", "--data", str(local), "--out", "s3://no-such-bucket-kdsm/o.parquet"], capsys)
    monkeypatch.setenv("KDSM_STORAGE__S3_ENDPOINT", "http://127.0.0.1:1")
    assert "cannot reach the object store at http://127.0.0.1:1" in one_line_error(
        ["score", "--model", f"{s3_root}/model", "--data", str(local), "--out", str(tmp_path / "o.parquet")], capsys)
    monkeypatch.setenv("KDSM_STORAGE__S3_ENDPOINT", s3_endpoint)


def upload_parts(X: np.ndarray, local_dir: Path, dst: str, parts: int = 2) -> list[str]:
    """``X`` as ``parts`` Parquet files (column ``id`` = the row number) under the prefix ``dst``."""
    names = []
    for i, rows in enumerate(np.array_split(np.arange(len(X)), parts)):
        write_parquet(local_dir / f"part-{i}.parquet", X[rows], FEATURES, ids=[f"r{j}" for j in rows])
        names.append(f"part-{i}.parquet")
    storage.upload_dir(local_dir, dst, manifest=names[-1])
    return names


def test_kdsm_train_engine_dask_reads_its_data_from_s3(s3_root, tmp_path):
    """Each Dask worker process reads its partitions from the bucket itself (the source travels to the workers with
    its S3 filesystem); the statistics equal the local engine's on the same files read from disk."""
    X, out = make_blobs(n=3000)
    upload_parts(np.vstack([X, out]), tmp_path / "data", f"{s3_root}/data")
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("model:\n  width: 16\n  depth: 1\ntrain:\n  steps: 5\nrefine:\n  enabled: false\n")
    r = kdsm("train", "--data", f"{s3_root}/data/", "--out", f"{s3_root}/m-dask", "--config", str(cfg), "--quiet",
             "--engine", "dask")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "engine: dask, 2 worker(s)" in r.stdout
    assert json.loads(r.stdout.strip().splitlines()[-1])["rows_read"] == 3030
    local = kdsm("train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "m-local"), "--config", str(cfg),
                 "--quiet", "--engine", "local")
    assert local.returncode == 0, local.stderr[-3000:]
    dask_meta = json.loads(storage.read_bytes(f"{s3_root}/m-dask/metadata.json"))
    local_meta = json.loads((tmp_path / "m-local" / "metadata.json").read_text())
    assert dask_meta["sigmas"] == local_meta["sigmas"] and dask_meta["scaler"] == local_meta["scaler"]


def test_kdsm_score_reads_every_file_under_an_s3_prefix(s3_root, tiny_model_dir, tmp_path, capsys):
    X, out = make_blobs(n=400, seed=3)
    rows = np.vstack([X, out])
    upload_parts(rows, tmp_path / "data", f"{s3_root}/batch")
    assert kdsm_main(["score", "--model", str(tiny_model_dir), "--data", f"{s3_root}/batch/",
                      "--out", f"{s3_root}/scores/batch.parquet"]) == 0
    assert "scored 430 rows (0 invalid)" in capsys.readouterr().out
    scored = ParquetSource(f"{s3_root}/scores/batch.parquet", features=["score"])._ds.to_table()
    assert sorted(scored["id"].to_pylist()) == sorted(f"r{j}" for j in range(len(rows)))  # both files, each row once
    by_id = dict(zip(scored["id"].to_pylist(), scored["score"].to_pylist(), strict=True))
    expected = KDSM.load(tiny_model_dir, device="cpu").decision_function(rows)
    np.testing.assert_allclose([by_id[f"r{j}"] for j in range(len(rows))], expected, rtol=1e-5)


def test_credentials_and_endpoint_from_the_aws_environment(s3_root, s3_endpoint, tiny_model_dir, tmp_path):
    """No ``storage`` section at all: ``kdsm`` takes the endpoint and keys from AWS_* like any AWS client, and a
    wrong AWS_SECRET_ACCESS_KEY is refused by the server (so the keys really are the ones sent)."""
    X, _ = make_blobs(n=200, seed=4)
    upload_parts(X, tmp_path / "data", f"{s3_root}/env")
    publish_artifact(tiny_model_dir, f"{s3_root}/env-model")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KDSM_STORAGE__", "AWS_"))}
    env.update(PYTHONPATH=str(ROOT), AWS_ACCESS_KEY_ID="kdsm", AWS_SECRET_ACCESS_KEY="kdsm-dev-secret",
               AWS_ENDPOINT_URL=s3_endpoint, AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")

    def score(**extra) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "streamer", "score", "--model", f"{s3_root}/env-model",
                               "--data", f"{s3_root}/env/", "--out", f"{s3_root}/env-scores/out.parquet"],
                              capture_output=True, text=True, env={**env, **extra}, cwd=ROOT, timeout=300)

    r = score()
    assert r.returncode == 0, r.stderr[-3000:]
    assert ParquetSource(f"{s3_root}/env-scores/out.parquet", features=["score"])._ds.to_table().num_rows == 200
    r = score(AWS_SECRET_ACCESS_KEY="not-the-secret")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"access denied by {s3_endpoint}" in r.stderr


def test_kdsm_retrain_from_an_s3_archive_into_an_s3_store(s3_root, redis_url, unique, tiny_model_dir, tmp_path):
    s = load_settings(Settings, None, **{
        "model": {"width": 32, "depth": 1}, "train": {"steps": 300, "seed": 0},
        "redis": {"url": redis_url, "key_prefix": f"t{unique}:"},
        "archive": {"dir": f"{s3_root}/archive", "spool_dir": str(tmp_path / "spool"), "fsync": False},
        "registry": {"store_dir": f"{s3_root}/models", "device": "cpu"},
        "retrain": {"window_hours": None, "min_rows": 400, "gate_window_rows": 500, "lock_ttl_s": 5}})
    reg = ModelRegistry.from_settings(s)
    v0 = reg.add(tiny_model_dir)
    reg.promote(v0)
    X, _ = make_blobs(n=2000, seed=1)
    write_archive(s.archive, X)
    cfg = tmp_path / "kdsm.yaml"
    cfg.write_text(yaml.safe_dump(json.loads(s.model_dump_json(
        include={"model", "train", "redis", "archive", "registry", "retrain"}))))
    r = kdsm("retrain", "--config", str(cfg), "--log-level", "WARNING")
    assert r.returncode == 0, r.stderr[-3000:]
    current = reg.current_version()
    assert current != v0 and reg.store.exists(current)
    meta = reg.get(current)
    assert meta["data_window"]["rows"] == 2000 and all(f.startswith(f"{s3_root}/archive/") for f in meta["data_window"]["files"])
    assert KDSM.load(reg.store.location(current), device="cpu").version_ == current
