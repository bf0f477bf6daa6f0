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
