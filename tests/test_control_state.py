"""Bad state in the Redis control plane, against a real Redis: what an operator may write by hand with redis-cli.

A threshold record that is no threshold, a key of the wrong Redis type, a damaged registry entry, a lock that never
expires: the streamer keeps scoring on a safe value (and says so once), the commands answer in one line, never a
traceback.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
import yaml

from offline_train.detector import KDSM
from streamer.config import Settings
from streamer.lifecycle.control import connect
from streamer.lifecycle.registry import ModelRegistry, RegistryError
from streamer.lifecycle.thresholds import LiveThresholds, ThresholdOps, ThresholdStore
from streamer.ops.cli import main as kdsm

pytestmark = pytest.mark.integration

# Written by hand: no number, NaN (never alerts), inf (never alerts), negative (alerts on every event), a boolean,
# bytes that are not UTF-8 (the client decodes replies as UTF-8: UnicodeDecodeError), JSON with such bytes in it.
NOT_UTF8 = b"\xff\xfe"
# JSON nested deeper than the parser goes (it raised RecursionError, not ValueError: every streamer crashed)
TOO_DEEP = "[" * 5000 + "]" * 5000
NO_THRESHOLD = ["7.5 please", '{"score": NaN}', '{"score": "nan"}', '{"score": "inf"}', '{"score": 1e999}',
                '{"score": -5}', '{"score": true}', '{"score": ""}', "[1]", "", NOT_UTF8, b'{"score": 5, "by": "\xff"}',
                # an integer no float holds (float() raised OverflowError: every streamer crashed), and TOO_DEEP
                '{"score": 1' + "0" * 400 + "}", TOO_DEEP]


def _as_shown(value) -> str:
    """A value written with redis-cli as kdsm shows it: bytes that are not UTF-8 as U+FFFD."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


@pytest.fixture
def model(tiny_model_dir):
    return KDSM.load(tiny_model_dir, device="cpu")


@pytest.fixture
def prefix(unique) -> str:
    return f"state-{unique}:"


@pytest.fixture
def config(tmp_path, redis_url, prefix) -> str:
    p = tmp_path / "kdsm.yaml"
    p.write_text(yaml.safe_dump({"redis": {"url": redis_url, "key_prefix": prefix},
                                 "registry": {"store_dir": str(tmp_path / "store")}}))
    return str(p)


def _strict_json(text: str):
    """JSON as other tools read it: NaN and Infinity are not JSON."""
    def refuse(name):
        raise ValueError(f"{name} in the output")
    return json.loads(text, parse_constant=refuse)


def _one_line_error(capsys, argv: list[str], code: int = 2) -> str:
    capsys.readouterr()  # what came before
    assert kdsm(argv) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.events: list[dict] = []

    def emit(self, record):
        if isinstance(record.msg, dict):
            self.events.append(record.msg)


@pytest.fixture
def logged():
    """``logged(*names)``: a handler that collects those loggers' events (dicts, warning and above) until the test
    ends."""
    attached = []

    def attach(*names: str) -> _Records:
        seen = _Records()
        for name in names:
            logging.getLogger(name).addHandler(seen)
            attached.append((name, seen))
        return seen

    yield attach
    for name, seen in attached:
        logging.getLogger(name).removeHandler(seen)


# ---------------------------------------------------------------------- thresholds
def test_a_threshold_record_that_is_no_threshold_is_ignored_by_streamers_and_commands(redis_client, redis_url, prefix,
                                                                                        config, tiny_model_dir, model,
                                                                                        capsys):
    key = f"{prefix}thresholds:{model.version_}"
    for text in NO_THRESHOLD:
        redis_client.delete(key)
        redis_client.hset(key, "warning", text)
        # A streamer that starts now reads it: the artifact's threshold applies, not NaN, inf or -5.
        assert LiveThresholds(redis_url, prefix=prefix).get(model)["warning"] == model.thresholds_["warning"], text
        assert kdsm(["thresholds", "show", "--model", str(tiny_model_dir), "--config", config]) == 0
        shown = _strict_json(capsys.readouterr().out)
        assert shown["effective"]["warning"]["source"] == "artifact", text
        why = "not UTF-8" if isinstance(text, bytes) else "not JSON with a finite score >= 0"
        assert shown["ignored"] == {"warning": {"record": _as_shown(text), "why": why}} and shown["overrides"] == {}
        # A change reads the same record: set and reset go on around it.
        capsys.readouterr()
        assert kdsm(["thresholds", "set", "--model", str(tiny_model_dir), "--config", config, "--severity", "critical",
                     "--score", str(model.thresholds_["critical"])]) == 0, text
        assert kdsm(["thresholds", "reset", "--model", str(tiny_model_dir), "--config", config]) == 0, text
        capsys.readouterr()
        assert redis_client.hgetall(key) == {}
    # A usable record still applies, and a number written as a string is one.
    redis_client.hset(key, "warning", json.dumps({"score": str(model.thresholds_["critical"])}))
    assert LiveThresholds(redis_url, prefix=prefix).get(model)["warning"] == model.thresholds_["critical"]


def test_a_bad_threshold_record_is_logged_once_not_at_every_refresh(redis_client, redis_url, prefix, model, logged):
    redis_client.hset(f"{prefix}thresholds:{model.version_}", "warning", '{"score": NaN}')
    seen = logged("kdsm.thresholds")
    live = LiveThresholds(redis_url, prefix=prefix, refresh_s=0.1).start()
    try:
        live.get(model)
        time.sleep(1.0)  # about ten refreshes
    finally:
        live.stop()
    bad = [e for e in seen.events if e.get("event") == "bad_threshold_record"]
    assert len(bad) == 1 and bad[0]["severity"] == "warning"


def test_a_threshold_record_that_is_not_utf8_does_not_stop_a_streamer(redis_client, redis_url, prefix, model,
                                                                      logged):
    """At start-up (the first, synchronous read) it raised UnicodeDecodeError: the streamer crashed, every restart too;
    while running, each refresh read as redis_down (kdsm_redis_up 0)."""
    key = f"{prefix}thresholds:{model.version_}"
    redis_client.hset(key, "warning", NOT_UTF8)
    seen = logged("kdsm.thresholds")
    live = LiveThresholds(redis_url, prefix=prefix, refresh_s=0.1)
    try:
        assert live.get(model) == model.thresholds_ and live.redis_up  # the streamer's start-up read
        live.start()
        redis_client.hset(key, "critical", NOT_UTF8)  # written while it runs
        time.sleep(1.0)
        assert live.get(model) == model.thresholds_ and live.redis_up
    finally:
        live.stop()
    events = [e.get("event") for e in seen.events]
    assert "redis_down" not in events
    assert sorted(e["severity"] for e in seen.events if e.get("event") == "bad_threshold_record") == ["critical", "warning"]


def test_a_warning_set_equal_to_the_critical_labels_critical_events_critical(redis_client, redis_url, prefix, config,
                                                                             tiny_model_dir, model):
    """The artifact's JSON sorts its keys (critical before warning), and a tie went to the name sorted last: with
    warning set to critical's score every critical event alerted as a warning (and nothing paged on critical)."""
    assert list(model.thresholds_) == ["warning", "critical"]  # mildest first, as loaded
    critical = model.thresholds_["critical"]
    assert kdsm(["thresholds", "set", "--model", str(tiny_model_dir), "--config", config, "--severity", "warning",
                 "--score", repr(critical)]) == 0
    live = LiveThresholds(redis_url, prefix=prefix).get(model)
    assert live == {"warning": critical, "critical": critical}
    assert model.severity([critical, 2 * critical, critical / 2], live).tolist() == ["critical", "critical", ""]
    # Critical can still rise above the tied warning; it cannot go below it.
    assert kdsm(["thresholds", "set", "--model", str(tiny_model_dir), "--config", config, "--severity", "critical",
                 "--score", repr(critical * 2)]) == 0
    assert kdsm(["thresholds", "set", "--model", str(tiny_model_dir), "--config", config, "--severity", "critical",
                 "--score", repr(critical / 2)]) == 2


def test_a_hand_written_set_out_of_order_is_refused_and_the_thresholds_in_force_kept(redis_client, redis_url, prefix,
                                                                                    model, logged):
    """``kdsm thresholds set`` refuses a warning above the critical; written by hand (redis-cli HSET) it was applied as
    written: every critical event alerted as a warning. The streamer refuses the set, keeps what it had, says so once."""
    key = f"{prefix}thresholds:{model.version_}"
    warning, critical = model.thresholds_["warning"], model.thresholds_["critical"]
    above = critical * 2 + 1.0
    redis_client.hset(key, "warning", json.dumps({"score": above}))
    seen = logged("kdsm.thresholds")
    live = LiveThresholds(redis_url, prefix=prefix, refresh_s=0.1)
    try:
        assert live.get(model) == model.thresholds_  # the start-up read: the artifact's, not the set
        live.start()
        time.sleep(1.0)  # about ten refreshes
        assert live.get(model) == model.thresholds_
        bad = [e for e in seen.events if e.get("event") == "bad_thresholds"]
        assert len(bad) == 1, bad
        assert bad[0]["thresholds"] == {"warning": above, "critical": critical}
        assert bad[0]["kept"] == model.thresholds_ and "critical" in bad[0]["why"]
        assert "reset --severity warning" in bad[0]["action"]
        # ``show`` says the set is refused, not in force, and which reset restores the order.
        shown = ThresholdOps(ThresholdStore(connect(redis_url), prefix), model).show()
        assert shown["refused"]["pair"] == ["warning", "critical"]
        assert shown["refused"]["repair"] == ["kdsm thresholds reset --severity warning"]
        assert shown["effective"]["warning"]["source"] == "refused"
        assert shown["effective"]["critical"]["source"] == "artifact"
        # A valid override applies; an out-of-order one written after it keeps that override, not the artifact's.
        mid = (warning + critical) / 2
        redis_client.hset(key, "warning", json.dumps({"score": mid}))
        assert _until(lambda: live.get(model)["warning"] == mid, timeout=5.0)
        redis_client.hset(key, "critical", json.dumps({"score": mid / 2}))
        assert _until(lambda: len([e for e in seen.events if e.get("event") == "bad_thresholds"]) == 2, timeout=5.0)
        time.sleep(0.5)
        assert live.get(model) == {"warning": mid, "critical": critical}
        (second,) = [e for e in seen.events if e.get("event") == "bad_thresholds"][1:]
        assert second["thresholds"] == {"warning": mid, "critical": mid / 2}
        assert second["kept"] == {"warning": mid, "critical": critical}
        assert "reset --severity critical" in second["action"]  # resetting the hand-written critical restores it
        # The order restored: the set applies.
        redis_client.hset(key, "critical", json.dumps({"score": above}))
        assert _until(lambda: live.get(model) == {"warning": mid, "critical": above}, timeout=5.0)
        assert live.redis_up
    finally:
        live.stop()
    assert len([e for e in seen.events if e.get("event") == "bad_thresholds"]) == 2


def _until(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_notification_that_is_not_utf8_is_ignored_by_the_watchers(registered, redis_client, redis_url, prefix, model,
                                                                    logged):
    """A PUBLISH by hand that is not UTF-8 raised UnicodeDecodeError in the watcher: the threshold watcher logged
    redis_down (kdsm_redis_up 0), the registry's registry_watch_failed, and both dropped their subscription."""
    from streamer.lifecycle.registry import RegistryModelProvider

    reg, _ = registered
    seen = logged("kdsm.control", "kdsm.thresholds", "kdsm.registry")
    # Long periods: only a notification refreshes them during the test.
    live = LiveThresholds(redis_url, prefix=prefix, refresh_s=60.0)
    live.get(model)
    live.start()
    prov = RegistryModelProvider(reg, device="cpu", check_interval_s=60.0, fallback=model)
    channels = [f"{prefix}thresholds:changed", reg.keys.channel]
    try:
        assert _until(lambda: all(n >= 1 for _, n in redis_client.pubsub_numsub(*channels)))
        for channel in channels:
            redis_client.publish(channel, NOT_UTF8)
        assert _until(lambda: len([e for e in seen.events if e.get("event") == "bad_notification"]) == 2)
        # The subscription stays and serves the next notification (kdsm thresholds set publishes the version).
        redis_client.hset(f"{prefix}thresholds:{model.version_}", "warning",
                          json.dumps({"score": model.thresholds_["critical"]}))
        redis_client.publish(channels[0], model.version_)
        assert _until(lambda: live.get(model)["warning"] == model.thresholds_["critical"], timeout=5.0)
        assert live.redis_up and live._watcher.is_alive() and prov._watcher.is_alive()
    finally:
        live.stop()
        prov.close()
    events = [e.get("event") for e in seen.events]
    assert "redis_down" not in events and "registry_watch_failed" not in events, seen.events
    bad = [e for e in seen.events if e.get("event") == "bad_notification"]
    assert sorted(e["channel"] for e in bad) == sorted(channels) and all(e["action"] == "ignored" for e in bad)


class _Timed(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[tuple[float, dict]] = []

    def emit(self, record):
        if isinstance(record.msg, dict) and record.msg.get("event") == "bad_notification":
            self.lines.append((record.created, record.msg))


@pytest.mark.parametrize("every_s", [60.0, 0.5])
def test_bad_notifications_are_rate_limited_and_counted(redis_client, redis_url, prefix, every_s):
    """One warning per notification: a publisher flooding the channel flooded the log. Now the first at once, then
    at most one line per ``every_s`` with the count ignored since (the rest when the watcher stops): the counts add up,
    and the subscription serves the notifications between them."""
    from streamer.lifecycle.control import ChannelWatcher

    channel, n = f"{prefix}flood", 40
    got, errors = [], []
    seen = _Timed()
    logging.getLogger("kdsm.control").addHandler(seen)
    w = ChannelWatcher(connect(redis_url), channel, period_s=60.0, on_message=got.append, on_tick=lambda: None,
                       on_error=errors.append, wait_s=0.1, bad_every_s=every_s).start()
    try:
        assert _until(lambda: redis_client.pubsub_numsub(channel)[0][1] >= 1)
        start = time.monotonic()
        for i in range(n):
            redis_client.publish(channel, NOT_UTF8 + b"%d" % i)
            if i == n // 2:
                redis_client.publish(channel, "v1")
        assert _until(lambda: got == ["v1"])
        assert _until(lambda: len(seen.lines) >= 1)
        first = seen.lines[0][1]
        assert first["count"] == 1 and first["channel"] == channel and first["action"] == "ignored"
        if every_s < 1:  # the period ends: the rest come in a line of their own, without the watcher stopping
            assert _until(lambda: sum(m["count"] for _, m in seen.lines) == n)
            assert seen.lines[-1][1]["data"] == _as_shown(NOT_UTF8 + b"%d" % (n - 1))
        else:
            time.sleep(0.5)
            assert len(seen.lines) == 1
        published_in = time.monotonic() - start
    finally:
        w.stop()
        logging.getLogger("kdsm.control").removeHandler(seen)
    assert not errors and got == ["v1"]
    counts = [m["count"] for _, m in seen.lines]
    assert sum(counts) == n  # every one ignored is counted, the last ones in the line the stop writes
    assert len(counts) < n and len(counts) <= 2 + published_in / every_s, counts
    times = [t for t, _ in seen.lines]
    if every_s >= 1:
        assert counts == [1, n - 1]  # the first at once, the rest when the watcher stops
    else:
        assert all(b - a >= every_s * 0.9 for a, b in zip(times, times[1:], strict=False)), times


def test_a_flood_of_notifications_does_not_starve_the_periodic_re_read(redis_client, redis_url, prefix):
    """The re-read (``on_tick``) ran only on a pass with no message: while a publisher kept the channel busy with
    messages that are not UTF-8 it never ran, so a record written without a notification (redis-cli HSET) was never
    read. (A valid notification postpones the re-read: it triggers a read of its own.)"""
    from streamer.lifecycle.control import ChannelWatcher

    channel, ticks, errors = f"{prefix}busy", [], []
    w = ChannelWatcher(connect(redis_url), channel, period_s=0.2, on_message=lambda _: None,
                       on_tick=lambda: ticks.append(time.monotonic()), on_error=errors.append, wait_s=0.1,
                       bad_every_s=60.0).start()
    stop = threading.Event()

    def flood():
        while not stop.is_set():
            redis_client.publish(channel, NOT_UTF8)

    try:
        assert _until(lambda: redis_client.pubsub_numsub(channel)[0][1] >= 1)
        flooder = threading.Thread(target=flood, daemon=True)
        flooder.start()
        time.sleep(0.3)  # the channel is busy from here on
        before = len(ticks)
        time.sleep(1.5)
        assert len(ticks) - before >= 4, ticks  # about every 0.2 s, flood or not
    finally:
        stop.set()
        w.stop()
    assert not errors


def test_reset_removes_unreadable_records_and_those_of_severities_the_model_lacks(redis_client, prefix, config,
                                                                                   tiny_model_dir, model, capsys):
    key = f"{prefix}thresholds:{model.version_}"
    base = ["--model", str(tiny_model_dir), "--config", config]
    redis_client.hset(key, mapping={"warning": '{"score": NaN}', "critical": "oops", "warnin": '{"score": 5}',
                                    "criticl": NOT_UTF8, b"\xfa": '{"score": 6}',
                                    b"\xfb": "x"})
    # show: a valid record under a severity the model lacks is no override (no streamer applies it): it is ignored.
    assert kdsm(["thresholds", "show", *base]) == 0
    shown = _strict_json(capsys.readouterr().out)
    assert shown["overrides"] == {}
    assert shown["ignored"]["warnin"]["record"] == {"score": 5.0} and "no severity 'warnin'" in shown["ignored"]["warnin"]["why"]
    assert shown["ignored"]["\ufffd"]["record"] == {"score": 6.0}
    assert shown["ignored"]["criticl"] == {"record": "\ufffd\ufffd", "why": "not UTF-8"}
    assert kdsm(["thresholds", "reset", *base, "--severity", "warning"]) == 0
    out = _strict_json(capsys.readouterr().out)
    assert [(e["severity"], e["old"]) for e in out["reset"]] == [("warning", None)]
    assert sorted(redis_client.execute_command("HKEYS", key, NEVER_DECODE=True)) == [
        b"critical", b"criticl", b"warnin", b"\xfa", b"\xfb"]
    # What the bad_threshold_record line advises for a severity the model lacks works (it was "unknown severity").
    assert kdsm(["thresholds", "reset", *base, "--severity", "warnin"]) == 0
    out = _strict_json(capsys.readouterr().out)
    assert [(e["severity"], e["old"], e["new"]) for e in out["reset"]] == [("warnin", 5.0, None)]
    # A severity the model lacks and Redis does not hold is still refused.
    assert kdsm(["thresholds", "reset", *base, "--severity", "nosuch"]) == 2
    err = capsys.readouterr().err  # the bad_threshold_record log lines of this process, then the error
    assert "Traceback" not in err and "unknown severity 'nosuch'" in err.splitlines()[-1]
    assert kdsm(["thresholds", "reset", *base]) == 0  # all: the rest, also a field name that is not UTF-8
    out = _strict_json(capsys.readouterr().out)
    assert {e["severity"]: (e["old"], e["new"]) for e in out["reset"]} == {
        "critical": (None, model.thresholds_["critical"]), "criticl": (None, None),
        "\ufffd": (None, None)}  # two names that are not UTF-8, one unreadable record: both deleted
    assert redis_client.hgetall(key) == {}


def test_the_bad_record_log_line_names_a_reset_that_works(redis_client, prefix, config, tiny_model_dir, model, capsys,
                                                          logged):
    key = f"{prefix}thresholds:{model.version_}"
    redis_client.hset(key, "warnin", "oops")
    seen = logged("kdsm.thresholds")
    assert kdsm(["thresholds", "show", "--model", str(tiny_model_dir), "--config", config]) == 0
    (line,) = [e for e in seen.events if e.get("event") == "bad_threshold_record"]
    argv = line["action"].split("`")[1].split()[1:]  # kdsm thresholds reset --severity warnin
    capsys.readouterr()
    assert kdsm([*argv, "--model", str(tiny_model_dir), "--config", config]) == 0
    assert redis_client.hgetall(key) == {}


def test_a_change_writes_no_override_without_its_audit_entry(redis_client, redis_url, prefix, model):
    """The audit key changes type between the check and EXEC: the override was written, its audit entry not."""
    from streamer.lifecycle.thresholds import ThresholdError, ThresholdStore

    store = ThresholdStore(connect(redis_url), prefix)
    key, audit = store.key(model.version_), store.audit_key(model.version_)
    calls = []

    def plan(over, ignored):
        if not calls:
            redis_client.set(audit, "written meanwhile")  # another client, after the read, before EXEC
        calls.append(1)
        return {"warning": {"score": 1.0}}, [], [{"action": "set", "severity": "warning"}]

    with pytest.raises(ThresholdError, match=f"{audit} holds a string"):
        store.change(model.version_, plan)
    assert redis_client.hgetall(key) == {} and redis_client.get(audit) == "written meanwhile"


def test_threshold_keys_of_the_wrong_type(redis_client, redis_url, prefix, config, tiny_model_dir, model, capsys):
    key, audit = f"{prefix}thresholds:{model.version_}", f"{prefix}thresholds:{model.version_}:audit"
    base = ["--model", str(tiny_model_dir), "--config", config]
    redis_client.set(key, "hello")
    for argv in (["show"], ["set", "--severity", "warning", "--score", "50"], ["reset"]):
        err = _one_line_error(capsys, ["thresholds", argv[0], *base, *argv[1:]])
        assert key in err and "holds a string, not the hash" in err and f"redis-cli DEL {key}" in err
    assert redis_client.get(key) == "hello"  # nothing overwritten
    # A streamer: Redis answers (not "redis_down"), the overrides are unusable, the artifact's thresholds apply.
    live = LiveThresholds(redis_url, prefix=prefix, refresh_s=0.2).start()
    try:
        assert live.get(model) == model.thresholds_ and live.redis_up
    finally:
        live.stop()
    # The report says which thresholds it used, and why.
    from streamer.ops.threshold_report import current_thresholds

    s = Settings()
    s.redis.url, s.redis.key_prefix = redis_url, prefix
    assert current_thresholds(s, model) == (model.thresholds_, "artifact (the overrides key is unusable)")

    # The audit list of the wrong type: the change is refused before anything is written (no unaudited change).
    redis_client.delete(key)
    redis_client.set(audit, "x")
    err = _one_line_error(capsys, ["thresholds", "set", *base, "--severity", "critical", "--score", "50"])
    assert audit in err and "not the list" in err
    assert redis_client.hgetall(key) == {}


@pytest.mark.parametrize("text", ["garbage", NOT_UTF8, b'{"by": "\xff"}', TOO_DEEP])
def test_an_unreadable_audit_record_is_shown_as_it_is(redis_client, prefix, config, tiny_model_dir, model, capsys, text):
    """Not JSON, or not UTF-8: shown as unreadable, not a traceback."""
    audit = f"{prefix}thresholds:{model.version_}:audit"
    base = ["--model", str(tiny_model_dir), "--config", config]
    redis_client.lpush(audit, text)
    assert kdsm(["thresholds", "set", *base, "--severity", "critical", "--score", "50", "--by", "ann"]) == 0
    capsys.readouterr()
    assert kdsm(["thresholds", "show", *base]) == 0
    shown = _strict_json(capsys.readouterr().out)
    assert [a.get("by", a.get("unreadable")) for a in shown["audit"]] == ["ann", _as_shown(text)]


# ---------------------------------------------------------------------- registry
@pytest.fixture
def registered(redis_url, prefix, tmp_path, tiny_model_dir):
    from streamer.lifecycle.registry import ArtifactStore

    reg = ModelRegistry(connect(redis_url), ArtifactStore(tmp_path / "store"), prefix)
    v = reg.add(tiny_model_dir)
    reg.promote(v)
    return reg, v


@pytest.mark.parametrize("text", ["garbage", "5", "[1, 2]", '"str"', "null", "", NOT_UTF8, b'{"version": "\xff"}',
                                  TOO_DEEP])
def test_a_damaged_registry_entry_is_one_line_and_does_not_hide_the_others(registered, redis_client, config, capsys,
                                                                            text):
    reg, v = registered
    reg.register("other", {"status": "registered"})
    key = reg.keys.version(v)
    redis_client.set(key, text)
    assert kdsm(["models", "list", "--config", config]) == 0
    listed = {m["version"]: m for m in json.loads(capsys.readouterr().out)}
    assert listed["other"]["status"] == "registered"
    assert listed[v]["status"] == "unreadable" and key in listed[v]["error"] and listed[v]["current"]
    for argv in (["show", v], ["promote", v]):
        err = _one_line_error(capsys, ["models", *argv, "--config", config])
        assert key in err and "not a JSON object" in err and f"redis-cli DEL {key}" in err
    # The repair the line names works.
    redis_client.delete(key)
    assert kdsm(["models", "add", "--config", config, "--model", str(reg.store.location(v))]) == 0
    capsys.readouterr()
    assert reg.get(v)["version"] == v


def test_registry_fields_of_the_wrong_shape_are_listed(registered, redis_client, config, capsys):
    reg, v = registered
    redis_client.set(reg.keys.version(v), json.dumps({"version": v, "status": "rejected", "gate": "no", "data_window": 7}))
    assert kdsm(["models", "list", "--config", config]) == 0
    (m,) = json.loads(capsys.readouterr().out)
    assert m["gate"] is None and m["rows"] is None
    err = _one_line_error(capsys, ["models", "promote", v, "--config", config])
    assert "validation gate (no)" in err


@pytest.mark.parametrize("which,kind", [("pointers", "hash"), ("versions", "zset"), ("log", "stream")])
def test_registry_keys_of_the_wrong_type(registered, redis_client, config, capsys, which, kind):
    reg, v = registered
    key = getattr(reg.keys, which)
    redis_client.delete(key)
    redis_client.set(key, "x")
    argvs = {"pointers": [["list"], ["promote", v], ["rollback"]], "versions": [["list"]],
             "log": [["promote", v, "--force"]]}[which]
    if which == "log":
        redis_client.hset(reg.keys.pointers, "current", "")  # so that the promote moves the pointer and logs it
    for argv in argvs:
        err = _one_line_error(capsys, ["models", *argv, "--config", config])
        assert f"Redis key {key} holds a string, not the {kind}" in err
    with pytest.raises(RegistryError, match=key):
        reg.list() if which != "log" else reg.history()


def test_a_refused_pointer_move_or_prune_changes_nothing_and_publishes_nothing(registered, redis_client, redis_url,
                                                                                config, capsys, tiny_model_dir):
    """An audit stream of the wrong type: the scripts moved the pointers and published (streamers swapped), or removed
    the entry (its artifact left for good), before XADD failed, and then reported failure."""
    reg, v = registered
    for name in ("old", "w"):
        reg.store.put(name, tiny_model_dir)
        reg.register(name, {"status": "registered"})
    redis_client.zadd(reg.keys.versions, {"old": 1.0})  # the oldest: what the prune removes
    reg.promote("w")  # current w, previous v: a rollback has somewhere to go
    redis_client.delete(reg.keys.log)
    redis_client.set(reg.keys.log, "oops")

    def state():
        return (redis_client.hgetall(reg.keys.pointers), redis_client.zrange(reg.keys.versions, 0, -1, withscores=True),
                {m: redis_client.get(reg.keys.version(m)) for m in (v, "old", "w")})

    before = state()
    sub = connect(redis_url).pubsub()  # what a streamer hears
    sub.subscribe(reg.keys.channel)
    assert sub.get_message(timeout=1)["type"] == "subscribe"
    for argv in (["promote", v], ["rollback"], ["prune", "--keep", "1"]):
        err = _one_line_error(capsys, ["models", *argv, "--config", config])
        assert f"Redis key {reg.keys.log} holds a string, not the stream" in err, (argv, err)
        assert state() == before, argv
        assert sub.get_message(timeout=0.5) is None, argv
    assert reg.store.exists("old")
    sub.close()


def test_a_registry_entry_that_is_not_utf8_is_a_registry_error(registered, redis_client):
    reg, v = registered
    redis_client.set(reg.keys.version(v), NOT_UTF8)
    with pytest.raises(RegistryError, match="not a JSON object \\(not UTF-8\\)"):
        reg.get(v)
    assert [m["status"] for m in reg.list()] == ["unreadable"]


@pytest.mark.parametrize("field", ["current", "previous"])
def test_a_pointer_that_is_not_utf8_is_one_line_in_the_commands(registered, redis_client, config, capsys, monkeypatch,
                                                                field):
    """UnicodeDecodeError (a ValueError, not a RedisError) was a traceback in every command that reads the pointers."""
    reg, v = registered
    key = reg.keys.pointers
    redis_client.hset(key, field, NOT_UTF8)
    argvs = [["list"], ["show", v], ["rollback"]] + ([["promote", v]] if field == "current" else [])
    for argv in argvs:
        err = _one_line_error(capsys, ["models", *argv, "--config", config])
        assert f"{key} field {field}" in err and "not UTF-8" in err and f"redis-cli HDEL {key} {field}" in err, err
    if field == "current":  # the model a threshold command reads: the registry's current version
        monkeypatch.setenv("KDSM_REGISTRY__ENABLED", "true")
        err = _one_line_error(capsys, ["thresholds", "show", "--config", config])
        assert f"redis-cli HDEL {key} current" in err, err
        monkeypatch.delenv("KDSM_REGISTRY__ENABLED")
    # The repair the line names works.
    redis_client.hdel(key, field)
    if field == "current":
        assert kdsm(["models", "promote", v, "--config", config]) == 0
    capsys.readouterr()
    assert kdsm(["models", "list", "--config", config]) == 0
    assert json.loads(capsys.readouterr().out)[0]["current"]


def test_a_current_pointer_that_is_not_utf8_is_refused_by_a_streamer_like_any_garbage_version(registered, redis_client,
                                                                                              model, logged):
    """The start-up read logged registry_unreachable; the watcher's every check failed (registry_watch_failed)."""
    from streamer.lifecycle.registry import RegistryModelProvider

    reg, _ = registered
    key = reg.keys.pointers
    seen = logged("kdsm.registry")
    for start in (NOT_UTF8, "garbage"):
        redis_client.hset(key, "current", start)
        prov = RegistryModelProvider(reg, device="cpu", check_interval_s=0.1, fallback=model)
        try:
            assert prov.current() is model  # the streamer starts, on its fallback
            redis_client.hset(key, "current", b"\xfe" + start.encode() if isinstance(start, str) else b"\xfe")
            assert prov.check() is False
            time.sleep(0.5)
            assert prov._watcher.is_alive() and prov.current() is model
        finally:
            prov.close()
    events = [e.get("event") for e in seen.events]
    assert "registry_unreachable" not in events and "registry_watch_failed" not in events, seen.events
    refused = [e for e in seen.events if e.get("event") == "model_refused"]
    assert any(f"redis-cli HDEL {key} current" in e["why"] for e in refused), refused
    assert any(e["version"] == "garbage" for e in refused)  # the same path: refused, logged, the old model serves


def test_a_pointers_key_of_the_wrong_type_is_logged_as_such_by_a_streamer(registered, redis_client, model, logged):
    """A streamer logged registry_unreachable at start-up (Redis answers), then registry_watch_failed at every check."""
    from streamer.lifecycle.registry import RegistryModelProvider

    reg, v = registered
    key = reg.keys.pointers
    redis_client.delete(key)
    redis_client.set(key, "x")
    seen = logged("kdsm.registry")
    prov = RegistryModelProvider(reg, device="cpu", check_interval_s=0.1, fallback=model)
    try:
        assert prov.current() is model  # the streamer starts, on its fallback
        time.sleep(0.6)  # about six checks
        assert prov._watcher.is_alive() and prov.current() is model
        # The repair the line names works: the streamer follows the registry again, silently.
        redis_client.delete(key)
        reg.promote(v)
        time.sleep(0.3)
    finally:
        prov.close()
    events = [e.get("event") for e in seen.events]
    assert "registry_unreachable" not in events and "registry_watch_failed" not in events, seen.events
    (bad,) = [e for e in seen.events if e.get("event") == "bad_registry_key"]  # once, not at every check
    assert f"Redis key {key} holds a string, not the hash" in bad["error"] and f"redis-cli DEL {key}" in bad["error"]
    assert bad["action"] == "serving the fallback model"


def test_a_version_member_or_log_record_that_is_not_utf8_is_listed_not_a_traceback(registered, redis_client, config,
                                                                                   capsys):
    reg, v = registered
    redis_client.zadd(reg.keys.versions, {NOT_UTF8: 1.5})
    redis_client.xadd(reg.keys.log, {"action": NOT_UTF8, NOT_UTF8: "x"})
    assert [h["action"] for h in reg.history()] == ["\ufffd\ufffd", "promote"]
    assert kdsm(["models", "list", "--config", config]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [m["status"] for m in listed] == ["promoted", "unreadable"]
    err = listed[1]["error"]
    assert reg.keys.versions in err and "not UTF-8" in err
    # The repair the line names works.
    repair = err.split("(redis-cli ", 1)[1].rstrip(")").split()
    redis_client.execute_command(*repair)
    assert [m["version"] for m in reg.list()] == [v]


# ---------------------------------------------------------------------- retrain
def test_a_request_stream_of_the_wrong_type_is_one_line(redis_client, config, prefix, capsys):
    key = f"{prefix}retrain:requests"
    redis_client.set(key, "x")
    for argv in (["--request"], ["--watch", "--max-runs", "1"]):
        err = _one_line_error(capsys, ["retrain", *argv, "--config", config])
        assert f"Redis key {key} holds a string, not the stream" in err
    assert redis_client.get(key) == "x"


@pytest.mark.parametrize("write", ["string", "hash"])
def test_a_lock_key_that_never_expires_fails_the_retrain_instead_of_skipping_it_for_ever(redis_client, config, prefix,
                                                                                          capsys, write):
    key = f"{prefix}retrain:lock"
    (redis_client.set(key, "held by hand") if write == "string" else redis_client.hset(key, "a", "b"))
    assert kdsm(["retrain", "--config", config, "--log-level", "ERROR"]) == 1
    res = json.loads(capsys.readouterr().out)
    assert res["status"] == "failed" and f"redis-cli DEL {key}" in res["reason"]
    # A lock that expires is another retrain's: nothing to do, exit 0.
    redis_client.delete(key)
    redis_client.set(key, "token", px=60_000)
    assert kdsm(["retrain", "--config", config, "--log-level", "ERROR"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "locked"


def test_promote_refuses_a_damaged_artifact(registered, redis_client, config, capsys):
    """A damaged current version would leave a streamer that starts without a fallback with no model to serve."""
    reg, v = registered
    reg.register("damaged", {"status": "registered"})
    reg.store.put("damaged", reg.store.location(v))
    with open(reg.store.location("damaged") / "weights.safetensors", "ab") as f:
        f.write(b"x")
    err = _one_line_error(capsys, ["models", "promote", "damaged", "--force", "--config", config])
    assert "damaged" in err and "checksum" in err
    assert reg.pointers()["current"] == v


def test_rollback_refuses_a_damaged_previous_artifact(registered, redis_client, config, capsys):
    """Rollback moved the pointer to a damaged artifact without a look: a streamer starting without a fallback had no
    model to serve."""
    import shutil

    reg, v = registered
    reg.register("other", {"status": "registered"})
    reg.store.put("other", reg.store.location(v))
    reg.promote("other")
    weights = reg.store.location(v) / "weights.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good + b"x")
    before, log_len = reg.pointers(), redis_client.xlen(reg.keys.log)
    err = _one_line_error(capsys, ["models", "rollback", "--config", config])
    assert f"version {v} is damaged in the store, nothing rolled back" in err and "checksum" in err, err
    assert reg.pointers() == before == {"current": "other", "previous": v}
    assert redis_client.xlen(reg.keys.log) == log_len  # no rollback recorded
    shutil.rmtree(reg.store.location(v))  # a missing artifact is refused too
    err = _one_line_error(capsys, ["models", "rollback", "--config", config])
    assert f"version {v} has no artifact in the store" in err and reg.pointers() == before
    # Its artifact back: the rollback goes through.
    reg.store.put(v, reg.store.location("other"))
    assert kdsm(["models", "rollback", "--config", config]) == 0
    capsys.readouterr()
    assert reg.pointers() == {"current": v, "previous": "other"}


def test_rollback_moves_nothing_when_previous_changes_while_its_artifact_is_checked(registered, monkeypatch):
    reg, v = registered
    for name in ("a", "b"):
        reg.register(name, {"status": "registered"})
        reg.store.put(name, reg.store.location(v))
    reg.promote("a")  # current a, previous v
    check = reg._check_artifact

    def then_promote(version, refused):  # another operator's promote lands between the check and the script
        check(version, refused)
        monkeypatch.setattr(reg, "_check_artifact", check)
        reg.promote("b")  # current b, previous a

    monkeypatch.setattr(reg, "_check_artifact", then_promote)
    with pytest.raises(RegistryError, match=f"previous pointer moved from {v}"):
        reg.rollback()
    assert reg.pointers() == {"current": "b", "previous": "a"}


def test_a_retrain_request_with_an_id_in_the_future_waits_request_delay_s_not_for_ever(redis_client, config, prefix,
                                                                                         capsys, monkeypatch):
    redis_client.xadd(f"{prefix}retrain:requests", {"reason": "by hand"}, id="99999999999999-0")
    monkeypatch.setenv("KDSM_RETRAIN__REQUEST_DELAY_S", "0.5")
    t0 = time.monotonic()
    assert kdsm(["retrain", "--watch", "--max-runs", "1", "--config", config, "--log-level", "ERROR"]) == 0
    (run,) = json.loads(capsys.readouterr().out)
    assert run["status"] == "failed"  # it ran (and had nothing to train on here)
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize("fields", [{"reason": NOT_UTF8}, {NOT_UTF8: "x"}])
def test_a_retrain_request_that_is_not_utf8_is_served_like_any_request(redis_client, config, prefix, capsys,
                                                                        monkeypatch, fields):
    """The watcher died with a UnicodeDecodeError traceback, and every restart of it too (the request stays pending)."""
    key = f"{prefix}retrain:requests"
    redis_client.xadd(key, fields)
    monkeypatch.setenv("KDSM_RETRAIN__REQUEST_DELAY_S", "0")
    for _ in range(2):  # the first watcher reads it new, a second finds nothing of it pending
        redis_client.xadd(key, {"reason": "by hand"})
        assert kdsm(["retrain", "--watch", "--max-runs", "1", "--config", config, "--log-level", "ERROR"]) == 0
        (run,) = json.loads(capsys.readouterr().out)
        assert run["status"] == "failed"  # it ran (and had nothing to train on here)
    assert redis_client.xpending(key, "kdsm-retrain")["pending"] == 0


@pytest.mark.parametrize("damage", ["not UTF-8", "wrong type"])
def test_a_retrain_with_a_current_pointer_promote_refuses_fails_before_it_trains(registered, redis_client, redis_url,
                                                                                 prefix, tmp_path, damage):
    """It trained, registered and validated a model, then failed at promote (unexpected error: RegistryError)."""
    from offline_train.config import load_settings
    from streamer.lifecycle.archive import ArchiveSink, example_batch
    from streamer.lifecycle.config import ArchiveConfig
    from streamer.lifecycle.retrain import run_retrain

    reg, v = registered
    features = reg.get(v)["features"]
    archive = tmp_path / "archive"
    sink = ArchiveSink(ArchiveConfig(dir=str(archive), fsync=False), background=False)
    for i in range(0, 1000, 500):  # enough rows to train on
        sink.on_committed(example_batch(500, features=features, offset0=i, version=v, seed=i))
        sink.flush()
    sink.close()
    s = load_settings(Settings, None, **{"data": {"features": features},  # what a model unreadable here leaves
                                         "model": {"width": 32, "depth": 1}, "train": {"steps": 200, "seed": 0},
                                         "redis": {"url": redis_url, "key_prefix": prefix},
                                         "archive": {"dir": str(archive), "fsync": False},
                                         "registry": {"store_dir": str(reg.store.root), "device": "cpu"},
                                         "retrain": {"window_hours": None, "min_rows": 400, "gate_window_rows": 500}})
    if damage == "not UTF-8":
        redis_client.hset(reg.keys.pointers, "current", NOT_UTF8)
    else:
        redis_client.delete(reg.keys.pointers)
        redis_client.set(reg.keys.pointers, "x")
    with pytest.raises(RegistryError) as promote:
        reg.promote(v)
    res = run_retrain(s, reg, reason="schedule")
    assert res.status == "failed" and res.exit_code == 2 and res.version is None
    assert res.reason == str(promote.value)  # the one line promote gives, naming the key and its repair
    assert redis_client.zrange(reg.keys.versions, 0, -1) == [v]  # nothing trained, nothing registered
    assert json.loads(redis_client.xrevrange(reg.keys.runs, count=1)[0][1]["details"]) == {}


def test_never_expires(redis_client, unique):
    from streamer.lifecycle.control import never_expires

    key = f"expiry-{unique}"
    assert not never_expires(redis_client, key)  # missing
    redis_client.set(key, "x", px=60_000)
    assert not never_expires(redis_client, key)
    redis_client.persist(key)
    assert never_expires(redis_client, key)
    redis_client.delete(key)


def test_a_drift_cooldown_key_without_expiry_does_not_silence_drift_for_ever(redis_client, unique):
    import numpy as np

    from streamer.lifecycle.archive import example_batch
    from streamer.lifecycle.config import DriftConfig
    from streamer.lifecycle.control import Keys
    from streamer.lifecycle.drift import DriftSink

    keys = Keys(f"drift-{unique}:")
    redis_client.set(keys.drift_cooldown, "set by hand")  # no expiry: no streamer wrote it
    now = [0.0]
    sink = DriftSink(DriftConfig(warmup_events=0, persist_events=10, calibrated_alert_rate=0.01, alert_rate_window=50,
                                 cooldown_s=60), redis=redis_client, keys=keys, clock=lambda: now[0])
    b = example_batch(60)
    b.severities = np.array(["warning"] * 60)  # every row alerts: far above the calibrated 1 %
    assert sink.on_committed(b) is not None
    assert redis_client.xlen(keys.drift) == 1 and redis_client.get(keys.drift_cooldown) == "set by hand"
    # A streamer's cooldown (with its expiry) still suppresses, fleet-wide.
    redis_client.set(keys.drift_cooldown, "another streamer", px=60_000)
    now[0] += 1000  # past this process's own cooldown
    assert sink.on_committed(b) is None
    assert redis_client.xlen(keys.drift) == 1
