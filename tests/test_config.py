"""Config loading: YAML, env overrides, strict keys, readable errors."""

from pathlib import Path

import pytest

from offline_train.config import ConfigError, load_settings
from streamer.config import Settings


def test_defaults_follow_the_design():
    s = load_settings(Settings)
    assert (s.sigma.base, s.sigma.c, s.sigma.trim, s.sigma.bins) == (0.5, 0.33, 0.02, 200)
    assert (s.model.width, s.model.depth) == (None, None)  # the profile's: what kdsm train trains, stated once
    assert s.train.model_for(s.model).width == 256 and s.train.model_for(s.model).depth == 6  # fast
    # configs/default.yaml, written from these defaults, trains the same network as no config at all (it set 512
    # explicitly, which overrode the fast profile's 256: a default file that changed the default)
    listed = load_settings(Settings, Path(__file__).resolve().parents[1] / "configs" / "default.yaml")
    assert listed.train.model_for(listed.model) == s.train.model_for(s.model)
    assert (s.train.lr, s.train.weight_decay, s.train.batch_size, s.train.noise_copies) == (5e-4, 5e-5, 128, 3)
    assert (s.ema.enabled, s.ema.decay, s.ema.percentile) == (True, 0.999, 80.0)
    assert s.calibration.severities == {"warning": 0.99, "critical": 0.999}


def test_yaml_then_env_then_overrides(tmp_path, monkeypatch):
    f = tmp_path / "c.yaml"
    f.write_text("sigma:\n  base: 0.7\n  clip: paper\ntrain:\n  steps: 10\n")
    s = load_settings(Settings, f)
    assert s.sigma.base == 0.7 and s.sigma.clip_range == (0.1, 2.0) and s.train.steps == 10
    monkeypatch.setenv("KDSM_SIGMA__BASE", "0.9")
    monkeypatch.setenv("KDSM_TRAIN__PROFILE", "paper")
    s = load_settings(Settings, f)
    assert s.sigma.base == 0.9 and s.train.profile == "paper" and s.sigma.clip == "paper"


def test_paper_profile_budget_is_500_epochs():
    s = load_settings(Settings, train={"profile": "paper"})
    assert s.train.budget(1000) == 500 * 8


def test_fast_profile_budget_is_500_epochs_within_bounds(monkeypatch):
    s = load_settings(Settings)  # fast is the default profile
    assert [s.train.budget(n) for n in (300, 600, 700, 10_000)] == [2000, 2500, 3000, 4500]
    monkeypatch.setenv("KDSM_TRAIN__MAX_STEPS", "5000")  # a bound from the environment replaces the profile's
    assert load_settings(Settings).train.budget(10_000) == 5000
    # Explicit epochs drop the profile's bounds; explicit steps override everything.
    assert load_settings(Settings, train={"epochs": 2}).train.budget(300) == 6
    assert load_settings(Settings, train={"steps": 7, "epochs": 2}).train.budget(300) == 7


def test_errors_name_the_key(tmp_path, monkeypatch):
    f = tmp_path / "c.yaml"
    f.write_text("sigma:\n  bsae: 0.7\n")
    with pytest.raises(ConfigError, match=r"sigma\.bsae: unknown key"):
        load_settings(Settings, f)
    f.write_text("sigma:\n  base: -1\n")
    with pytest.raises(ConfigError, match=r"sigma\.base"):
        load_settings(Settings, f)
    f.write_text("calibration:\n  severities: {warning: 1.5}\n")
    with pytest.raises(ConfigError, match="not in"):
        load_settings(Settings, f)
    f.write_text("- just a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_settings(Settings, f)
    with pytest.raises(ConfigError, match="not found"):
        load_settings(Settings, tmp_path / "absent.yaml")
    monkeypatch.setenv("KDSM_TRAIN__STEPS", "many")
    with pytest.raises(ConfigError, match=r"train\.steps"):
        load_settings(Settings)


@pytest.mark.parametrize(("url", "message"), [
    ("http://127.0.0.1:1", "scheme http:// is not redis://, rediss:// or unix://"),
    ("redis://127.0.0.1:99999/0", "the port is not a number in 1..65535"),
    ("redis://127.0.0.1:0/0", "the port is not a number in 1..65535"),
    ("redis://[::1", "not a URL (Invalid IPv6 URL)"),
    ("127.0.0.1:6379", "no scheme: expected redis://"),
    ("unix://", "needs the socket's path")])
def test_redis_url_is_checked(url, message, monkeypatch):
    monkeypatch.setenv("KDSM_REDIS__URL", url)
    with pytest.raises(ConfigError, match=r"redis\.url: Value error, ") as e:
        load_settings(Settings)
    assert message in str(e.value)


@pytest.mark.parametrize("url", ["redis://127.0.0.1:16379/0", "rediss://:pw@redis:6380/0?ssl_ca_certs=/ca.pem",
                                 "redis://[::1]:6379", "redis://redis", "unix:///run/redis.sock?db=1"])
def test_redis_url_forms_redis_py_reads_pass(url):
    assert load_settings(Settings, redis={"url": url}).redis.url == url


@pytest.mark.parametrize(("bootstrap", "message"), [
    ("", "empty: expected a comma-separated host:port list"),
    ("localhost:abc", "'localhost:abc' is not host:port"),
    ("[::1", "'[::1' is not host:port"),
    ("kafka:0", "with a port in 1..65535"), ("kafka:70000", "with a port in 1..65535"),
    ("kafka", "'kafka' is not host:port"), ("a:9092,,b:9092", "an empty entry")])
def test_kafka_bootstrap_is_checked(bootstrap, message, monkeypatch):
    """An empty bootstrap died in kdsm stream with an IndexError, a bad port or IPv6 address with a ValueError."""
    monkeypatch.setenv("KDSM_KAFKA__BOOTSTRAP", bootstrap)
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap: Value error, ") as e:
        load_settings(Settings)
    assert message in str(e.value)


@pytest.mark.parametrize("bootstrap", ["127.0.0.1:19092", "kafka-0:9092,kafka-1:9092", "kafka-0:9092, kafka-1:9093",
                                       "[::1]:9092", "kafka.kafka.svc:9092,[fd00::7]:9093"])
def test_kafka_bootstrap_forms_pass(bootstrap):
    assert load_settings(Settings, kafka={"bootstrap": bootstrap}).kafka.bootstrap == bootstrap


@pytest.mark.parametrize(("key", "name", "message"), [
    ("events_topic", "bad topic!", "' ', '!' not allowed"),
    ("alerts_topic", "al/erts", "'/' not allowed"),
    ("deadletter_topic", "dead:letters", "':' not allowed"),
    ("events_topic", "événements", "'é' not allowed"),
    ("events_topic", "", "(0 characters;"),
    ("alerts_topic", ".", "(1 characters;"),
    ("deadletter_topic", "..", "(2 characters;"),
    ("events_topic", "e" * 250, "(250 characters;")],
    ids=["space", "slash", "colon", "non-ascii", "empty", "dot", "dot-dot", "too-long"])
def test_kafka_topic_names_are_checked(key, name, message, monkeypatch):
    """A name Kafka refuses passed kdsm config check; kdsm stream then died in kafka-python's subscribe with a
    ValueError traceback (exit 1)."""
    monkeypatch.setenv(f"KDSM_KAFKA__{key.upper()}", name)
    with pytest.raises(ConfigError, match=rf"kafka\.{key}: Value error, .* is not a Kafka topic name") as e:
        load_settings(Settings)
    assert message in str(e.value) and "1 to 249 ASCII letters, digits, '.', '_' and '-'" in str(e.value)


@pytest.mark.parametrize(("name", "message"), [("bad topic!", "' ', '!' not allowed"), ("..", "(2 characters;")],
                         ids=["space", "dot-dot"])
def test_the_drift_topic_name_is_checked(name, message, monkeypatch):
    """drift.kafka_topic escaped the rule (its section cannot import the check); the drift monitor's first send then
    failed in kafka-python, long after kdsm config check had passed."""
    monkeypatch.setenv("KDSM_DRIFT__KAFKA_TOPIC", name)
    with pytest.raises(ConfigError, match=r"drift: Value error, kafka_topic: .* is not a Kafka topic name") as e:
        load_settings(Settings)
    assert message in str(e.value)
    assert load_settings(Settings, drift={"kafka_topic": "kdsm.drift-v2"}).drift.kafka_topic == "kdsm.drift-v2"
    assert load_settings(Settings, drift={"kafka_topic": None}).drift.kafka_topic is None


@pytest.mark.parametrize("name", ["kdsm.events", "a", "e" * 249, "Events_2026-12.eu", "..a", "_"],
                         ids=["default", "one", "249", "mixed", "dots-and-more", "underscore"])
def test_kafka_topic_names_kafka_takes_pass(name):
    assert load_settings(Settings, kafka={"events_topic": name, "alerts_topic": name}).kafka.alerts_topic == name


@pytest.mark.parametrize(("yaml_text", "message"), [
    ("security_protocol: SASL_PLAINTEXT\n  sasl_mechanism: FOO\n",
     "kafka.sasl_mechanism: Value error, 'FOO' is not a SASL mechanism kdsm can use: PLAIN, SCRAM-SHA-256, "
     "SCRAM-SHA-512, GSSAPI or AWS_MSK_IAM"),
    ("sasl_mechanism: OAUTHBEARER\n", "OAUTHBEARER needs a token provider object"),
    ("security_protocol: SASL_SSL\n", "kafka: Value error, security_protocol SASL_SSL needs sasl_mechanism: PLAIN, "),
    ("security_protocol: SSL\n  ssl_cafile: {missing}\n", "kafka.ssl_cafile: Value error, no such file: {missing}"),
    ("ssl_certfile: {missing}\n", "kafka.ssl_certfile: Value error, no such file: {missing}"),
    ("ssl_keyfile: {folder}\n", "kafka.ssl_keyfile: Value error, not a file: {folder}")],
    ids=["unknown-mechanism", "oauthbearer", "sasl-without-mechanism", "missing-cafile", "missing-certfile",
         "keyfile-a-folder"])
def test_kafka_security_settings_are_checked(yaml_text, message, tmp_path):
    """kafka-python takes these until it connects, then retries until the connect timeout: kdsm stream said "Kafka
    at ... is unreachable: no broker answered within 3 s", and kdsm config check said OK."""
    names = {"missing": str(tmp_path / "missing.pem"), "folder": str(tmp_path)}
    f = tmp_path / "c.yaml"
    f.write_text("kafka:\n  " + yaml_text.format(**names))
    with pytest.raises(ConfigError) as e:
        load_settings(Settings, f)
    assert message.format(**names) in str(e.value)


def test_kafka_security_settings_that_can_work_pass(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("read by kafka-python when it connects\n")
    k = load_settings(Settings, kafka={"security_protocol": "SASL_SSL", "sasl_mechanism": "scram-sha-256",
                                       "ssl_cafile": str(ca)}).kafka
    assert (k.sasl_mechanism, k.ssl_cafile) == ("SCRAM-SHA-256", str(ca))
    # the production profile: its password comes from the environment, which the check does not require
    assert load_settings(Settings, Path(__file__).resolve().parents[1] / "configs" / "production.yaml").kafka.sasl_mechanism == "PLAIN"


@pytest.mark.parametrize(("key", "value", "allowed"), [
    ("auto_offset_reset", "earlist", "'earliest' or 'latest'"),
    ("security_protocol", "SASL-SSL", "'PLAINTEXT', 'SSL', 'SASL_PLAINTEXT' or 'SASL_SSL'"),
    ("security_protocol", "sasl_ssl", "'PLAINTEXT', 'SSL', 'SASL_PLAINTEXT' or 'SASL_SSL'")])
def test_kafka_choices_are_checked(key, value, allowed, tmp_path):
    """A typo in auto_offset_reset was accepted: kafka-python only logged it (silenced) and the loop crashed later."""
    f = tmp_path / "c.yaml"
    f.write_text(f"kafka:\n  {key}: {value}\n")
    with pytest.raises(ConfigError, match=rf"kafka\.{key}: Input should be {allowed}"):
        load_settings(Settings, f)


def test_metrics_port_is_a_port(monkeypatch):
    """70000 passed the check and died in the metrics server's bind with an OverflowError traceback."""
    monkeypatch.setenv("KDSM_METRICS__PORT", "70000")
    with pytest.raises(ConfigError, match=r"metrics\.port: Input should be less than or equal to 65535"):
        load_settings(Settings)


@pytest.mark.parametrize(("yaml_text", "message"), [
    ("retrain:\n  gate_min_alert_ratio: 5\n  gate_max_alert_ratio: 1\n",
     "retrain: Value error, gate_min_alert_ratio (5) must be below gate_max_alert_ratio (1)"),
    ("retrain:\n  gate_min_alert_ratio: 3\n", "gate_min_alert_ratio (3) must be below gate_max_alert_ratio (3)"),
    ("calibration:\n  severities: {warning: 0.999, critical: 0.99}\n",
     "calibration: Value error, severity 'critical' (quantile 0.99) must be above 'warning' (0.999)"),
    ("calibration:\n  severities: {critical: 0.99, notice: 0.95, error: 0.95}\n",
     "severity 'error' (quantile 0.95) must be above 'notice' (0.95)"),
    ("train:\n  lr: .inf\n", "train.lr: Input should be a finite number"),
    ("train:\n  weight_decay: .nan\n", "train.weight_decay: Input should be a finite number"),
    ("features:\n  - {name: f0, type: numeric, clip: [.nan, 1]}\n", "Input should be a finite number"),
    ("features:\n  - {name: f0, type: numeric, clip: [5, 1]}\n", "clip [5, 1] has its low bound above its high bound"),
    ("calibration:\n  severities: {}\n", "calibration.severities: Dictionary should have at least 1 item"),
    ("calibration:\n  severities: {'': 0.99}\n", "a severity needs a name"),
    ("data:\n  max_train_rows: 1\n", "data.max_train_rows: Input should be greater than or equal to 2"),
    ("kafka:\n  heartbeat_interval_ms: 20000\n",
     "kafka: Value error, heartbeat_interval_ms (20000) must be below session_timeout_ms (10000)"),
    ("kafka:\n  fetch_max_wait_ms: 30000\n", "kafka.fetch_max_wait_ms: Input should be less than 30000"),
    ("kafka:\n  linger_ms: 2000\n  delivery_timeout_s: 2\n",
     "kafka: Value error, linger_ms (2000) must be below delivery_timeout_s (2 s)")])
def test_contradictory_pairs_are_refused(yaml_text, message, tmp_path):
    """Each passed kdsm config check: every retrain was then rejected, an artifact had warning above critical, or
    training crashed (a NaN clip bound in the scaler, no severity at calibration, one row for the k-NN reference) or
    trained a NaN network (an infinite learning rate), or kdsm stream crashed with kafka-python's traceback when it
    built its clients (a heartbeat not below the session timeout, a fetch wait not below the request timeout, a
    producer linger not below the delivery timeout)."""
    f = tmp_path / "c.yaml"
    f.write_text(yaml_text)
    with pytest.raises(ConfigError) as e:
        load_settings(Settings, f)
    assert message in str(e.value)


def test_severities_in_order_or_of_other_names_pass():
    s = load_settings(Settings, calibration={"severities": {"critical": 0.999, "info": 0.9, "warning": 0.99}})
    assert s.calibration.severities["info"] == 0.9
    # names off the syslog ladder keep ranking by their quantile alone
    assert load_settings(Settings, calibration={"severities": {"p1": 0.9, "p2": 0.8}}).calibration.severities
    assert load_settings(Settings, retrain={"gate_min_alert_ratio": 0.5, "gate_max_alert_ratio": 2}).retrain


def test_an_artifact_with_warning_above_critical_still_loads(tiny_model_dir, tmp_path):
    """The order is a rule for training: an artifact trained before it (registered, serving) keeps loading. Its
    thresholds are what calibration gave those quantiles (warning's above critical's): load checks that they are."""
    from offline_train.artifact import read_artifact, write_artifact
    from offline_train.calibrate import Calibration
    from offline_train.detector import KDSM

    tensors, meta = read_artifact(tiny_model_dir)
    meta["quantiles"] = {"warning": 0.999, "critical": 0.99}
    meta["thresholds"] = Calibration.fit(tensors["calibration_scores"].numpy(), meta["quantiles"]).thresholds
    out = write_artifact(tmp_path / "inverted", tensors, meta)
    det = KDSM.load(out, device="cpu")
    assert det.calibration_config.severities == {"warning": 0.999, "critical": 0.99}
