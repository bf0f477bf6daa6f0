"""Model registry against a real Redis: versions, pointers, pub/sub swap, refusal of bad artifacts."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import make_blobs

from offline_train.config import ModelConfig, OptimConfig
from offline_train.detector import KDSM
from streamer.lifecycle.registry import (
    LocalArtifactStore,
    ModelRegistry,
    RegistryError,
    RegistryModelProvider,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def second_model_dir(tmp_path_factory):
    X, _ = make_blobs(n=800, seed=1)
    det = KDSM(model=ModelConfig(width=32, depth=1), train=OptimConfig(steps=100, seed=1)).fit(X)
    return det.save(tmp_path_factory.mktemp("m2") / "second")


@pytest.fixture
def registry(redis_client, tmp_path, unique):
    return ModelRegistry(redis_client, LocalArtifactStore(tmp_path / "store"), prefix=f"t{unique}:")


def test_add_promote_rollback_and_list(registry, tiny_model_dir, second_model_dir):
    v1 = registry.add(tiny_model_dir)
    v2 = registry.add(second_model_dir, meta={"data_window": {"rows": 800}})
    assert v1 != v2 and registry.store.exists(v1) and registry.store.exists(v2)
    assert registry.current_version() is None
    assert registry.promote(v1) == (None, v1)
    assert registry.promote(v2, reason="test") == (v1, v2)
    assert registry.pointers() == {"current": v2, "previous": v1}
    listed = {m["version"]: m for m in registry.list()}
    assert listed[v2]["current"] and listed[v1]["previous"]
    assert listed[v2]["data_window"] == {"rows": 800} and listed[v2]["status"] == "promoted"
    assert registry.rollback() == (v2, v1)
    assert registry.pointers() == {"current": v1, "previous": v2}
    assert [h["action"] for h in registry.history()] == ["rollback", "promote", "promote"]
    # Promoting the current version again changes nothing: the pointers stay (previous, current).
    assert registry.promote(v1) == (v2, v1)
    assert registry.pointers() == {"current": v1, "previous": v2}


def test_refusals(registry, tiny_model_dir):
    with pytest.raises(RegistryError, match="no previous"):
        registry.rollback()
    with pytest.raises(RegistryError, match="unknown"):
        registry.promote("nope")
    v = registry.add(tiny_model_dir)
    registry.update(v, status="rejected", gate={"passed": False, "reason": "alert rate"})
    with pytest.raises(RegistryError, match="validation gate"):
        registry.promote(v)
    assert registry.promote(v, force=True)[1] == v


@pytest.mark.parametrize("status", ["validating", None, "unknown"])
def test_promote_needs_force_unless_the_version_passed_the_gate_or_was_added_by_hand(registry, tiny_model_dir,
                                                                                   second_model_dir, status):
    """A retrain's version still `validating` (its run died in the gate), or of another status, needs --force; one
    added by hand (`kdsm models add`: status registered) or validated does not."""
    v1, v2 = registry.add(tiny_model_dir), registry.add(second_model_dir)
    assert registry.get(v1)["status"] == "registered"
    assert registry.promote(v1) == (None, v1)  # added by hand
    meta = registry.get(v2)
    meta.pop("status") if status is None else meta.update(status=status)
    registry.register(v2, meta)
    with pytest.raises(RegistryError, match="did not pass the validation gate; use --force"):
        registry.promote(v2)
    assert registry.pointers() == {"current": v1, "previous": None}
    registry.update(v2, status="validated")
    assert registry.promote(v2) == (v1, v2)
    registry.update(v2, status=status)
    assert registry.promote(v2, force=True) == (v1, v2)  # already current: nothing moves


def test_provider_swaps_on_notify_and_refuses_bad_artifacts(registry, tiny_model_dir, second_model_dir, tmp_path):
    v1 = registry.add(tiny_model_dir)
    v2 = registry.add(second_model_dir)
    registry.promote(v1)
    # check_interval is long, so a swap within seconds proves the pub/sub path.
    prov = RegistryModelProvider(registry, device="cpu", check_interval_s=60)
    try:
        assert prov.current().version_ == v1
        registry.promote(v2)
        assert prov.wait_for(v2, timeout=10)
        X, _ = make_blobs(n=50, seed=3)
        assert np.isfinite(prov.current().decision_function(X)).all()

        # A corrupted artifact is refused; the old model keeps serving.
        bad_dir = tmp_path / "bad"
        shutil.copytree(second_model_dir, bad_dir)
        meta = json.loads((bad_dir / "metadata.json").read_text())
        meta["version"] = "corrupt-1"
        (bad_dir / "metadata.json").write_text(json.dumps(meta))  # checksum no longer matches
        registry.store.put("corrupt-1", bad_dir)
        registry.register("corrupt-1", {"status": "registered"})
        with pytest.raises(RegistryError, match="damaged"):  # promote checks the artifact: by hand, as an operator might
            registry.promote("corrupt-1")
        registry.r.hset(registry.keys.pointers, "current", "corrupt-1")
        registry.r.publish(registry.keys.channel, "corrupt-1")
        assert not prov.wait_for("corrupt-1", timeout=3)
        assert prov.current().version_ == v2 and "corrupt-1" in prov.refused

        # A model with another feature schema is refused too.
        Xo = np.random.default_rng(0).normal(size=(300, 3))
        other = KDSM(model=ModelConfig(width=32, depth=1), train=OptimConfig(steps=20)).fit(Xo).save(tmp_path / "other")
        v3 = registry.add(other)
        registry.promote(v3)
        assert not prov.wait_for(v3, timeout=3)
        assert "schema" in prov.refused[v3]

        # Rollback (to corrupt-1's predecessor pointer) is noticed by the periodic check as well.
        registry.promote(v1)
        assert prov.wait_for(v1, timeout=10)
    finally:
        prov.close()


def test_provider_falls_back_when_registry_empty(registry, tiny_model_dir):
    fallback = KDSM.load(tiny_model_dir, device="cpu")
    prov = RegistryModelProvider(registry, device="cpu", check_interval_s=0.2, fallback=fallback)
    try:
        assert prov.current() is fallback
        v = registry.add(tiny_model_dir)  # same artifact, same version: nothing to swap
        registry.promote(v)
        assert prov.wait_for(v, timeout=2) and prov.current() is fallback
    finally:
        prov.close()
    with pytest.raises(RegistryError, match="no model to serve"):
        RegistryModelProvider(registry.__class__(registry.r, registry.store, prefix="empty-prefix-x:"), device="cpu")


def test_provider_starts_on_fallback_when_redis_is_down(tiny_model_dir, tmp_path):
    import redis

    from streamer.dev.local_services import free_port

    down = redis.Redis(port=free_port(), socket_timeout=0.2, socket_connect_timeout=0.2, decode_responses=True)
    reg = ModelRegistry(down, LocalArtifactStore(tmp_path / "store"), prefix="down:")
    fallback = KDSM.load(tiny_model_dir, device="cpu")
    prov = RegistryModelProvider(reg, device="cpu", check_interval_s=0.2, fallback=fallback)
    try:
        assert prov.current() is fallback
        assert prov._watcher.is_alive()  # keeps retrying, never crashes the streamer
    finally:
        prov.close()


def test_model_info_metric_follows_a_swap_without_traffic(registry, tiny_model_dir, second_model_dir, kafka_bootstrap,
                                                         redis_url, unique):
    """After a promote or rollback with no events flowing, kdsm_model_info names the new version within seconds."""
    from stream_support import StreamerThread, create_topics, make_settings, wait_for

    v1, v2 = registry.add(tiny_model_dir), registry.add(second_model_dir)
    registry.promote(v1)
    s = make_settings(kafka_bootstrap, redis_url, unique)
    create_topics(s)
    prov = RegistryModelProvider(registry, device="cpu", check_interval_s=60)
    streamer = StreamerThread(s, provider=prov).start()

    def serving() -> set[str]:
        text = streamer.app.metrics.render().decode()
        return {line.split('version="')[1].split('"')[0] for line in text.splitlines()
                if line.startswith("kdsm_model_info{") and line.endswith(" 1.0")}

    try:
        assert serving() == {v1}
        registry.promote(v2)
        assert prov.wait_for(v2, timeout=10)
        assert wait_for(lambda: serving() == {v2}, timeout=3), serving()
        registry.rollback()
        assert prov.wait_for(v1, timeout=10)
        assert wait_for(lambda: serving() == {v1}, timeout=3), serving()
    finally:
        streamer.stop()
        prov.close()


def test_promote_under_a_lock_needs_the_lock_token(registry, tiny_model_dir, second_model_dir):
    """A promotion with a lock token moves the pointers only while the lock key holds that token."""
    from streamer.lifecycle.registry import LockLost

    v1, v2 = registry.add(tiny_model_dir), registry.add(second_model_dir)
    registry.promote(v1)
    with pytest.raises(LockLost, match="not promoted"):  # no lock at all
        registry.promote(v2, lock_token=b"mine")
    registry.r.set(registry.keys.lock, "theirs")
    with pytest.raises(LockLost):  # someone else's lock
        registry.promote(v2, lock_token=b"mine")
    assert registry.pointers() == {"current": v1, "previous": None}
    assert registry.get(v2)["status"] == "registered" and len(registry.history()) == 1
    registry.r.set(registry.keys.lock, "mine")
    assert registry.promote(v2, lock_token=b"mine") == (v1, v2)
    assert registry.promote(v1) == (v2, v1)  # without a token (kdsm models promote): no lock needed


def test_promote_expecting_a_current_moves_only_if_it_is_still_current(registry, tiny_model_dir, second_model_dir):
    """``expect_current`` (what a retrain passes: the version it started from) is checked in the promote script."""
    from streamer.lifecycle.registry import CurrentChanged

    v1, v2 = registry.add(tiny_model_dir), registry.add(second_model_dir)
    with pytest.raises(CurrentChanged, match="not promoted"):  # expected v1, there is no current yet
        registry.promote(v2, expect_current=v1)
    assert registry.promote(v1, expect_current=None) == (None, v1)  # None: no current expected
    with pytest.raises(CurrentChanged, match=f"current is {v1} now"):
        registry.promote(v2, expect_current=None)
    assert registry.pointers() == {"current": v1, "previous": None} and len(registry.history()) == 1
    assert registry.promote(v2, expect_current=v1) == (v1, v2)


@pytest.mark.parametrize("damage", ["weights", "manifest", "gone"])
def test_adding_a_registered_version_again_repairs_its_damaged_store_copy(registry, tiny_model_dir, damage):
    """The documented repair of a damaged store artifact (`kdsm models add --model DIR`) publishes it again, and says
    so; its metadata and status are kept. A whole copy is left alone."""
    v = registry.add(tiny_model_dir)
    registry.promote(v)
    assert registry.add_artifact(tiny_model_dir) == (v, None)
    stored = registry.store.location(v)
    if damage == "weights":
        w = stored / "weights.safetensors"
        data = bytearray(w.read_bytes())
        data[-1] ^= 0xFF
        w.write_bytes(bytes(data))
    elif damage == "manifest":
        (stored / "metadata.json").unlink()
    else:
        shutil.rmtree(stored)
    with pytest.raises(RegistryError, match="damaged|no artifact"):
        registry._check_artifact(v, "x")  # what promote and rollback check
    version, repaired = registry.add_artifact(tiny_model_dir)
    assert version == v and repaired and ("damaged" in repaired or "no artifact" in repaired), repaired
    registry._check_artifact(v, "x")  # whole again
    assert registry.get(v)["status"] == "promoted"
    assert registry.add_artifact(tiny_model_dir) == (v, None)


def test_a_repair_that_fails_to_publish_leaves_the_stored_copy_where_it_was(registry, tiny_model_dir, monkeypatch):
    """The repair replaces the stored copy in place, never deletes it first: a publish that fails (a store timing out
    half-way) leaves the copy that was there, so a streamer restarting on it still finds its files."""
    from offline_train.storage import StorageError

    v = registry.add(tiny_model_dir)
    registry.promote(v)
    w = registry.store.location(v) / "weights.safetensors"
    data = bytearray(w.read_bytes())
    data[-1] ^= 0xFF
    w.write_bytes(bytes(data))

    def failing_put(version, src):
        raise StorageError("s3: request timed out")

    monkeypatch.setattr(registry.store, "put", failing_put)
    with pytest.raises(StorageError, match="timed out"):
        registry.add_artifact(tiny_model_dir)
    assert w.read_bytes() == bytes(data)  # still there, as it was
    assert (w.parent / "metadata.json").is_file()


# ---------------------------------------------------------------------- retention: prune
def _versions(registry, n: int, src) -> list[str]:
    """Versions v0..v(n-1), each a copy of one artifact in the store, registered oldest first, a second apart."""
    out = []
    for i in range(n):
        registry.store.put(f"v{i}", src)
        registry.register(f"v{i}", {"status": "registered"})
        registry.r.zadd(registry.keys.versions, {f"v{i}": 1000.0 + i})  # registration order, whatever the clock did
        out.append(f"v{i}")
    return out


def _registered(registry) -> list[str]:
    return [m["version"] for m in registry.list()]


def test_prune_keeps_the_newest_and_removes_the_oldest_with_their_artifacts(registry, tiny_model_dir):
    vs = _versions(registry, 5, tiny_model_dir)
    registry.promote("v4")
    res = registry.prune(2)
    assert [p["version"] for p in res["pruned"]] == ["v2", "v1", "v0"]
    assert [(k["version"], k["why"]) for k in res["kept"]] == [("v4", "current"), ("v3", "among the newest 2")]
    assert res["skipped"] == res["artifact_errors"] == [] and res["keep"] == 2 and not res["dry_run"]
    assert _registered(registry) == ["v4", "v3"]
    for v in vs[:3]:
        assert not registry.store.exists(v) and registry.get(v) is None
    assert registry.store.exists("v3") and registry.store.exists("v4")
    audit = registry.history()
    assert [(h["action"], h["from"]) for h in audit[:3]] == [("prune", "v0"), ("prune", "v1"), ("prune", "v2")]
    assert audit[0]["reason"] == "retention: keep the newest 2"
    assert registry.prune(2)["pruned"] == []  # nothing more to do
    with pytest.raises(RegistryError, match="positive integer"):
        registry.prune(0)


def test_prune_never_removes_current_previous_or_validating(registry, tiny_model_dir):
    _versions(registry, 6, tiny_model_dir)
    registry.promote("v1")
    registry.promote("v0")  # the oldest is current, the next one previous
    registry.update("v2", status="validating")
    res = registry.prune(1)
    kept = {k["version"]: k["why"] for k in res["kept"]}
    assert kept == {"v5": "among the newest 1", "v0": "current", "v1": "previous (rollback's target)",
                    "v2": "validating (a retrain's gate has not finished)"}
    assert [p["version"] for p in res["pruned"]] == ["v4", "v3"]
    assert sorted(_registered(registry)) == ["v0", "v1", "v2", "v5"]
    assert registry.rollback() == ("v0", "v1")  # rollback's target is whole


def test_prune_dry_run_changes_nothing(registry, tiny_model_dir):
    _versions(registry, 4, tiny_model_dir)
    registry.promote("v3")
    log_len = registry.r.xlen(registry.keys.log)
    res = registry.prune(1, dry_run=True)
    assert res["dry_run"] and "pruned" not in res
    assert [p["version"] for p in res["would_prune"]] == ["v2", "v1", "v0"]
    assert res["would_prune"][0]["artifact"] == str(registry.store.location("v2"))
    assert _registered(registry) == ["v3", "v2", "v1", "v0"] and registry.r.xlen(registry.keys.log) == log_len
    assert all(registry.store.exists(v) for v in ("v0", "v1", "v2", "v3"))


def test_promote_of_a_pruned_version_is_refused(registry, tiny_model_dir):
    _versions(registry, 3, tiny_model_dir)
    registry.promote("v2")
    registry.prune(1)
    with pytest.raises(RegistryError, match="unknown model version 'v0'"):
        registry.promote("v0", force=True)
    # A promote racing the prune: it read the entry and checked the artifact, then the prune's script took the
    # version out of the versions set before the promote's script ran. The promote's script refuses it; nothing moves.
    registry.store.put("late", tiny_model_dir)
    registry.register("late", {"status": "registered"})
    real_check = registry._check_artifact

    def check_then_pruned(version, refused):
        real_check(version, refused)
        registry.r.zrem(registry.keys.versions, version)

    registry._check_artifact = check_then_pruned
    log_len = registry.r.xlen(registry.keys.log)
    with pytest.raises(RegistryError, match="^version late was pruned from the registry while it was being promoted"):
        registry.promote("late")
    assert registry.pointers() == {"current": "v2", "previous": None}
    assert registry.r.xlen(registry.keys.log) == log_len  # none recorded for the refused one


def test_prune_script_refuses_a_version_that_became_current_or_previous_or_changed(registry, tiny_model_dir):
    """The race guard: a version listed as prunable that a promote made current (or previous, or whose entry changed)
    before the prune's script ran stays registered and keeps its artifact."""
    _versions(registry, 5, tiny_model_dir)
    registry.promote("v4")
    kept, candidates = registry._prune_plan(1)
    assert [v for v, _ in candidates] == ["v3", "v2", "v1", "v0"]
    entries = dict(candidates)
    registry.promote("v0")  # lands between the listing and the script
    assert registry._prune_entry("v0", entries["v0"], "test") == "current"
    registry.promote("v1")  # v0 is previous now
    assert registry._prune_entry("v0", entries["v0"], "test") == "previous"
    registry.update("v2", status="validating")  # a retrain's entry moved on since the listing
    assert registry._prune_entry("v2", entries["v2"], "test") == "changed"
    assert sorted(_registered(registry)) == ["v0", "v1", "v2", "v3", "v4"]
    assert all(registry.store.exists(v) for v in ("v0", "v1", "v2"))
    assert registry._prune_entry("v3", entries["v3"], "test") == "pruned"
    assert registry._prune_entry("v3", entries["v3"], "test") == "gone"
    # Through prune: what a race keeps is reported as skipped, with why.
    registry.r.zadd(registry.keys.versions, {"v3": 999.0})
    registry.r.set(registry.keys.version("v3"), entries["v3"])
    real = registry._prune_entry

    def racing(version, entry, reason):
        if version == "v3":
            registry.promote("v3")
        return real(version, entry, reason)

    registry._prune_entry = racing
    res = registry.prune(1)
    assert {s["version"]: s["why"] for s in res["skipped"]} == {
        "v3": "became current while the prune ran (a promote or rollback): kept"}
    assert registry.pointers()["current"] == "v3" and registry.store.exists("v3")


def test_prune_reports_an_artifact_it_could_not_delete_and_prunes_the_rest(registry, tiny_model_dir, monkeypatch):
    from offline_train.storage import StorageError

    _versions(registry, 4, tiny_model_dir)
    registry.promote("v3")
    real = registry.store.delete

    def delete(version):
        if version == "v1":
            raise StorageError("s3://b/models/v1: cannot reach the object store at http://x")
        real(version)

    monkeypatch.setattr(registry.store, "delete", delete)
    res = registry.prune(1)
    assert [p["version"] for p in res["pruned"]] == ["v2", "v1", "v0"]
    assert res["artifact_errors"] == [{"version": "v1", "artifact": str(registry.store.location("v1")),
                                       "error": "s3://b/models/v1: cannot reach the object store at http://x"}]
    assert _registered(registry) == ["v3"]
    assert not registry.store.exists("v0") and not registry.store.exists("v2") and registry.store.exists("v1")


@pytest.fixture
def registry_config(registry, redis_url, tmp_path) -> str:
    import yaml

    p = tmp_path / "kdsm.yaml"
    p.write_text(yaml.safe_dump({"redis": {"url": redis_url, "key_prefix": registry.keys.prefix},
                                 "registry": {"store_dir": str(registry.store.root)}}))
    return str(p)


def test_kdsm_models_prune(registry, registry_config, tiny_model_dir, capsys):
    from streamer.ops.cli import main as kdsm

    _versions(registry, 4, tiny_model_dir)
    registry.promote("v3")
    for bad in ("0", "-1"):
        with pytest.raises(SystemExit) as exited:  # argparse's usage error, as for any bad argument
            kdsm(["models", "prune", "--keep", bad, "--config", registry_config])
        assert exited.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"--keep: expected a positive integer, got {bad}" in err, err
    assert kdsm(["models", "prune", "--keep", "2", "--dry-run", "--config", registry_config]) == 0
    assert [p["version"] for p in json.loads(capsys.readouterr().out)["would_prune"]] == ["v1", "v0"]
    assert len(_registered(registry)) == 4
    assert kdsm(["models", "prune", "--keep", "2", "--reason", "tidy", "--config", registry_config]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["version"] for p in out["pruned"]] == ["v1", "v0"] and _registered(registry) == ["v3", "v2"]
    assert registry.history()[0]["reason"] == "tidy"
    assert kdsm(["models", "prune", "--config", registry_config]) == 0  # default --keep 10: nothing to prune
    assert json.loads(capsys.readouterr().out)["pruned"] == []


def test_kdsm_models_prune_with_redis_down_is_one_line(tmp_path, capsys):
    import yaml

    from streamer.dev.local_services import free_port
    from streamer.ops.cli import main as kdsm

    p = tmp_path / "kdsm.yaml"
    p.write_text(yaml.safe_dump({"redis": {"url": f"redis://127.0.0.1:{free_port()}/0", "connect_timeout_s": 0.5},
                                 "registry": {"store_dir": str(tmp_path / "store")}}))
    assert kdsm(["models", "prune", "--keep", "1", "--config", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unreachable" in err and "Traceback" not in err, err


def test_prune_from_an_s3_store(s3_root, s3_endpoint, redis_client, redis_url, unique, tiny_model_dir, tmp_path,
                                monkeypatch, capsys):
    import yaml

    from offline_train import storage
    from offline_train.config import StorageConfig
    from streamer.dev import local_services
    from streamer.lifecycle.registry import ArtifactStore
    from streamer.ops.cli import main as kdsm

    reg = ModelRegistry(redis_client, ArtifactStore(f"{s3_root}/models"), prefix=f"t{unique}:")
    _versions(reg, 3, tiny_model_dir)
    reg.promote("v2")
    assert all(reg.store.exists(v) for v in ("v0", "v1", "v2"))
    config = tmp_path / "kdsm.yaml"
    config.write_text(yaml.safe_dump({"redis": {"url": redis_url, "key_prefix": f"t{unique}:"},
                                      "registry": {"store_dir": f"{s3_root}/models"}}))
    # An endpoint that is down: one line, exit 2, nothing removed.
    monkeypatch.setenv("KDSM_STORAGE__S3_ENDPOINT", "http://127.0.0.1:1")
    assert kdsm(["models", "prune", "--keep", "1", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot reach the object store at http://127.0.0.1:1" in err, err
    assert _registered(reg) == ["v2", "v1", "v0"]
    monkeypatch.setenv("KDSM_STORAGE__S3_ENDPOINT", s3_endpoint)
    storage.configure(StorageConfig(s3_endpoint=s3_endpoint, s3_access_key=local_services.S3_ACCESS_KEY,
                                    s3_secret_key=local_services.S3_SECRET_KEY))
    res = reg.prune(1)
    assert [p["version"] for p in res["pruned"]] == ["v1", "v0"] and res["artifact_errors"] == []
    assert res["pruned"][0]["artifact"] == f"{s3_root}/models/v1"
    assert not reg.store.exists("v0") and not reg.store.exists("v1") and reg.store.exists("v2")
    assert not storage.list_files(f"{s3_root}/models/v0")  # every object gone, not just the manifest
    assert _registered(reg) == ["v2"]
