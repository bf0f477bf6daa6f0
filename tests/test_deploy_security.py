"""Security settings reach the clients: Kafka SASL/SSL into kafka-python, Redis password and TLS into redis-py.

Redis is checked against a real redis-server with AUTH and a TLS port (test
CA made with openssl); Kafka SASL/SSL at the real kafka-python constructors
(the dev broker speaks neither). Secrets never show in logs, errors or
``kdsm config show``.
"""

from __future__ import annotations

import ast
import io
import json
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import redis

from offline_train.config import load_settings
from streamer.config import KafkaConfig, Settings
from streamer.dev.local_services import free_port
from streamer.lifecycle.control import connect, redis_client
from streamer.lifecycle.thresholds import LiveThresholds, ThresholdOps
from streamer.ops.cli import main
from streamer.pipeline.kafka_clients import client_kwargs, make_consumer, make_producer

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "kdsm-test-Pw-4f9c2e"
KAFKA_PASSWORD = "kdsm-sasl-Pw-81b7d0"


@pytest.fixture(autouse=True)
def _no_kdsm_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("KDSM_") and "__" in name:
            monkeypatch.delenv(name)


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def secure_redis(tmp_path_factory):
    """redis-server with requirepass, a plain port and a TLS port (server cert signed by a test CA)."""
    if not shutil.which("openssl") or not shutil.which("redis-server"):
        pytest.fail("openssl and redis-server are required (deploy/local/setup.sh installs redis-server)")
    d = tmp_path_factory.mktemp("secure-redis")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=kdsm-test-ca", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "srv.pem",
             "-days", "2", "-extfile", "ext", cwd=d)
    port, tls_port = free_port(), free_port()
    proc = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--tls-port", str(tls_port),
                             "--tls-cert-file", "srv.pem", "--tls-key-file", "srv.key", "--tls-ca-cert-file", "ca.pem",
                             "--tls-auth-clients", "no", "--requirepass", PASSWORD, "--save", "", "--appendonly", "no",
                             "--dir", str(d)], cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                redis.Redis(port=port, password=PASSWORD).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("secure redis-server did not start") from None
                time.sleep(0.1)
        yield {"url": f"redis://127.0.0.1:{port}/0", "tls_url": f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={d / 'ca.pem'}",
               "tls_url_no_ca": f"rediss://127.0.0.1:{tls_port}/0"}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _settings(url: str, password: str | None, **extra) -> Settings:
    redis_cfg = {"url": url, **({"password": password} if password else {})}
    return load_settings(Settings, redis=redis_cfg, **extra)


# ----------------------------------------------------------------------------- Redis
def test_redis_password_reaches_every_client(secure_redis):
    s = _settings(secure_redis["url"], PASSWORD)
    pw = s.redis.password.get_secret_value()
    assert connect(s.redis.url, pw).ping()                   # thresholds (streamer + CLI)
    assert redis_client(s.redis).ping()                      # registry, drift, retrain
    assert redis_client(s.redis, blocking=True).ping()       # retrain --watch
    # without it, the server refuses
    with pytest.raises(redis.AuthenticationError):
        redis_client(_settings(secure_redis["url"], None).redis).ping()


def test_redis_password_from_the_environment(secure_redis, monkeypatch):
    monkeypatch.setenv("KDSM_REDIS__URL", secure_redis["url"])
    monkeypatch.setenv("KDSM_REDIS__PASSWORD", PASSWORD)
    s = load_settings(Settings, ROOT / "configs" / "production.yaml")
    assert redis_client(s.redis).ping()


def test_redis_tls_with_a_private_ca(secure_redis):
    s = _settings(secure_redis["tls_url"], PASSWORD)
    pw = s.redis.password.get_secret_value()
    for client in (connect(s.redis.url, pw), redis_client(s.redis)):
        assert client.ping()
        assert client.connection_pool.connection_class is redis.SSLConnection
    # the CA is what makes it work: without it the server's certificate is rejected
    with pytest.raises(redis.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        redis_client(_settings(secure_redis["tls_url_no_ca"], PASSWORD).redis).ping()


def test_live_thresholds_authenticate_and_follow_an_override(secure_redis, tiny_model_dir, unique):
    from offline_train.detector import KDSM

    model = KDSM.load(tiny_model_dir, device="cpu")
    s = _settings(secure_redis["tls_url"], PASSWORD)
    s.redis.key_prefix = f"kdsm-sec-{unique}:"
    ops = ThresholdOps.from_settings(s, model)
    live = LiveThresholds(s.redis.url, PASSWORD, s.redis.key_prefix, refresh_s=0.2).start()
    try:
        assert live.get(model) == model.thresholds_ and live.redis_up
        new = (model.thresholds_["warning"] + model.thresholds_["critical"]) / 2  # still below critical
        ops.set("warning", score=new, by="test")
        deadline = time.monotonic() + 5
        while live.get(model)["warning"] != new and time.monotonic() < deadline:
            time.sleep(0.05)
        assert live.get(model)["warning"] == new
    finally:
        live.stop()
    # a wrong password: scoring would continue on the artifact thresholds, and Redis counts as down
    bad = LiveThresholds(s.redis.url, "wrong", s.redis.key_prefix, refresh_s=0.2).start()
    try:
        assert bad.get(model) == model.thresholds_ and not bad.redis_up
    finally:
        bad.stop()


# ----------------------------------------------------------------------------- Kafka
def test_kafka_sasl_ssl_settings_reach_the_kafka_python_clients(tmp_path, monkeypatch):
    ca = tmp_path / "ca.pem"
    ca.write_text("placeholder; kafka-python reads it only when it connects\n")
    monkeypatch.setenv("KDSM_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KDSM_KAFKA__SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("KDSM_KAFKA__SASL_USERNAME", "kdsm")
    monkeypatch.setenv("KDSM_KAFKA__SASL_PASSWORD", KAFKA_PASSWORD)
    monkeypatch.setenv("KDSM_KAFKA__SSL_CAFILE", str(ca))
    monkeypatch.setenv("KDSM_KAFKA__BOOTSTRAP", f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}")
    k = load_settings(Settings).kafka
    want = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "kdsm",
            "sasl_plain_password": KAFKA_PASSWORD, "ssl_cafile": str(ca)}
    assert {key: client_kwargs(k)[key] for key in want} == want
    # the real constructors accept them (api_version given: no broker contact at construction)
    producer = make_producer(k, api_version=(2, 8, 0))
    consumer = make_consumer(k, api_version=(2, 8, 0))
    try:
        for client in (producer, consumer):
            assert {key: client.config[key] for key in want} == want
            assert client.config["bootstrap_servers"] == k.bootstrap.split(",")
    finally:
        producer.close(timeout=1)
        consumer.close()
    assert KAFKA_PASSWORD not in repr(k) and KAFKA_PASSWORD not in str(load_settings(Settings))


def test_plaintext_default_sends_no_sasl():
    kw = client_kwargs(KafkaConfig())
    assert kw["security_protocol"] == "PLAINTEXT" and not any(k.startswith(("sasl", "ssl")) for k in kw)


def test_a_maximum_event_size_setting_is_validated():
    assert Settings().kafka.max_event_bytes == 65536
    assert load_settings(Settings, kafka={"max_event_bytes": 64}).kafka.max_event_bytes == 64
    with pytest.raises(Exception, match="max_event_bytes"):
        load_settings(Settings, kafka={"max_event_bytes": 0})


def test_every_client_is_built_by_the_passthrough_helpers():
    """No module builds a Kafka or Redis client around kafka_clients.py / lifecycle.control.connect (the one Redis factory)."""
    allowed = {("streamer/pipeline/kafka_clients.py", "KafkaProducer"), ("streamer/pipeline/kafka_clients.py", "KafkaConsumer"),
               ("streamer/pipeline/kafka_clients.py", "KafkaAdminClient"), ("streamer/lifecycle/control.py", "from_url"),
               # control.undecoded: a copy of a client connect built (its settings), whose replies are not decoded
               ("streamer/lifecycle/control.py", "Redis"),
               # `kdsm demo` reads alerts from the loopback dev broker it starts itself (never a secured cluster)
               ("streamer/dev/demo.py", "KafkaConsumer")}
    ctors = {"KafkaProducer", "KafkaConsumer", "KafkaAdminClient", "from_url", "Redis", "StrictRedis"}
    found = set()
    for path in [*ROOT.glob("streamer/**/*.py"), *ROOT.glob("offline_train/**/*.py")]:
        rel = str(path.relative_to(ROOT))
        if rel == "streamer/dev/local_services.py":  # starts the dev services, not a product client
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in ctors:
                    found.add((rel, name))
    assert found <= allowed, f"clients built outside the passthrough helpers: {found - allowed}"


# ----------------------------------------------------------------------------- no secret printed
def test_no_secret_in_streamer_logs(secure_redis, kafka_bootstrap, tiny_model_dir, unique):
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import make_blobs
    from stream_support import create_topics, event, make_settings, produce

    from offline_train.detector import KDSM
    from streamer.pipeline.logs import setup_logging
    from streamer.service import run_stream

    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, secure_redis["tls_url"], unique, model=str(tiny_model_dir))
    s.redis.password = PASSWORD
    s.kafka.sasl_username = "kdsm"  # PLAINTEXT broker: SASL fields set but unused, must still never be printed
    s.kafka.sasl_password = KAFKA_PASSWORD
    create_topics(s)
    X, out = make_blobs(n=40, n_out=5, seed=0)
    s.kafka.max_event_bytes = 400
    huge = event(999, X[0], model.feature_names_, pad="x" * 500)  # valid JSON, over the size limit
    produce(s, [event(i, x, model.feature_names_) for i, x in enumerate(np.vstack([X, out]))] + [b"{not json", huge])
    buf = io.StringIO()
    setup_logging("DEBUG", stream=buf)
    try:
        counts = run_stream(s, str(tiny_model_dir), max_events=47)
    finally:
        logging.getLogger("kdsm").handlers[:] = []
    text = buf.getvalue()
    # the broken and the oversized event are dead-lettered (the size limit is enforced), the rest scored
    assert counts["events"] == 47 and counts["scored"] == 45 and counts["dead_letters"] == 2
    events = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert any(e.get("event") == "redis_up" for e in events), "the streamer did not authenticate to Redis over TLS"
    assert PASSWORD not in text and KAFKA_PASSWORD not in text


def test_no_secret_in_errors_or_config_show(tmp_path, tiny_model_dir, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"redis:\n  url: redis://:{PASSWORD}@127.0.0.1:{free_port()}/0\n")
    assert main(["thresholds", "show", "--model", str(tiny_model_dir), "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "unreachable" in err and PASSWORD not in err and ":***@" in err
    os.environ["KDSM_KAFKA__SASL_PASSWORD"] = KAFKA_PASSWORD
    try:
        assert main(["config", "show", "--config", str(cfg)]) == 0
    finally:
        del os.environ["KDSM_KAFKA__SASL_PASSWORD"]
    out = capsys.readouterr().out
    assert PASSWORD not in out and KAFKA_PASSWORD not in out
