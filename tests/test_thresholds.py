"""Live thresholds against a real Redis: CLI set/show/reset with audit, live change within 2 s, Redis down -> scoring goes on."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import yaml
from conftest import make_blobs
from stream_support import (
    Collect,
    StreamerThread,
    create_topics,
    event,
    make_settings,
    produce,
    read_topic,
    wait_for,
)

from offline_train.detector import KDSM
from streamer.dev import local_services
from streamer.lifecycle.control import connect
from streamer.lifecycle.thresholds import ArtifactCalibration, LiveThresholds, ThresholdStore
from streamer.ops.cli import main as kdsm

pytestmark = pytest.mark.integration


@pytest.fixture
def model(tiny_model_dir):
    return KDSM.load(tiny_model_dir, device="cpu")


def _cli(capsys, *args) -> dict:
    assert kdsm(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def _config(tmp_path, redis_url, prefix) -> str:
    p = tmp_path / "kdsm.yaml"
    p.write_text(yaml.safe_dump({"redis": {"url": redis_url, "key_prefix": prefix}}))
    return str(p)


def test_cli_set_by_quantile_and_score_show_reset_with_audit(tmp_path, capsys, redis_url, redis_client, unique, tiny_model_dir, model):
    prefix = f"kdsm-test-{unique}:"
    cfg = _config(tmp_path, redis_url, prefix)
    base = ["--model", str(tiny_model_dir), "--config", cfg]
    shown = _cli(capsys, "thresholds", "show", *base)
    assert shown["effective"]["warning"] == {"score": model.thresholds_["warning"], "quantile": pytest.approx(0.99, abs=0.01), "source": "artifact"}
    assert shown["overrides"] == {} and shown["audit"] == []

    out = _cli(capsys, "thresholds", "set", *base, "--severity", "warning", "--quantile", "0.9", "--by", "alice")
    want = model.calibration_.threshold_for_quantile(0.9)
    assert out["new"] == pytest.approx(want) and out["old"] == pytest.approx(model.thresholds_["warning"])
    assert out["by"] == "alice" and out["quantile"] == 0.9
    _cli(capsys, "thresholds", "set", *base, "--severity", "critical", "--score", "123.5", "--by", "bob")
    shown = _cli(capsys, "thresholds", "show", *base)
    assert shown["effective"]["warning"]["score"] == pytest.approx(want)
    assert shown["effective"]["warning"]["source"] == "redis"
    assert shown["effective"]["critical"]["score"] == 123.5
    assert [(a["by"], a["severity"], a["action"]) for a in shown["audit"]] == [("bob", "critical", "set"), ("alice", "warning", "set")]
    assert all(a["at"].endswith("Z") for a in shown["audit"])
    # The record lives in Redis under the version, where every streamer reads it.
    assert json.loads(redis_client.hget(f"{prefix}thresholds:{model.version_}", "critical"))["score"] == 123.5

    out = _cli(capsys, "thresholds", "reset", *base, "--severity", "critical", "--by", "carol")
    assert out["reset"][0]["old"] == 123.5 and out["reset"][0]["new"] == pytest.approx(model.thresholds_["critical"])
    _cli(capsys, "thresholds", "reset", *base)
    shown = _cli(capsys, "thresholds", "show", *base)
    assert shown["overrides"] == {} and shown["effective"]["warning"]["source"] == "artifact"
    assert len(shown["audit"]) == 4


def test_cli_rejects_bad_input_with_one_line(tmp_path, capsys, redis_url, unique, tiny_model_dir):
    cfg = _config(tmp_path, redis_url, f"kdsm-test-{unique}:")
    base = ["--model", str(tiny_model_dir), "--config", cfg]
    assert kdsm(["thresholds", "set", *base, "--severity", "nope", "--score", "1"]) == 2
    assert kdsm(["thresholds", "set", *base, "--severity", "warning", "--quantile", "1.5"]) == 2
    err = capsys.readouterr().err
    assert "unknown severity 'nope'" in err and "--quantile must be in (0, 1)" in err
    dead = _config(tmp_path, f"redis://127.0.0.1:{local_services.free_port()}/0", "x:")
    assert kdsm(["thresholds", "show", "--model", str(tiny_model_dir), "--config", dead]) == 2
    assert "unreachable" in capsys.readouterr().err


def test_live_thresholds_follow_a_change_within_2_seconds(redis_url, unique, model):
    prefix = f"kdsm-test-{unique}:"
    live = LiveThresholds(redis_url, prefix=prefix, refresh_s=1.0).start()
    try:
        assert live.get(model) == model.thresholds_
        store = ThresholdStore(connect(redis_url), prefix)
        for score in (0.25, 0.5):
            t0 = time.monotonic()
            store.set(model.version_, "warning", score, None, "test", model.thresholds_["warning"])
            assert wait_for(lambda s=score: live.get(model)["warning"] == s, timeout=2.0, every=0.01)
            assert time.monotonic() - t0 < 2.0
        assert live.redis_up
    finally:
        live.stop()


def test_live_thresholds_keep_only_the_serving_version_and_the_one_it_replaced(redis_url, unique):
    """A long-lived streamer that swapped through many versions refreshes two of them, not every version it ever
    served, and the kdsm_threshold series of the dropped ones go."""
    from types import SimpleNamespace

    from streamer.pipeline.metrics import StreamMetrics

    metrics = StreamMetrics()
    live = LiveThresholds(redis_url, prefix=f"kdsm-test-{unique}:", refresh_s=0.2, metrics=metrics)
    reads: dict[str, int] = {}
    real = live.store.overrides

    def counting(version):
        reads[version] = reads.get(version, 0) + 1
        return real(version)

    live.store.overrides = counting
    models = [SimpleNamespace(version_=f"v{i}", thresholds_={"warning": 1.0 + i, "critical": 2.0 + i}) for i in range(8)]
    live.start()
    try:
        for m in models:
            assert live.get(m) == m.thresholds_
        assert live.get(models[6]) == models[6].thresholds_  # back to the one it replaced: still cached
        time.sleep(0.5)  # a refresh that began before the swaps (its list of versions copied) ends in this window
        reads.clear()
        time.sleep(1.0)
        assert set(reads) == {"v6", "v7"}, reads

        def series() -> set[str]:
            return {line.split('version="')[1].split('"')[0] for line in metrics.render().decode().splitlines()
                    if line.startswith("kdsm_threshold{")}

        assert series() == {"v6", "v7"}
        assert live.get(models[0]) == models[0].thresholds_  # a rollback to a dropped version reads it again
        time.sleep(0.5)
        assert series() == {"v6", "v0"}  # v0 serves, v6 is the one it replaced
    finally:
        live.stop()


def test_the_threshold_gauge_shows_the_artifacts_thresholds_while_redis_is_unreachable(model):
    """kdsm_threshold{version,severity} was set only from a successful Redis read: a streamer started while Redis was
    down scored on the artifact's thresholds and showed none. It is set when a version is first served."""
    from streamer.pipeline.metrics import StreamMetrics

    metrics = StreamMetrics()
    live = LiveThresholds(f"redis://127.0.0.1:{local_services.free_port()}/0", prefix="kdsm-test-down:",
                          socket_timeout=0.2, metrics=metrics).start()
    try:
        assert live.get(model) == model.thresholds_ and not live.redis_up
        for sev, t in model.thresholds_.items():
            assert metrics.registry.get_sample_value("kdsm_threshold", {"version": model.version_, "severity": sev}) == t
    finally:
        live.stop()


def test_threshold_change_through_cli_changes_alerting_within_2s(tmp_path, capsys, kafka_bootstrap, redis_url, unique, tiny_model_dir, model):
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir))
    create_topics(s)
    cfg = _config(tmp_path, redis_url, s.redis.key_prefix)
    X = make_blobs(n=1400, seed=0)[0][1200:]
    scores = model.decision_function(X)
    names = model.feature_names_
    st = StreamerThread(s, sinks=[sink := Collect()]).start()
    try:
        produce(s, [event(f"a{i}", x, names) for i, x in enumerate(X)])
        assert wait_for(lambda: sink.distinct() >= len(X))
        before = sum(scores >= model.thresholds_["warning"])
        # Lower the warning threshold to the median normal score: about half the rows now alert.
        med = float(np.median(scores))
        _cli(capsys, "thresholds", "set", "--model", str(tiny_model_dir), "--config", cfg, "--severity", "warning", "--score", str(med))
        t0 = time.monotonic()
        assert wait_for(lambda: st.app.thresholds.get(model)["warning"] == med, timeout=2.0, every=0.01)
        assert time.monotonic() - t0 < 2.0
        produce(s, [event(f"b{i}", x, names) for i, x in enumerate(X)])
        assert wait_for(lambda: sink.distinct() >= 2 * len(X))
    finally:
        st.stop()
    alerts = [json.loads(r.value) for r in read_topic(kafka_bootstrap, s.kafka.alerts_topic, before + int(sum(scores >= med)), timeout=10)]
    a_alerts = {a["event_id"] for a in alerts if a["event_id"].startswith("a")}
    b_alerts = {a["event_id"] for a in alerts if a["event_id"].startswith("b")}
    assert len(a_alerts) == before
    assert b_alerts == {f"b{i}" for i in np.flatnonzero(scores >= med)}
    assert all(a["threshold"] == med for a in alerts if a["event_id"].startswith("b") and a["severity"] == "warning")


def test_redis_stopped_mid_stream_scoring_goes_on(tmp_path, kafka_bootstrap, unique, tiny_model_dir, model):
    svc = local_services.Service("redis", local_services.free_port(), tmp_path / "redis").start()
    try:
        s = make_settings(kafka_bootstrap, svc.url, unique, model=str(tiny_model_dir))
        s.redis.refresh_s = 0.3
        create_topics(s)
        # An override every event crosses, so we can see that the cached value stays in force.
        ThresholdStore(connect(svc.url), s.redis.key_prefix).set(model.version_, "warning", 0.0, None, "test", 1.0)
        names = model.feature_names_
        X = make_blobs(n=1300, seed=0)[0][1200:]
        st = StreamerThread(s, sinks=[sink := Collect()]).start()
        try:
            produce(s, [event(f"a{i}", x, names) for i, x in enumerate(X)])
            assert wait_for(lambda: sink.distinct() >= len(X))
            assert st.app.thresholds.redis_up
            svc.stop()
            assert wait_for(lambda: not st.app.thresholds.redis_up, timeout=5)
            produce(s, [event(f"b{i}", x, names) for i, x in enumerate(X)])
            assert wait_for(lambda: sink.distinct() >= 2 * len(X))
            metrics = st.app.metrics.render().decode()
        finally:
            st.stop()
        assert "kdsm_redis_up 0.0" in metrics
        alerts = [json.loads(r.value) for r in read_topic(kafka_bootstrap, s.kafka.alerts_topic, 2 * len(X), timeout=10)]
        assert {a["event_id"] for a in alerts} == {f"{p}{i}" for p in "ab" for i in range(len(X))}
    finally:
        svc.stop()


def test_thresholds_cli_follows_the_registry(redis_url, tiny_model_dir, tmp_path, unique, monkeypatch, capsys):
    """Without --model, `kdsm thresholds` acts on the registry's current version, not a stale stream.model."""
    import json as _json

    from streamer.lifecycle.registry import LocalArtifactStore, ModelRegistry
    from streamer.ops.cli import main

    monkeypatch.setenv("KDSM_REDIS__URL", redis_url)
    monkeypatch.setenv("KDSM_REDIS__KEY_PREFIX", f"reg{unique}:")
    monkeypatch.setenv("KDSM_REGISTRY__ENABLED", "true")
    monkeypatch.setenv("KDSM_REGISTRY__STORE_DIR", str(tmp_path / "store"))
    monkeypatch.setenv("KDSM_STREAM__MODEL", str(tmp_path / "stale-model-that-does-not-exist"))
    import redis

    reg = ModelRegistry(redis.Redis.from_url(redis_url, decode_responses=True), LocalArtifactStore(tmp_path / "store"),
                        f"reg{unique}:")
    version = reg.add(tiny_model_dir)
    reg.promote(version)
    capsys.readouterr()
    assert main(["thresholds", "show"]) == 0
    shown = _json.loads(capsys.readouterr().out)
    assert shown["version"] == version


def test_cli_refuses_a_negative_score_and_a_critical_below_warning(tmp_path, capsys, redis_url, redis_client, unique,
                                                                    tiny_model_dir, model):
    prefix = f"kdsm-test-{unique}:"
    base = ["--model", str(tiny_model_dir), "--config", _config(tmp_path, redis_url, prefix)]
    assert kdsm(["thresholds", "set", *base, "--severity", "warning", "--score", "-5"]) == 2
    err = capsys.readouterr().err
    assert "error" in err and "negative" in err and len(err.strip().splitlines()) == 1
    below = model.thresholds_["warning"] * 0.5
    assert kdsm(["thresholds", "set", *base, "--severity", "critical", "--score", str(below)]) == 2
    err = capsys.readouterr().err
    assert "critical" in err and "below warning" in err
    # a warning above the critical threshold is the same mistake from the other side
    assert kdsm(["thresholds", "set", *base, "--severity", "warning", "--score", str(model.thresholds_["critical"] * 2)]) == 2
    assert redis_client.hgetall(f"{prefix}thresholds:{model.version_}") == {}  # nothing reached the streamers
    assert kdsm(["thresholds", "set", *base, "--severity", "critical", "--score", str(model.thresholds_["critical"] * 2)]) == 0


def test_the_artifact_calibration_is_the_models_without_loading_it(tiny_model_dir, tmp_path):
    """What the thresholds commands read (metadata and calibration scores, no network) equals the loaded model's."""
    import shutil

    from offline_train.artifact import ArtifactError

    det, card = KDSM.load(tiny_model_dir, device="cpu"), ArtifactCalibration.read(tiny_model_dir)
    assert (card.version_, card.schema_hash_, card.thresholds_) == (det.version_, det.schema_hash_, det.thresholds_)
    np.testing.assert_array_equal(card.calibration_.scores, det.calibration_.scores)
    assert card.calibration_.threshold_for_quantile(0.97) == det.calibration_.threshold_for_quantile(0.97)
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    with open(broken / "weights.safetensors", "ab") as f:
        f.write(b"x")
    with pytest.raises(ArtifactError, match="checksum"):
        ArtifactCalibration.read(broken)


def test_reset_of_one_severity_keeps_the_order(tmp_path, capsys, redis_url, redis_client, unique, tiny_model_dir, model):
    """critical=3C, warning=2C, then `reset --severity critical` (back to C < 2C) is refused, naming warning."""
    prefix = f"kdsm-test-{unique}:"
    base = ["--model", str(tiny_model_dir), "--config", _config(tmp_path, redis_url, prefix)]
    crit = model.thresholds_["critical"]
    _cli(capsys, "thresholds", "set", *base, "--severity", "critical", "--score", str(3 * crit))
    _cli(capsys, "thresholds", "set", *base, "--severity", "warning", "--score", str(2 * crit))
    before = redis_client.hgetall(f"{prefix}thresholds:{model.version_}")
    assert kdsm(["thresholds", "reset", *base, "--severity", "critical"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "critical" in err and "below warning" in err
    assert "reset warning first" in err
    assert redis_client.hgetall(f"{prefix}thresholds:{model.version_}") == before  # nothing written, nothing audited
    assert len(redis_client.lrange(f"{prefix}thresholds:{model.version_}:audit", 0, -1)) == 2
    # The order the message names works; resetting all at once always does.
    _cli(capsys, "thresholds", "reset", *base, "--severity", "warning")
    _cli(capsys, "thresholds", "reset", *base, "--severity", "critical")
    _cli(capsys, "thresholds", "set", *base, "--severity", "critical", "--score", str(3 * crit))
    _cli(capsys, "thresholds", "set", *base, "--severity", "warning", "--score", str(2 * crit))
    assert _cli(capsys, "thresholds", "reset", *base)["reset"]
    assert redis_client.hgetall(f"{prefix}thresholds:{model.version_}") == {}


def test_two_operators_at_once_cannot_invert_the_order(redis_url, redis_client, unique, model, monkeypatch):
    """Operator B's critical change lands between operator A's read and write: A's write is retried and refused.

    Each change alone keeps warning <= critical (A: warning to the middle of [W, C]; B: critical to a quarter of the way),
    together they would invert it. The interleaving is forced by running B's whole `set` inside A's check.
    """
    from streamer.lifecycle import thresholds as th

    prefix = f"kdsm-test-{unique}:"
    w, c = model.thresholds_["warning"], model.thresholds_["critical"]
    a = th.ThresholdOps(ThresholdStore(connect(redis_url), prefix), model)
    b = th.ThresholdOps(ThresholdStore(connect(redis_url), prefix), model)
    real_check, calls = th.check_order, []

    def check_then_b_writes(artifact, proposed):
        calls.append(dict(proposed))
        if len(calls) == 1:  # A has read the overrides and is checking: B commits its change now
            b.set("critical", score=w + 0.25 * (c - w), by="bob")
        real_check(artifact, proposed)

    monkeypatch.setattr(th, "check_order", check_then_b_writes)
    with pytest.raises(th.ThresholdError, match="critical .* would be below warning"):
        a.set("warning", score=w + 0.5 * (c - w), by="alice")
    monkeypatch.undo()
    assert len(calls) == 3  # A's first check, B's check, A's re-check on the values B wrote
    eff = a.show()["effective"]
    assert eff["warning"]["score"] == w and eff["critical"]["score"] == pytest.approx(w + 0.25 * (c - w))
    assert eff["warning"]["score"] <= eff["critical"]["score"]
    assert [e["by"] for e in a.store.audit(model.version_)] == ["bob"]
