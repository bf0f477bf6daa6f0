"""`kdsm config show` / `kdsm config check`: effective values, secrets masked, readable errors, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from offline_train.config import load_settings
from streamer.config import Settings
from streamer.ops.cli import main

ROOT = Path(__file__).resolve().parents[1]
SECRETS = ("pw-kafka-8d1e", "pw-redis-77aa", "pw-url-5c3f", "pw-s3-41b9")


@pytest.fixture(autouse=True)
def _no_kdsm_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("KDSM_") and "__" in name:
            monkeypatch.delenv(name)


def test_show_prints_effective_values_with_secrets_masked(monkeypatch, capsys):
    monkeypatch.setenv("KDSM_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KDSM_KAFKA__SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("KDSM_KAFKA__SASL_USERNAME", "kdsm")
    monkeypatch.setenv("KDSM_KAFKA__SASL_PASSWORD", SECRETS[0])
    monkeypatch.setenv("KDSM_REDIS__PASSWORD", SECRETS[1])
    monkeypatch.setenv("KDSM_DRIFT__ADWIN__DELTA", "0.01")
    monkeypatch.setenv("KDSM_ARCHIVE__DIR", f"s3://user:{SECRETS[2]}@bucket/archive")
    monkeypatch.setenv("KDSM_STORAGE__S3_ACCESS_KEY", "kdsm-key-id")  # an identifier, shown as is
    monkeypatch.setenv("KDSM_STORAGE__S3_SECRET_KEY", SECRETS[3])
    assert main(["config", "show", "--config", str(ROOT / "configs" / "demo.yaml")]) == 0
    out = capsys.readouterr().out
    for secret in SECRETS:
        assert secret not in out
    shown = yaml.safe_load(out)
    assert shown["kafka"]["sasl_password"] == "***" and shown["redis"]["password"] == "***"
    assert shown["archive"]["dir"] == "s3://user:***@bucket/archive"
    assert shown["storage"]["s3_secret_key"] == "***" and shown["storage"]["s3_access_key"] == "kdsm-key-id"
    # everything else is the effective value: file < env
    s = load_settings(Settings, ROOT / "configs" / "demo.yaml")
    expected = s.model_dump(mode="json")
    for sec, key in (("kafka", "sasl_password"), ("redis", "password"), ("archive", "dir"), ("storage", "s3_secret_key")):
        expected[sec].pop(key), shown[sec].pop(key)
    assert shown == expected
    assert shown["kafka"]["security_protocol"] == "SASL_SSL" and shown["drift"]["adwin"]["delta"] == 0.01
    assert shown["model"]["width"] == 64  # from demo.yaml


def test_show_section_and_comments(capsys):
    assert main(["config", "show", "--section", "metrics", "--comments"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == {"metrics": Settings().metrics.model_dump()}
    assert main(["config", "show", "--comments"]) == 0
    out = capsys.readouterr().out
    assert "# metrics port: /metrics and /healthz; 0 = any free port" in out


def test_show_section_keeps_the_comments(capsys):
    """--section with --comments printed the section through yaml.safe_dump, which drops every comment."""
    assert main(["config", "show", "--section", "kafka", "--comments"]) == 0
    out = capsys.readouterr().out
    assert "  # topic the streamer consumes events from\n  events_topic: kdsm.events\n" in out
    assert out.startswith("# Broker, topics and client settings") and "\nredis:" not in out
    assert list(yaml.safe_load(out)) == ["kafka"]
    assert main(["config", "show", "--section", "kafka"]) == 0  # without --comments: no comment lines
    out = capsys.readouterr().out
    assert out.startswith("kafka:\n") and not any(line.lstrip().startswith("#") for line in out.splitlines())
    assert yaml.safe_load(out)["kafka"]["events_topic"] == "kdsm.events"


def test_show_rejects_an_unknown_section(capsys):
    assert main(["config", "show", "--section", "kafak"]) == 2
    assert "unknown section 'kafak'" in capsys.readouterr().err


def test_check_ok_and_errors(tmp_path, capsys):
    assert main(["config", "check", str(ROOT / "configs" / "paper.yaml")]) == 0
    assert capsys.readouterr().out.startswith("OK: ")
    bad = tmp_path / "bad.yaml"
    bad.write_text("kafka:\n  bootstrapp: x\nmodel:\n  width: -1\nstream:\n  max_batch: many\n")
    assert main(["config", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "kafka.bootstrapp: unknown key" in err
    assert "model.width: Input should be greater than 0" in err
    assert "stream.max_batch" in err and "Traceback" not in err


def test_check_unreadable_files(tmp_path, capsys):
    assert main(["config", "check", str(tmp_path / "nope.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("kafka: [unclosed\n")
    assert main(["config", "check", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "not valid YAML" in err
    assert len(err.strip().splitlines()) == 1 and "line 2" in err  # one line, saying where


def test_check_a_directory_or_a_file_that_is_not_text(tmp_path, capsys):
    """IsADirectoryError and UnicodeDecodeError tracebacks before: now one line naming the file, exit 2."""
    assert main(["config", "check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"{tmp_path}: config file {tmp_path} is a directory, not a YAML file\n"
    binary = tmp_path / "utf16.yaml"
    binary.write_bytes(b"\xff\xfek\x00a\x00")
    assert main(["config", "check", str(binary)]) == 2
    err = capsys.readouterr().err
    assert err == f"{binary}: config file {binary} is not UTF-8 text (byte 0: invalid start byte)\n"


@pytest.mark.parametrize(("name", "value"), [("KDSM_ARCHIVE", "{bad"), ("KDSM_CALIBRATION__SEVERITIES", "{warning: 0.9")])
def test_show_names_an_env_variable_that_is_not_json(name, value, monkeypatch, capsys):
    """A section (or mapping) set whole from the environment raised pydantic-settings' SettingsError, a traceback."""
    monkeypatch.setenv(name, value)
    assert main(["config", "show"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kdsm config: error: environment variable {name} is not valid JSON (")
    assert len(err.splitlines()) == 1 and f"{name}__<KEY>" in err


def test_check_warns_about_a_secret_in_the_file(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text(f"redis:\n  password: {SECRETS[1]}\n")
    assert main(["config", "check", str(f)]) == 0
    captured = capsys.readouterr()
    assert "prefer env KDSM_REDIS__PASSWORD" in captured.err
    assert SECRETS[1] not in captured.out + captured.err


@pytest.mark.parametrize(("key", "url"), [
    ("redis.url", f"redis://:{SECRETS[2]}@redis:6379/0"), ("redis.url", f"redis://redis:6379/0?password={SECRETS[2]}"),
    ("storage.s3_endpoint", f"http://kdsm:{SECRETS[2]}@seaweed:8333"),
    ("archive.dir", f"s3://kdsm:{SECRETS[2]}@bucket/archive"), ("registry.store_dir", f"s3://kdsm:{SECRETS[2]}@b/m")])
def test_check_warns_about_a_secret_in_a_url_in_the_file(tmp_path, capsys, key, url):
    """A password inside a URL (what config show masks) said OK with no warning."""
    section, name = key.split(".")
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({section: {name: url}}))
    assert main(["config", "check", str(f)]) == 0
    captured = capsys.readouterr()
    env = "KDSM_" + key.replace(".", "__").upper()
    assert f"holds credentials in the URL {key}" in captured.err and f"prefer env {env}" in captured.err, captured.err
    assert SECRETS[2] not in captured.out + captured.err
    f.write_text(yaml.safe_dump({section: {name: url.replace(f":{SECRETS[2]}@", "@").replace(SECRETS[2], "x")
                                           .replace("?password=x", "")}}))
    assert main(["config", "check", str(f)]) == 0
    assert "warning" not in capsys.readouterr().err  # a URL without one: no warning


def test_console_command_exit_status(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sigma:\n  bsae: 1\n")
    r = subprocess.run([sys.executable, "-m", "streamer", "config", "check", str(bad)],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "sigma.bsae: unknown key" in r.stderr


@pytest.mark.parametrize("url", ["http://127.0.0.1:1", "redis://127.0.0.1:99999/0", "redis://[::1", "127.0.0.1:6379"])
def test_a_redis_url_redis_py_cannot_read_is_a_config_error(url, monkeypatch, capsys):
    """kdsm config check said OK, and kdsm models list died in redis-py's from_url with a traceback."""
    monkeypatch.setenv("KDSM_REDIS__URL", url)
    assert main(["config", "check", str(ROOT / "configs" / "demo.yaml")]) == 2
    assert "redis.url: Value error" in capsys.readouterr().err
    assert main(["models", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kdsm models: error: invalid configuration") and "redis.url" in err and "Traceback" not in err


@pytest.mark.parametrize("bootstrap", ["", "localhost:abc", "[::1"])
def test_a_bootstrap_kafka_python_cannot_read_is_a_config_error(bootstrap, monkeypatch, capsys):
    monkeypatch.setenv("KDSM_KAFKA__BOOTSTRAP", bootstrap)
    assert main(["config", "check", str(ROOT / "configs" / "demo.yaml")]) == 2
    assert "kafka.bootstrap: Value error" in capsys.readouterr().err
    assert main(["replay", "--data", str(ROOT / "absent.parquet")]) == 2  # the settings fail first, one line
    err = capsys.readouterr().err
    assert err.startswith("kdsm replay: error: invalid configuration") and "kafka.bootstrap" in err
    assert "Traceback" not in err


def test_a_password_in_the_redis_url_query_is_masked(monkeypatch, capsys):
    """redis-py reads `redis://h:6379/0?password=...` (and `username`): `config show` and the unreachable-Redis line
    mask them as they mask the `user:password@` form; the other query parameters stay as written."""
    from streamer.dev.local_services import free_port

    url = f"redis://127.0.0.1:{free_port()}/0?username=ops-4e2a&password={SECRETS[2]}&socket_keepalive=true"
    monkeypatch.setenv("KDSM_REDIS__URL", url)
    monkeypatch.setenv("KDSM_REDIS__CONNECT_TIMEOUT_S", "0.5")
    assert main(["config", "show", "--section", "redis"]) == 0
    out = capsys.readouterr().out
    assert SECRETS[2] not in out and "ops-4e2a" not in out
    assert yaml.safe_load(out)["redis"]["url"].endswith("/0?username=***&password=***&socket_keepalive=true")
    assert main(["models", "list"]) == 2
    err = capsys.readouterr().err
    assert "is unreachable" in err and "password=***" in err and SECRETS[2] not in err and "ops-4e2a" not in err, err
