"""Retrain job against a real Redis: lock, archive window, gate, register/promote, failures, requests, CLI."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import make_blobs

from offline_train.artifact import schema_hash
from offline_train.config import load_settings
from offline_train.detector import KDSM
from streamer.config import Settings
from streamer.lifecycle.archive import ArchiveSink, example_batch
from streamer.lifecycle.config import ArchiveConfig
from streamer.lifecycle.registry import ModelRegistry, RegistryModelProvider
from streamer.lifecycle.requests import request_retrain
from streamer.lifecycle.retrain import RetrainLock, run_retrain, select_window, watch
from streamer.ops.cli import main as kdsm_main

pytestmark = pytest.mark.integration
FEATURES = [f"f{j}" for j in range(6)]


def overrides(tmp_path: Path, redis_url: str, unique: str, **retrain) -> dict:
    return {"model": {"width": 32, "depth": 1}, "train": {"steps": 300, "seed": 0},
            "redis": {"url": redis_url, "key_prefix": f"t{unique}:"},
            "archive": {"dir": str(tmp_path / "archive"), "fsync": False},
            "registry": {"store_dir": str(tmp_path / "store"), "device": "cpu"},
            "retrain": {"window_hours": None, "min_rows": 400, "gate_window_rows": 500, "lock_ttl_s": 5,
                        "request_delay_s": 0.5, **retrain}}


def write_archive(root: Path, X: np.ndarray, per_file: int = 500, version: str = "v0",
                  features: list[str] = FEATURES, schema: str | None = None) -> None:
    """Archive files as a streamer serving a model of ``features`` writes them: its schema hash (``schema``, default
    that of a model of those plain features, as the tiny model) in ``kdsm_schema_hash``."""
    sink = ArchiveSink(ArchiveConfig(dir=str(root), fsync=False), background=False)
    for i in range(0, len(X), per_file):
        b = example_batch(len(X[i:i + per_file]), features=features, offset0=i, version=version)
        b.X, b.schema_hash = X[i:i + per_file], schema or schema_hash(features)
        sink.on_committed(b)
        sink.flush()
    sink.close()


@pytest.fixture
def kdsm_log(caplog, monkeypatch):
    """``caplog`` for the kdsm loggers from INFO, also after a kdsm command ran in this process (its setup_logging
    stops their propagation to the root logger, where caplog listens)."""
    monkeypatch.setattr(logging.getLogger("kdsm"), "propagate", True)
    with caplog.at_level(logging.INFO, logger="kdsm"):
        yield caplog


@pytest.fixture
def setup(tmp_path, redis_url, unique, tiny_model_dir):
    s = load_settings(Settings, None, **overrides(tmp_path, redis_url, unique))
    reg = ModelRegistry.from_settings(s)
    v0 = reg.add(tiny_model_dir)
    reg.promote(v0)
    return s, reg, v0


def shifted(n: int, seed: int) -> np.ndarray:
    X, _ = make_blobs(n=n, seed=0)  # same generator as the tiny model's data, then moved
    X = X.copy()
    X[:, :5] = X[:, :5] * 1.5 + 1.0
    return X


def _retrain_with_config(cfg, conf: dict) -> int:
    """``kdsm retrain --config cfg`` with ``conf`` written there; the process-wide object-store settings it applied are
    put back to the defaults afterwards, so later tests do not meet its endpoint."""
    from offline_train import storage
    from offline_train.config import StorageConfig

    cfg.write_text(yaml.safe_dump(conf))
    try:
        return kdsm_main(["retrain", "--config", str(cfg), "--log-level", "WARNING"])
    finally:
        storage.configure(StorageConfig())


def test_lock_is_exclusive_renewed_and_safely_released(redis_client, unique):
    key = f"t{unique}:lock"
    a, b = RetrainLock(redis_client, key, ttl_s=1.2), RetrainLock(redis_client, key, ttl_s=1.2)
    assert a.acquire()
    assert not b.acquire()
    time.sleep(2.0)  # beyond the TTL: renewal keeps it
    assert not b.acquire() and not a.lost.is_set()
    a.release()
    assert b.acquire()
    # A token that is not the holder's cannot release it.
    b._stop.set()
    b._thread.join()
    redis_client.pexpire(key, 1)
    time.sleep(0.05)
    c = RetrainLock(redis_client, key, ttl_s=5)
    assert c.acquire()
    b.release()  # b's lock expired and c holds it now: b must not delete it
    assert redis_client.get(key) is not None
    c.release()
    assert redis_client.get(key) is None


def test_retrain_promotes_a_model_that_passes_the_gate(setup):
    s, reg, v0 = setup
    write_archive(Path(s.archive.dir), shifted(2000, 1))
    res = run_retrain(s, reg, reason="test")
    assert res.status == "promoted", res.reason
    assert reg.pointers() == {"current": res.version, "previous": v0}
    meta = reg.get(res.version)
    assert meta["gate"]["passed"] and meta["data_window"]["rows"] == 2000 and meta["parent"] == v0
    assert meta["train_summary"]["ema"] is True  # K-DSM-EMA on the contaminated archive
    ratio = meta["gate"]["checks"]["alert_rate"]["ratio"]
    assert 0 <= ratio <= s.retrain.gate_max_alert_ratio
    new = KDSM.load(reg.store.local_path(res.version), device="cpu")
    # The new model knows the shifted data: its alert rate there is far below the old model's.
    old = KDSM.load(reg.store.local_path(v0), device="cpu")
    X = shifted(1000, 2)
    assert (new.decision_function(X) >= new.threshold_).mean() < (old.decision_function(X) >= old.threshold_).mean()
    run = reg.r.xrevrange(reg.keys.runs, count=1)[0][1]
    assert run["status"] == "promoted" and run["version"] == res.version


def test_failures_keep_the_current_model(setup, tmp_path):
    s, reg, v0 = setup
    serving = RegistryModelProvider(reg, device="cpu", check_interval_s=0.2)  # a running streamer's view
    # Empty window.
    res = run_retrain(s, reg)
    assert res.status == "failed" and "empty window" in res.reason and res.exit_code == 1
    # Corrupt data only.
    d = Path(s.archive.dir) / "date=2026-01-01"
    d.mkdir(parents=True)
    (d / "part-20260101T000000Z-bad.parquet").write_bytes(b"PAR1 this is not parquet")
    res = run_retrain(s, reg)
    assert res.status == "failed" and "unreadable" in res.reason
    # Too little data (the corrupt file is skipped, the good one is small).
    write_archive(Path(s.archive.dir), shifted(200, 3))
    res = run_retrain(s, reg)
    assert res.status == "failed" and "too little data" in res.reason
    # Rows that are all non-finite are not usable rows.
    X = shifted(600, 4)
    X[:, 2] = np.nan
    write_archive(Path(s.archive.dir), X)
    res = run_retrain(s, reg)
    assert res.status == "failed" and "too little data" in res.reason
    assert reg.pointers()["current"] == v0
    statuses = [f["status"] for _, f in reg.r.xrange(reg.keys.runs)]
    assert statuses == ["failed"] * 4
    time.sleep(0.5)  # a few periodic checks
    assert serving.current().version_ == v0 and not serving.refused
    serving.close()


def test_gate_rejection_registers_but_does_not_promote(tmp_path, redis_url, unique, tiny_model_dir):
    # The new model alerts at about its calibrated rate (ratio ~1): below a bound of 50 (max 100 keeps the pair valid).
    s = load_settings(Settings, None, **overrides(tmp_path, redis_url, unique, gate_min_alert_ratio=50.0,
                                                  gate_max_alert_ratio=100.0))
    reg = ModelRegistry.from_settings(s)
    v0 = reg.add(tiny_model_dir)
    reg.promote(v0)
    write_archive(Path(s.archive.dir), shifted(1500, 5))
    res = run_retrain(s, reg)
    assert res.status == "rejected" and res.exit_code == 3 and "alert rate" in res.reason
    assert reg.current_version() == v0
    assert reg.get(res.version)["status"] == "rejected" and not reg.get(res.version)["gate"]["passed"]


def test_an_unreachable_object_store_archive_is_one_line_and_exit_2(setup, tmp_path, capsys, caplog):
    """`kdsm retrain` with archive.dir on an object store nobody answers at: failed with the store's one-line reason,
    exit 2 as kdsm's other user errors, no retrain_unexpected_error traceback in the log."""
    from streamer.dev.local_services import free_port

    s, reg, v0 = setup
    cfg = tmp_path / "cfg.yaml"
    conf = json.loads(s.model_dump_json(include={"model", "train", "redis", "registry", "retrain"}))
    conf["archive"] = {"dir": "s3://kdsm/nowhere/archive"}
    conf["storage"] = {"s3_endpoint": f"http://127.0.0.1:{free_port()}", "s3_access_key": "k", "s3_secret_key": "s",
                       "connect_timeout_s": 0.5, "retries": 1}
    assert _retrain_with_config(cfg, conf) == 2
    res = json.loads(capsys.readouterr().out)
    assert res["status"] == "failed" and res["reason"].startswith("archive unusable: s3://kdsm/nowhere/archive")
    assert "cannot reach the object store" in res["reason"] and "\n" not in res["reason"]
    assert not [r for r in caplog.records if "retrain_unexpected_error" in str(r.msg)]
    assert reg.current_version() == v0


def test_window_selection_newest_first(tmp_path):
    root = tmp_path / "a"
    write_archive(root, shifted(1500, 6), per_file=500)
    w = select_window(root, None, max_rows=900)
    assert w["rows"] == 1000 and len(w["files"]) == 2  # file granularity, newest files
    assert select_window(root, 1e-9, max_rows=900, now=time.time() + 3600)["files"] == []


def test_two_jobs_at_once_one_trains(setup, tmp_path):
    s, reg, v0 = setup
    write_archive(Path(s.archive.dir), shifted(2000, 7))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(json.loads(s.model_dump_json(include={"model", "train", "redis", "archive", "registry", "retrain"}))))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = [sys.executable, "-m", "streamer", "retrain", "--config", str(cfg), "--log-level", "WARNING"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    results = [json.loads(o) for o, _ in outs]
    assert sorted(r["status"] for r in results) == ["locked", "promoted"], outs
    assert [p.returncode for p in procs] == [0, 0]
    assert len(reg.list()) == 2  # v0 and exactly one new version


def test_requests_are_served_by_the_watcher(setup, redis_url):
    import redis

    s, reg, v0 = setup
    write_archive(Path(s.archive.dir), shifted(1000, 8))
    request_retrain(reg, "ops")
    request_retrain(reg, "drift")
    blocking = redis.Redis.from_url(redis_url, decode_responses=True)
    stop = threading.Event()
    results = watch(s, reg, blocking, stop=stop, max_runs=1)
    assert len(results) == 1 and results[0].status == "promoted"
    assert "drift" in results[0].details["trigger"] and "ops" in results[0].details["trigger"]
    assert blocking.xpending(reg.keys.requests, "kdsm-retrain")["pending"] == 0
    blocking.close()


def test_requests_met_by_another_retrains_lock_are_served_once_it_is_free(setup, redis_url):
    """A scheduled `kdsm retrain` holds the lock when the watcher's run starts: the fresh request stays pending (not
    acknowledged and lost), the watcher does not spin on the lock, and it runs the request once the lock is free."""
    import redis

    s, reg, v0 = setup
    s.retrain.request_delay_s, s.retrain.watch_block_s = 0.0, 0.3
    write_archive(Path(s.archive.dir), shifted(2000, 8))
    reg.r.set(reg.keys.lock, "cron-run-token", px=60_000)  # the cron run started before the drift request
    rid = request_retrain(reg, "drift")
    blocking = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        stop = threading.Event()
        threading.Timer(2.0, stop.set).start()
        results = watch(s, reg, blocking, stop=stop, consumer="w1")
        assert [r.status for r in results] == ["locked"]  # one try in 2 s while the lock is held: no busy loop
        assert _pending_with(reg) == [(rid, "w1")]
        reg.r.delete(reg.keys.lock)  # the cron run finishes
        stop = threading.Event()
        timer = threading.Timer(150, stop.set)
        timer.start()
        try:
            results = watch(s, reg, blocking, stop=stop, max_runs=1, consumer="w1")
        finally:
            timer.cancel()
    finally:
        blocking.close()
    assert [r.status for r in results] == ["promoted"], [r.reason for r in results]
    assert results[0].details["trigger"] == "request:drift"
    assert _pending_with(reg) == [] and reg.current_version() == results[0].version != v0


@pytest.mark.parametrize("runs", ["0", "-1", "x"])
def test_retrain_refuses_a_max_runs_that_cannot_run(runs, capsys):
    """`kdsm retrain --watch --max-runs 0` printed [] and exited 0 without serving a request."""
    with pytest.raises(SystemExit) as e:
        kdsm_main(["retrain", "--watch", "--max-runs", runs])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--max-runs: expected a positive integer" in err and "Traceback" not in err


def test_models_cli(setup, tmp_path, capsys, second_model):
    s, reg, v0 = setup
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(json.loads(s.model_dump_json(include={"redis", "registry"}))))
    assert kdsm_main(["models", "add", "--config", str(cfg), "--model", str(second_model), "--promote"]) == 0
    v1 = json.loads(capsys.readouterr().out)["added"]
    assert kdsm_main(["models", "list", "--config", str(cfg)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [m["version"] for m in listed if m["current"]] == [v1]
    assert kdsm_main(["models", "rollback", "--config", str(cfg)]) == 0
    assert json.loads(capsys.readouterr().out) == {"rolled_back": v1, "current": v0}
    assert kdsm_main(["models", "promote", "--config", str(cfg), v1]) == 0
    capsys.readouterr()
    assert kdsm_main(["models", "show", "--config", str(cfg), v1]) == 0
    assert json.loads(capsys.readouterr().out)["pointers"] == {"current": v1, "previous": v0}
    assert kdsm_main(["models", "promote", "--config", str(cfg), "no-such-version"]) == 2
    assert "unknown model version" in capsys.readouterr().err
    assert kdsm_main(["retrain", "--request", "--config", str(cfg), "--reason", "cli"]) == 0
    assert reg.r.xlen(reg.keys.requests) == 1


@pytest.fixture(scope="module")
def second_model(tmp_path_factory):
    X, _ = make_blobs(n=600, seed=9)
    from offline_train.config import ModelConfig, OptimConfig

    return KDSM(model=ModelConfig(width=32, depth=1), train=OptimConfig(steps=60, seed=9)).fit(X).save(
        tmp_path_factory.mktemp("m") / "second")


def test_gate_compares_with_current_on_labelled_rows(tmp_path, redis_url, unique, tiny_model_dir):
    from offline_train.data import write_parquet

    # Labelled rows where the "anomalies" are the shifted regime: the current model catches them, a model
    # retrained on the shifted archive cannot, so the gate must refuse it.
    normal = make_blobs(n=1800, seed=0)[0][1200:]
    anomalies = shifted(100, 0)[:100]
    Xl = np.vstack([normal, anomalies])
    yl = np.r_[np.zeros(len(normal)), np.ones(len(anomalies))].astype(int)
    labelled = write_parquet(tmp_path / "labelled.parquet", Xl, FEATURES, y=yl)
    # A wide alert-rate bound isolates the labelled check.
    s = load_settings(Settings, None, **overrides(tmp_path, redis_url, unique, gate_labelled_data=str(labelled),
                                                  gate_max_alert_ratio=50.0))
    reg = ModelRegistry.from_settings(s)
    v0 = reg.add(tiny_model_dir)
    reg.promote(v0)
    write_archive(Path(s.archive.dir), shifted(2000, 10))
    res = run_retrain(s, reg)
    assert res.status == "rejected" and "AUC-PR" in res.reason, res.reason
    labels = res.details["gate"]["checks"]["labels"]
    assert labels["new"]["auc_pr"] < labels["current"]["auc_pr"] - s.retrain.gate_max_auc_pr_drop
    assert reg.current_version() == v0


def test_a_gate_error_rejects_the_registered_version(tmp_path, redis_url, unique, tiny_model_dir, capsys):
    """Labelled gate data whose labels are {0, 2} makes the AUC-PR check raise: the run names the version, which is
    rejected with the one-line reason (not left validating), and `kdsm models promote` of it needs --force."""
    from offline_train.data import write_parquet

    X, out = make_blobs(n=300, seed=9)
    labelled = write_parquet(tmp_path / "lab02.parquet", np.vstack([X, out]), FEATURES,
                             y=np.r_[np.zeros(len(X)), np.full(len(out), 2)].astype(int))
    s = load_settings(Settings, None, **overrides(tmp_path, redis_url, unique, gate_labelled_data=str(labelled),
                                                  gate_max_alert_ratio=50.0))
    reg = ModelRegistry.from_settings(s)
    v0 = reg.add(tiny_model_dir)
    reg.promote(v0)
    write_archive(Path(s.archive.dir), shifted(2000, 1))
    res = run_retrain(s, reg)
    assert res.status == "rejected" and res.exit_code == 3 and res.version is not None, (res.status, res.reason)
    assert res.reason.startswith("gate: gate error: ValueError: ") and "\n" not in res.reason
    meta = reg.get(res.version)
    assert meta["status"] == "rejected" and not meta["gate"]["passed"] and "gate error" in meta["gate"]["reason"]
    assert reg.current_version() == v0
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(json.loads(s.model_dump_json(include={"redis", "registry"}))))
    assert kdsm_main(["models", "promote", "--config", str(cfg), res.version]) == 2
    assert "--force" in capsys.readouterr().err
    assert kdsm_main(["models", "promote", "--config", str(cfg), res.version, "--force"]) == 0
    assert reg.current_version() == res.version


def test_models_add_promote_twice_keeps_previous(setup, tmp_path, capsys, second_model):
    """A repeated `models add --promote` (a re-run bootstrap job) must not make previous == current."""
    s, reg, v0 = setup
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(json.loads(s.model_dump_json(include={"redis", "registry"}))))
    add = ["models", "add", "--config", str(cfg), "--model", str(second_model), "--promote"]
    assert kdsm_main(add) == 0
    first = json.loads(capsys.readouterr().out)
    v1 = first["added"]
    assert (first["previous"], first["current"], first["promoted"]) == (v0, v1, True)
    assert kdsm_main(add) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["previous"], again["current"], again["promoted"]) == (v0, v1, False)
    assert reg.pointers() == {"current": v1, "previous": v0}
    assert reg.get(v1)["status"] == "promoted"  # re-adding did not reset the serving version's metadata
    assert kdsm_main(["models", "rollback", "--config", str(cfg)]) == 0
    assert json.loads(capsys.readouterr().out) == {"rolled_back": v1, "current": v0}


def test_models_add_repairs_a_damaged_store_copy(setup, tmp_path, capsys, tiny_model_dir):
    """operations.md's repair for `version V is damaged in the store`: `kdsm models add --model DIR` from the source."""
    s, reg, v0 = setup
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(json.loads(s.model_dump_json(include={"redis", "registry"}))))
    w = reg.store.location(v0) / "weights.safetensors"
    w.write_bytes(w.read_bytes()[:-8])  # truncated in the store
    assert kdsm_main(["models", "promote", "--config", str(cfg), v0]) == 2
    assert "damaged in the store" in capsys.readouterr().err
    assert kdsm_main(["models", "add", "--config", str(cfg), "--model", str(tiny_model_dir)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["added"] == v0 and "damaged in the store" in out["repaired"], out
    assert kdsm_main(["models", "promote", "--config", str(cfg), v0]) == 0  # whole again
    capsys.readouterr()
    assert kdsm_main(["models", "add", "--config", str(cfg), "--model", str(tiny_model_dir)]) == 0
    assert json.loads(capsys.readouterr().out) == {"added": v0}  # a whole copy is left alone


def test_lock_lost_before_the_promote_step_registers_but_does_not_promote(tmp_path, redis_url, unique, tiny_model_dir,
                                                                          monkeypatch):
    """The lock key is taken over after the gate and before the promotion; the renewal thread has not looked yet
    (lock_ttl_s=300: it looks every 100 s), so only the promotion's own token check can see it."""
    import streamer.lifecycle.retrain as retrain

    s = load_settings(Settings, None, **overrides(tmp_path, redis_url, unique, lock_ttl_s=300))
    reg = ModelRegistry.from_settings(s)
    v0 = reg.add(tiny_model_dir)
    reg.promote(v0)
    write_archive(Path(s.archive.dir), shifted(2000, 1))
    real_validate = retrain.validate

    def validate_then_lose_the_lock(*args, **kwargs):
        gate = real_validate(*args, **kwargs)
        assert reg.r.get(reg.keys.lock) is not None  # held by the run until now
        reg.r.set(reg.keys.lock, "another-holder", px=60_000)  # it expired and another job took it
        return gate

    monkeypatch.setattr(retrain, "validate", validate_then_lose_the_lock)
    res = run_retrain(s, reg, reason="test")
    assert res.status == "registered" and "lock lost" in res.reason and res.exit_code == 0, res.reason
    assert reg.pointers() == {"current": v0, "previous": None}
    assert reg.get(res.version)["status"] == "validated" and reg.get(res.version)["gate"]["passed"]
    assert [h["action"] for h in reg.history()] == ["promote"]  # v0's bootstrap promotion only
    assert reg.r.get(reg.keys.lock) == "another-holder"  # the run did not release the other holder's lock
    run = reg.r.xrevrange(reg.keys.runs, count=1)[0][1]
    assert run["status"] == "registered" and "lock lost" in run["reason"]


def test_an_operators_promote_during_the_run_wins_over_the_retrain(setup, second_model, monkeypatch):
    """An operator promotes another version by hand while the retrain runs its gate: the run registers its version and
    does not promote it over the operator's choice (the promote script checks current is still the run's start)."""
    import streamer.lifecycle.retrain as retrain

    s, reg, v0 = setup
    v1 = reg.add(second_model)
    write_archive(Path(s.archive.dir), shifted(2000, 1))
    real_validate = retrain.validate

    def operator_promotes_meanwhile(*args, **kwargs):
        reg.promote(v1, reason="operator: current is bad")
        return real_validate(*args, **kwargs)

    monkeypatch.setattr(retrain, "validate", operator_promotes_meanwhile)
    res = run_retrain(s, reg, reason="drift")
    assert res.status == "registered" and "current changed during the run" in res.reason, res.reason
    assert res.exit_code == 0 and res.version not in (v0, v1)
    assert reg.pointers() == {"current": v1, "previous": v0}
    assert reg.get(res.version)["status"] == "validated"
    assert [h["to"] for h in reg.history()] == [v1, v0]  # no promotion by the run
    run = reg.r.xrevrange(reg.keys.runs, count=1)[0][1]
    assert run["status"] == "registered" and "current changed" in run["reason"]


def _pending_with(reg) -> list[tuple[str, str]]:
    import redis

    try:
        pending = reg.r.xpending_range(reg.keys.requests, "kdsm-retrain", "-", "+", 100)
    except redis.ResponseError:  # no consumer group yet
        return []
    return [(p["message_id"], p["consumer"]) for p in pending]


def _until(cond, timeout: float, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every)
    return False


def test_a_watcher_killed_mid_run_leaves_its_request_to_the_restarted_watcher(setup, tmp_path, redis_url):
    """SIGKILL a real `kdsm retrain --watch` while its run holds the lock: the request stays pending under the host's
    consumer name, and the watcher restarted on the host reads it back once the dead run's lock expired: one run."""
    import signal
    import socket

    import redis

    s, reg, v0 = setup
    s.retrain.watch_block_s = 0.3
    write_archive(Path(s.archive.dir), shifted(2000, 11))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(json.loads(s.model_dump_json(include={"model", "train", "redis", "archive", "registry", "retrain"}))))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    rid = request_retrain(reg, "drift")
    with open(tmp_path / "watch.log", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "streamer", "retrain", "--watch", "--config", str(cfg),
                                 "--log-level", "WARNING"], stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            assert _until(lambda: reg.r.exists(reg.keys.lock), timeout=120), (tmp_path / "watch.log").read_text()
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    assert _pending_with(reg) == [(rid, socket.gethostname())]  # read, never acknowledged, under a stable name
    assert reg.r.exists(reg.keys.lock)  # the dead run's lock lives out its TTL
    assert reg.r.xlen(reg.keys.runs) == 0
    blocking = redis.Redis.from_url(redis_url, decode_responses=True)
    stop = threading.Event()
    timer = threading.Timer(150, stop.set)
    timer.start()
    try:
        results = watch(s, reg, blocking, stop=stop, max_runs=1)  # the restarted pod: same host name
    finally:
        timer.cancel()
        blocking.close()
    assert [r.status for r in results] == ["promoted"], [r.reason for r in results]
    assert results[0].details["trigger"] == "request:drift"
    assert _pending_with(reg) == []
    assert [f["status"] for _, f in reg.r.xrange(reg.keys.runs)] == ["promoted"]  # it ran once, after the lock expired
    assert reg.current_version() == results[0].version != v0


def test_a_stale_request_of_a_gone_watcher_is_claimed_once_it_is_stale_and_run_once(setup, redis_url):
    """Watcher pod-a reads a request and stops in its delay wait without acknowledging (the path a SIGTERM takes);
    watcher pod-b leaves it alone until it has been pending stale_after_s (request delay + lock TTL), then claims it
    and runs it once."""
    import redis

    from streamer.lifecycle.retrain import stale_after_s

    s, reg, v0 = setup
    s.retrain.request_delay_s, s.retrain.lock_ttl_s, s.retrain.watch_block_s = 1.5, 2.0, 0.2
    stale = stale_after_s(s.retrain)
    assert stale == 3.5
    write_archive(Path(s.archive.dir), shifted(2000, 12))
    clients = [redis.Redis.from_url(redis_url, decode_responses=True) for _ in range(2)]
    rid = request_retrain(reg, "drift")
    stop_a, out_a = threading.Event(), []
    a = threading.Thread(target=lambda: out_a.extend(watch(s, reg, clients[0], stop=stop_a, consumer="pod-a")))
    stop_b, out_b = threading.Event(), []
    b = threading.Thread(target=lambda: out_b.extend(watch(s, reg, clients[1], stop=stop_b, max_runs=1, consumer="pod-b")))
    a.start()
    try:
        assert _until(lambda: _pending_with(reg) == [(rid, "pod-a")], timeout=10)
        read_at = time.monotonic()
        stop_a.set()  # in its delay wait: gone without an ack
        a.join(timeout=10)
        assert not a.is_alive() and out_a == [] and _pending_with(reg) == [(rid, "pod-a")]
        b.start()
        assert _until(lambda: _pending_with(reg) != [(rid, "pod-a")], timeout=30, every=0.02), "never claimed"
        claimed_after = time.monotonic() - read_at
        assert claimed_after >= stale - 0.3, claimed_after  # not before it was stale
        b.join(timeout=150)
    finally:
        stop_a.set()
        stop_b.set()
        for t in (a, b):
            if t.ident is not None:
                t.join(timeout=30)
        for c in clients:
            c.close()
    assert [r.status for r in out_b] == ["promoted"], [r.reason for r in out_b]
    assert _pending_with(reg) == []
    assert [f["status"] for _, f in reg.r.xrange(reg.keys.runs)] == ["promoted"]
    assert len(reg.list()) == 2 and reg.current_version() == out_b[0].version


@pytest.mark.parametrize("key", ["LOCK_TTL_S", "REQUEST_DELAY_S", "WATCH_BLOCK_S"])
def test_retrain_seconds_without_bound_are_refused_in_one_line(key, monkeypatch, capsys):
    """`KDSM_RETRAIN__REQUEST_DELAY_S=1e12 kdsm retrain --watch` died with OverflowError (past threading.TIMEOUT_MAX);
    a lock TTL of 1e12 s set a lock for ~31,000 years and killed the renewal thread: now the usual invalid-configuration
    message, exit 2, before Redis is reached."""
    monkeypatch.setenv(f"KDSM_RETRAIN__{key}", "1e12")
    assert kdsm_main(["retrain", "--watch", "--max-runs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kdsm retrain: error: invalid configuration"), err
    assert f"retrain.{key.lower()}: Input should be less than or equal to" in err and "Traceback" not in err, err


@pytest.mark.parametrize("labels", ["no label column", "one class"])
def test_labelled_gate_data_without_an_auc_pr_rejects_the_version(labels, tmp_path, redis_url, unique, tiny_model_dir):
    """`retrain.gate_labelled_data` without the label column, or with labels of one class, skipped the AUC-PR check and
    promoted the version (labels new/current None): the gate the docs promise did not run. It now fails, naming why."""
    from offline_train.data import write_parquet

    X, _ = make_blobs(n=400, seed=9)
    y = None if labels == "no label column" else np.zeros(len(X), int)
    labelled = write_parquet(tmp_path / "lab.parquet", X, FEATURES, y=y)
    s = load_settings(Settings, None, **overrides(tmp_path, redis_url, unique, gate_labelled_data=str(labelled),
                                                  gate_max_alert_ratio=50.0, gate_max_auc_pr_drop=0.0))
    reg = ModelRegistry.from_settings(s)
    v0 = reg.add(tiny_model_dir)
    reg.promote(v0)
    write_archive(Path(s.archive.dir), shifted(2000, 1))
    res = run_retrain(s, reg)
    assert res.status == "rejected" and res.exit_code == 3 and res.version is not None, (res.status, res.reason)
    why = "has no label column 'label'" if labels == "no label column" else "one class"
    assert why in res.reason and "data.label_column" in res.reason and "\n" not in res.reason, res.reason
    assert reg.get(res.version)["status"] == "rejected" and reg.current_version() == v0


@pytest.fixture
def own_redis(tmp_path):
    """A Redis of this test's own, to stop, pause and restart (its data survives a restart: append-only file)."""
    from streamer.dev import local_services

    svc = local_services.Service("redis", local_services.free_port(), tmp_path / "redis").start()
    yield svc
    svc.stop()


@pytest.mark.parametrize("how", ["stopped", "paused"])
def test_redis_lost_before_the_lock_is_one_line_in_a_one_shot_run(how, own_redis, tmp_path, unique, tiny_model_dir):
    """Redis gone after `kdsm retrain`'s start-up PING: the lock's SET raised redis-py's ConnectionError (stopped) or
    TimeoutError (paused: the connection opens, no reply comes) as a traceback, exit 1. Now RedisUnavailable: one line
    naming redis.url, exit 2 (a user error of kdsm)."""
    import signal

    from streamer.lifecycle.control import RedisUnavailable
    from streamer.ops.cli import user_errors

    s = load_settings(Settings, None, **overrides(tmp_path, own_redis.url, unique))
    s.redis.command_timeout_s = 0.5
    reg = ModelRegistry.from_settings(s)
    reg.promote(reg.add(tiny_model_dir))
    pid = own_redis.pid()
    if how == "stopped":
        own_redis.stop()
    else:
        os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(RedisUnavailable) as e:
            run_retrain(s, reg)
    finally:
        if how == "paused":
            os.kill(pid, signal.SIGCONT)
    msg = str(e.value)
    assert msg.startswith(f"Redis at {own_redis.url} did not answer") and "redis.url" in msg and "\n" not in msg, msg
    assert ("TimeoutError" if how == "paused" else "ConnectionError") in msg, msg
    assert isinstance(e.value, user_errors())  # kdsm prints `kdsm retrain: error: <msg>` and exits 2


def test_the_watcher_waits_out_a_redis_restart_and_serves_the_request(own_redis, tmp_path, unique, tiny_model_dir,
                                                                     kdsm_log):
    """`kdsm retrain --watch` with a request read and Redis stopped during the request delay: the lock's SET raised and
    the watcher died (exit 1, traceback). It now waits (retrain_watch_redis_unavailable) and, once Redis is back, runs
    the request it left pending; a watcher started while Redis is down (XGROUP CREATE) waits too."""
    import redis

    s = load_settings(Settings, None, **overrides(tmp_path, own_redis.url, unique))
    s.retrain.request_delay_s, s.retrain.watch_block_s = 1.5, 0.3
    reg = ModelRegistry.from_settings(s)
    v0 = reg.add(tiny_model_dir)
    reg.promote(v0)
    rid = request_retrain(reg, "drift")
    blocking = redis.Redis.from_url(own_redis.url, decode_responses=True)
    stop, out, errors = threading.Event(), [], []

    def run():
        try:
            out.extend(watch(s, reg, blocking, stop=stop, max_runs=1, consumer="w1"))
        except BaseException as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    try:
        assert _until(lambda: _pending_with(reg) == [(rid, "w1")], timeout=10)  # read; now in its delay wait
        own_redis.stop()
        time.sleep(3.0)  # past the delay: the run's lock SET meets no Redis, then the reads do
        assert t.is_alive() and not errors, errors
        own_redis.start()
        t.join(timeout=60)
    finally:
        stop.set()
        t.join(timeout=30)
    assert not errors, errors
    assert [r.status for r in out] == ["failed"] and "empty window" in out[0].reason  # it ran (no archive here)
    assert out[0].details["trigger"] == "request:drift" and _pending_with(reg) == []
    assert any("retrain_watch_redis_unavailable" in str(r.msg) for r in kdsm_log.records)
    # A watcher whose Redis is gone from the start (XGROUP CREATE) waits, and stops when asked.
    own_redis.stop()
    stop = threading.Event()
    threading.Timer(1.5, stop.set).start()
    assert watch(s, reg, blocking, stop=stop, consumer="w1") == []
    blocking.close()


@pytest.mark.parametrize("store", ["unreachable", "damaged"])
def test_a_current_model_that_cannot_be_read_fails_the_run_with_exit_2(store, setup, tmp_path, capsys):
    """The current version exists but its artifact cannot be read (an object store nobody answers at; a damaged copy):
    the run answered exit 1 `no feature list: the registry has no current model`, or with data.features set trained
    without it (its feature spec not carried, no AUC-PR comparison) and promoted. Now: failed, exit 2,
    `artifact store unusable: ...` naming the version, nothing trained or registered."""
    from streamer.dev.local_services import free_port

    s, reg, v0 = setup
    write_archive(Path(s.archive.dir), shifted(2000, 1))
    conf = json.loads(s.model_dump_json(include={"model", "train", "redis", "archive", "registry", "retrain"}))
    conf["data"] = {"features": FEATURES}  # what let the run go on without the current model
    if store == "unreachable":
        conf["registry"]["store_dir"] = "s3://kdsm/nowhere/models"
        conf["storage"] = {"s3_endpoint": f"http://127.0.0.1:{free_port()}", "s3_access_key": "k",
                           "s3_secret_key": "s", "connect_timeout_s": 0.5, "retries": 1}
    else:
        w = reg.store.location(v0) / "weights.safetensors"
        w.write_bytes(w.read_bytes()[:-8])
    cfg = tmp_path / "cfg.yaml"
    assert _retrain_with_config(cfg, conf) == 2
    res = json.loads(capsys.readouterr().out)
    assert res["status"] == "failed" and res["reason"].startswith("artifact store unusable: ") and v0 in res["reason"]
    assert ("cannot reach the object store" if store == "unreachable" else "checksum") in res["reason"], res["reason"]
    assert "\n" not in res["reason"] and "train" not in res["details"]
    assert [m["version"] for m in reg.list()] == [v0] and reg.current_version() == v0


def test_archive_files_of_another_feature_schema_are_skipped_and_counted(setup, kdsm_log):
    """A file of features a, b (another model's) in the archive was read with the current features: its rows trained
    on as imputed values, and the gate failed on every run until it aged out. Files whose kdsm_schema_hash is not the
    current model's are now skipped, counted in the run's window summary and logged."""
    s, reg, v0 = setup
    root = Path(s.archive.dir)
    write_archive(root, shifted(2000, 1))
    time.sleep(0.05)  # the other schema's file is the newest
    write_archive(root, np.random.default_rng(0).normal(size=(50, 2)), features=["a", "b"])
    res = run_retrain(s, reg, reason="test")
    assert res.status == "promoted", res.reason
    window = res.details["window"]
    assert window["files"] == 4 and window["rows"] == 2000 and window["other_schema"] == 1, window
    assert window["schema_hash"] == reg.get(v0)["schema_hash"]
    new = KDSM.load(reg.store.local_path(res.version), device="cpu")
    assert new.feature_names_ == FEATURES and new.features_ is None and new.schema_hash_ == window["schema_hash"]
    assert [r for r in kdsm_log.records if "retrain_files_other_schema" in str(r.msg)]


def test_window_selection_keeps_one_schema(tmp_path):
    """Given a schema hash, only its files; without one (no current model), the newest file's."""
    root = tmp_path / "a"
    write_archive(root, shifted(1000, 6), per_file=500)
    time.sleep(0.05)
    write_archive(root, np.zeros((300, 2)), per_file=300, features=["a", "b"])
    mine = select_window(root, None, max_rows=10_000, schema_hash=schema_hash(FEATURES))
    assert (mine["rows"], len(mine["files"]), len(mine["other_schema"])) == (1000, 2, 1)
    newest = select_window(root, None, max_rows=10_000)
    assert (newest["rows"], len(newest["files"]), len(newest["other_schema"])) == (300, 1, 2)
    assert newest["schema_hash"] == schema_hash(["a", "b"])


def test_the_watcher_serves_its_run_counter_on_retrain_metrics_port(setup, tmp_path):
    """kdsm_retrain_runs_total{outcome} was counted into a registry nobody served: `kdsm retrain --watch` now serves
    /metrics on metrics.host:retrain.metrics_port (0 = off); scraped after a run, the counter is there."""
    import signal
    import urllib.request

    from streamer.dev.local_services import free_port

    s, reg, v0 = setup  # no archive: the run fails at once ("empty window"), which is an outcome like any other
    port = free_port()
    s.retrain.request_delay_s, s.retrain.watch_block_s = 0.0, 0.3
    conf = json.loads(s.model_dump_json(include={"model", "train", "redis", "archive", "registry", "retrain"}))
    conf["retrain"]["metrics_port"] = port
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(conf))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    request_retrain(reg, "drift")

    def scrape() -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                return r.read().decode()
        except OSError:
            return ""

    with open(tmp_path / "watch.log", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "streamer", "retrain", "--watch", "--config", str(cfg),
                                 "--log-level", "INFO"], stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            counted = 'kdsm_retrain_runs_total{outcome="failed"} 1.0'
            ok = _until(lambda: proc.poll() is not None or counted in scrape(), timeout=120, every=0.3)
            ok = ok and proc.poll() is None
            assert ok, (scrape(), (tmp_path / "watch.log").read_text()[-3000:])
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    assert f"127.0.0.1:{port}/metrics" in (tmp_path / "watch.log").read_text()  # the metrics log line gives its URL


@pytest.mark.parametrize("when", ["before the run", "during the training"])
def test_a_registry_key_of_the_wrong_type_fails_the_run_with_exit_2_and_no_orphan(when, setup, tmp_path, capsys,
                                                                                   monkeypatch):
    """`SET <p>registry:versions x; kdsm retrain`: the run trained, copied its artifact into the store, then died at
    ZADD (exit 1, `unexpected error: RegistryError`), leaving an entry and an artifact no version set lists. The key
    types are now checked before the training and again before the store is written: exit 2, the line names the key."""
    import streamer.lifecycle.retrain as retrain

    s, reg, v0 = setup
    write_archive(Path(s.archive.dir), shifted(2000, 1))
    if when == "before the run":
        reg.r.delete(reg.keys.versions)
        reg.r.set(reg.keys.versions, "x")
    else:
        real = retrain.select_window

        def then_overwrite(*args, **kwargs):
            window = real(*args, **kwargs)
            reg.r.delete(reg.keys.versions)
            reg.r.set(reg.keys.versions, "x")
            return window

        monkeypatch.setattr(retrain, "select_window", then_overwrite)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(json.loads(s.model_dump_json(include={"model", "train", "redis", "archive",
                                                                         "registry", "retrain"}))))
    assert kdsm_main(["retrain", "--config", str(cfg), "--log-level", "WARNING"]) == 2
    res = json.loads(capsys.readouterr().out)
    assert res["status"] == "failed" and res["version"] is None, res
    assert f"Redis key {reg.keys.versions} holds a string, not the zset" in res["reason"], res["reason"]
    assert ("train" in res["details"]) == (when == "during the training")
    assert sorted(p.name for p in Path(s.registry.store_dir).iterdir()) == [v0]  # no orphan artifact
    assert reg.r.keys(reg.keys.version("*")) == [reg.keys.version(v0)]  # no orphan entry
    assert reg.current_version() == v0


def test_requests_met_by_a_lock_key_that_never_expires_stay_pending_until_it_is_deleted(setup, redis_url, kdsm_log):
    """A lock key written by hand without an expiry: the run fails (`... exists without an expiry ...`), and the
    watcher acknowledged, so lost, the requests; after the operator deleted the key they never ran. They now stay
    pending (log retrain_requests_deferred, error, naming the key to delete) and run once it is gone."""
    import redis

    s, reg, v0 = setup  # no archive: the run, once it may, fails at once ("empty window"); it ran all the same
    s.retrain.request_delay_s, s.retrain.watch_block_s = 0.0, 0.3
    reg.r.set(reg.keys.lock, "by-hand")  # no expiry
    rid = request_retrain(reg, "drift")
    blocking = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        stop = threading.Event()
        threading.Timer(2.0, stop.set).start()
        results = watch(s, reg, blocking, stop=stop, consumer="w1")
        assert [r.status for r in results] == ["failed"] and "without an expiry" in results[0].reason
        assert _pending_with(reg) == [(rid, "w1")]  # not acknowledged
        deferred = [r for r in kdsm_log.records if "retrain_requests_deferred" in str(r.msg)]
        assert deferred and deferred[0].levelname == "ERROR" and f"redis-cli DEL {reg.keys.lock}" in str(deferred[0].msg)
        reg.r.delete(reg.keys.lock)  # the operator's repair
        stop = threading.Event()
        timer = threading.Timer(60, stop.set)
        timer.start()
        try:
            results = watch(s, reg, blocking, stop=stop, max_runs=1, consumer="w1")
        finally:
            timer.cancel()
    finally:
        blocking.close()
    assert [r.status for r in results] == ["failed"] and "empty window" in results[0].reason, results
    assert results[0].details["trigger"] == "request:drift" and _pending_with(reg) == []
