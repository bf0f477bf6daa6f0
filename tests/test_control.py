"""The control plane helpers against a real Redis: the one watcher (pub/sub + periodic re-read) and the key schema."""

import threading
import time

import pytest

from offline_train.config import ConfigError
from streamer.lifecycle.control import ChannelWatcher, Keys, connect


def _wait(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


def test_watcher_delivers_notifications_ticks_and_survives_a_failing_callback(redis_url, unique):
    client = connect(redis_url, timeout_s=2.0)
    channel = Keys(f"w{unique}:").thresholds_channel
    got, ticks, errors = [], [], []
    lock = threading.Lock()

    def on_message(data):
        if data == "boom":
            raise RuntimeError("callback failed")
        with lock:
            got.append(data)

    w = ChannelWatcher(client, channel, period_s=0.3, on_message=on_message, on_tick=lambda: ticks.append(1),
                       on_error=errors.append, wait_s=0.1, retry_s=0.1).start()
    try:
        assert _wait(lambda: len(ticks) >= 1), "no tick right after subscribing"
        assert _wait(lambda: len(ticks) >= 3), "no periodic tick"
        client.publish(channel, "v1")
        assert _wait(lambda: got == ["v1"])
        client.publish(channel, "boom")
        assert _wait(lambda: len(errors) == 1) and isinstance(errors[0], RuntimeError)
        n = len(ticks)
        assert _wait(lambda: len(ticks) > n), "no tick after re-subscribing"
        assert _wait(lambda: (client.publish(channel, "v2"), "v2" in got)[1])  # it listens again
    finally:
        w.stop()
    assert not w.is_alive()


def test_one_prefix_for_every_key():
    k = Keys("p:")
    names = [k.versions, k.version("v"), k.pointers, k.channel, k.log, k.lock, k.requests, k.runs, k.drift,
             k.drift_cooldown, k.thresholds("v"), k.thresholds_audit("v"), k.thresholds_channel]
    assert all(n.startswith("p:") for n in names) and len(set(names)) == len(names)


def test_connect_turns_a_url_redis_py_refuses_into_one_config_error():
    """What slips past the redis.url check (a bad query option) is a ConfigError, and the password stays out of it."""
    with pytest.raises(ConfigError, match=r"^redis\.url cannot be used: Invalid value for 'socket_timeout'") as e:
        connect("redis://:pw-77aa@127.0.0.1:6379/0?socket_timeout=abc")
    assert "pw-77aa" not in str(e.value)


def _one_line(capsys, argv: list[str]) -> str:
    from streamer.ops.cli import main

    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("how", ["db-index", "acl-noperm"])
def test_redis_error_replies_are_one_line_naming_the_url_and_prefix(how, redis_url, redis_client, unique, tmp_path,
                                                                   tiny_model_dir, capsys):
    """A DB index the server lacks, or an ACL user not allowed the key prefix: Redis answers with an error reply, which
    `kdsm models list`, `thresholds show` and `retrain --request` print as one line (exit 2), password masked."""
    import yaml

    host_port = redis_url.split("//", 1)[1].rsplit("/", 1)[0]
    user = f"u{unique}"
    if how == "db-index":
        url = f"redis://{host_port}/99"
    else:  # allowed only keys under another prefix
        redis_client.execute_command("ACL", "SETUSER", user, "on", ">pw-acl-9f1e", "~elsewhere:*", "&*", "+@all")
        url = f"redis://{user}:pw-acl-9f1e@{host_port}/0"
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"redis": {"url": url, "key_prefix": f"t{unique}:"},
                                   "registry": {"store_dir": str(tmp_path / "store")}}))
    try:
        for argv in (["models", "list"], ["thresholds", "show", "--model", str(tiny_model_dir)],
                     ["retrain", "--request"]):
            err = _one_line(capsys, [*argv, "--config", str(cfg)])
            assert "refused the command" in err and "redis.url" in err and f"redis.key_prefix 't{unique}:'" in err, err
            assert "pw-acl-9f1e" not in err
            assert ("DB index" in err) if how == "db-index" else ("NoPermissionError" in err), err
    finally:
        if how == "acl-noperm":
            redis_client.execute_command("ACL", "DELUSER", user)
