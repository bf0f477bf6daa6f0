"""configs/: default.yaml is generated from Settings and stays equal to it; every config file validates."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from offline_train.config import load_settings
from streamer.config import Settings
from streamer.ops.render import default_yaml, iter_keys, reference_table

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
ALL_YAML = sorted([*CONFIGS, *(ROOT / "deploy").rglob("*.yaml"), *(ROOT / "deploy").rglob("*.yml")])


@pytest.fixture(autouse=True)
def _no_kdsm_env(monkeypatch):
    # a KDSM_<SECTION>__<KEY> left in the shell would change what the files load to
    for name in list(os.environ):
        if name.startswith("KDSM_") and "__" in name:
            monkeypatch.delenv(name)


def _get(doc: dict, path: str):
    for part in path.split("."):
        assert isinstance(doc, dict) and part in doc, f"{path} missing"
        doc = doc[part]
    return doc


def test_default_yaml_is_the_generated_text():
    text = (ROOT / "configs" / "default.yaml").read_text()
    assert text == default_yaml(Settings), "configs/default.yaml is stale: python -m streamer.ops.render default > configs/default.yaml"


def test_default_yaml_loads_to_the_defaults_and_covers_every_key():
    path = ROOT / "configs" / "default.yaml"
    loaded = load_settings(Settings, path)
    assert loaded == Settings()
    doc = yaml.safe_load(path.read_text())
    keys = list(iter_keys(Settings))
    assert len(keys) > 100
    for k in keys:
        value = _get(doc, k.path)
        default = k.default.get_secret_value() if hasattr(k.default, "get_secret_value") else k.default
        assert value == (list(default) if isinstance(default, tuple) else default), k.path
    # every top-level key of the file is a section of Settings (nothing stale left behind)
    assert set(doc) == set(Settings.model_fields)


def test_every_key_is_commented_in_default_yaml():
    lines = (ROOT / "configs" / "default.yaml").read_text().splitlines()
    for k in iter_keys(Settings):
        assert k.help, f"{k.path} has no description"
        leaf = k.path.rsplit(".", 1)[-1]
        idx = [i for i, line in enumerate(lines) if re.match(rf"\s*{re.escape(leaf)}:", line)]
        assert any(lines[i - 1].strip() == f"# {k.help}" for i in idx), f"{k.path}: no comment above it"


@pytest.mark.parametrize("path", ALL_YAML, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_yaml_file_parses(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs and all(isinstance(d, dict) for d in docs)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_config_validates(path):
    s = load_settings(Settings, path)
    assert isinstance(s, Settings)


def test_env_overrides_a_config_file(monkeypatch):
    monkeypatch.setenv("KDSM_KAFKA__BOOTSTRAP", "kafka-0:9092,kafka-1:9092")
    monkeypatch.setenv("KDSM_MODEL__WIDTH", "128")
    s = load_settings(Settings, ROOT / "configs" / "demo.yaml")
    assert s.kafka.bootstrap == "kafka-0:9092,kafka-1:9092" and s.model.width == 128
    assert s.kafka.group_id == "kdsm-demo"  # untouched keys still come from the file


def test_paper_profile_is_the_published_setting():
    s = load_settings(Settings, ROOT / "configs" / "paper.yaml")
    assert (s.model.width, s.model.depth, s.model.dropout_hidden, s.model.dropout_residual) == (512, 6, 0.2, 0.1)
    assert s.train.profile == "paper" and s.train.budget(1000) == 500 * 8  # 500 epochs of 8 batches of 128
    assert s.sigma.clip_range == (0.1, 2.0)
    assert s.ema.enabled and (s.ema.decay, s.ema.percentile) == (0.999, 80.0)
    assert not s.refine.enabled and not s.score.isolation_forest  # trains on every row, scores ||f(x)|| alone
    assert (s.train.lr, s.train.weight_decay, s.train.batch_size, s.train.noise_copies) == (5e-4, 5e-5, 128, 3)


def test_demo_config_uses_the_local_dev_ports_and_a_small_model():
    s = load_settings(Settings, ROOT / "configs" / "demo.yaml")
    start = (ROOT / "deploy" / "local" / "start.sh").read_text()
    kport = re.search(r"KAFKA_PORT:-(\d+)", start).group(1)
    rport = re.search(r"REDIS_PORT:-(\d+)", start).group(1)
    assert s.kafka.bootstrap == f"127.0.0.1:{kport}"
    assert s.redis.url.startswith(f"redis://127.0.0.1:{rport}/")
    assert s.model.width <= 64 and s.train.budget(10_000) <= 1000
    # the Tansu quirk: a group join takes half the session timeout
    assert s.kafka.session_timeout_ms <= 6000


def test_reference_table_lists_every_key_with_its_env_var():
    table = reference_table(Settings)
    for k in iter_keys(Settings):
        assert f"| `{k.path}` | `{k.env}` |" in table
    assert "KDSM_KAFKA__SASL_PASSWORD" in table and "KDSM_DRIFT__ADWIN__DELTA" in table


def test_docs_configuration_reference_is_current():
    from streamer.ops.render import REF_BEGIN, REF_END

    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split(REF_BEGIN, 1)[1].split(REF_END, 1)[0]
    assert section.strip() == reference_table(Settings).strip(), "stale: python -m streamer.ops.render docs"
    # the ops guide links the retraining guide and the streaming reference, which exist
    for link in re.findall(r"\]\(([\w.-]+\.md)", text):
        assert (ROOT / "docs" / link).is_file(), link


def test_contaminated_core_profile_learns_the_core_for_a_quarter_of_the_budget():
    s = load_settings(Settings, ROOT / "configs" / "contaminated-core.yaml")
    default = Settings()
    assert s.refine.enabled and s.refine.rounds == 0 and s.refine.start_keep == 0.5
    assert s.score.isolation_forest and s.ema.enabled  # the default's blend and teacher
    for n in (1000, 5000, 100_000):  # a quarter of the default's budget, bounds included
        assert abs(s.train.budget(n) - default.train.budget(n) / 4) <= 1


def test_clean_history_profile_is_the_benchmarks_kdsm_method():
    """configs/clean-history.yaml trains exactly what `kdsm bench adbench --methods kdsm` trains (its README figures)."""
    from offline_train.evaluation.methods import make_kdsm

    clean = make_kdsm("default", load_settings(Settings, ROOT / "configs" / "clean-history.yaml"), seed=3)
    published = make_kdsm("kdsm", Settings(), seed=3)
    assert clean.get_params() == published.get_params()
    assert not clean.refine.enabled and not clean.ema.enabled and not clean.score.isolation_forest
    assert clean.sigma.mode == "kurtosis"  # K-DSM, not plain DSM
    # and it is not the default, whose three contamination guards are on
    default = make_kdsm("default", Settings(), seed=3)
    assert default.refine.enabled and default.ema.enabled and default.score.isolation_forest


def test_no_training_rows_profile_is_the_default_with_two_parts():
    s = load_settings(Settings, ROOT / "configs" / "no-training-rows.yaml")
    default = Settings()
    assert default.score.knn and default.score.isolation_forest  # three parts by default
    assert not s.score.knn and s.score.isolation_forest  # the network and the forest: no training rows in the artifact
    assert s.model_copy(update={"score": default.score}) == default  # nothing else differs


def test_the_knn_part_follows_the_forest_unless_asked_for():
    from offline_train.config import ScoreConfig

    for off in (False, "false", "off"):  # YAML and environment spellings
        assert not ScoreConfig(isolation_forest=off).knn  # the published score: the network alone
    for name in ("paper.yaml", "clean-history.yaml"):  # network-only profiles carry no k-NN part
        assert not load_settings(Settings, ROOT / "configs" / name).score.knn


def test_a_config_read_from_a_pipe_loads_as_from_a_file():
    """``--config <(envsubst < tpl.yaml)`` hands the command a pipe (/dev/fd/N): read once, like a file."""
    r, w = os.pipe()
    os.write(w, b"train:\n  steps: 7\n")
    os.close(w)
    try:
        assert load_settings(Settings, f"/dev/fd/{r}").train.steps == 7
    finally:
        os.close(r)


def test_registry_device_says_what_it_does():
    """registry.device is where the retrain job and its gate load models; streamers load theirs onto stream.device
    (streamer.wiring): the description said streamers used it."""
    text = Settings.model_fields["registry"].annotation.model_fields["device"].description
    assert "retrain" in text and "gate" in text and "streamers use stream.device" in text
