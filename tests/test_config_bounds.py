"""Config values a run allocates or loops in proportion to have an upper bound: a huge one (a typo) is one line and
exit 2, not an allocator's traceback or a hang; a section that is not a mapping stays an error under env vars."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from offline_train.config import (
    MAX_CATEGORIES,
    MAX_HASH_BUCKETS,
    ConfigError,
    DataConfig,
    FeatureSpec,
    ModelConfig,
    OptimConfig,
    RefineConfig,
    SigmaConfig,
    StorageConfig,
    TrainSettings,
    load_settings,
)
from streamer.config import Settings
from streamer.ops.cli import main

HUGE = 10**9

# (section, key, the largest value allowed, the model of the section)
BOUNDED = [
    ("train", "noise_copies", 1024, OptimConfig),
    ("sigma", "bins", 10**6, SigmaConfig),
    ("refine", "rounds", 10**4, RefineConfig),
    ("refine", "strata", 256, RefineConfig),
    ("model", "width", 8192, ModelConfig),
    ("model", "depth", 128, ModelConfig),
    ("data", "batch_rows", 2**24, DataConfig),
    ("data", "workers", 256, DataConfig),
    ("storage", "retries", 20, StorageConfig),
]


@pytest.fixture(autouse=True)
def _no_kdsm_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("KDSM_") and "__" in name:
            monkeypatch.delenv(name)


@pytest.mark.parametrize(("section", "key", "bound", "model"), BOUNDED, ids=[f"{s}.{k}" for s, k, _, _ in BOUNDED])
def test_a_huge_value_is_refused_naming_the_key(section, key, bound, model):
    assert getattr(model(**{key: bound}), key) == bound  # the bound itself is allowed
    for value in (bound + 1, HUGE):
        with pytest.raises(ValidationError) as e:
            model(**{key: value})
        assert [err["loc"] for err in e.value.errors()] == [(key,)]
        assert e.value.errors()[0]["type"] == "less_than_equal"


@pytest.mark.parametrize(("section", "key", "bound", "model"), BOUNDED, ids=[f"{s}.{k}" for s, k, _, _ in BOUNDED])
def test_a_huge_env_value_is_a_config_error(section, key, bound, model, monkeypatch):
    monkeypatch.setenv(f"KDSM_{section.upper()}__{key.upper()}", str(HUGE))
    with pytest.raises(ConfigError, match=rf"^invalid configuration: {section}\.{key}: Input should be less than "
                                          rf"or equal to {bound}$"):
        load_settings(TrainSettings)


@pytest.mark.parametrize(("key", "bound"), [("max_categories", MAX_CATEGORIES), ("hash_buckets", MAX_HASH_BUCKETS)])
def test_a_huge_feature_width_is_refused_in_a_config_not_in_an_artifact(key, bound):
    spec = {"name": "os", "type": "categorical", key: bound}
    assert getattr(FeatureSpec(**spec), key) == bound
    with pytest.raises(ValidationError) as e:
        TrainSettings(features=[{**spec, key: bound + 1}])
    assert f"{key} {bound + 1} is above {bound}" in str(e.value)
    # A spec an artifact holds loads as it was trained: the bound came later (a model of 5000 hash buckets served)
    assert getattr(FeatureSpec.model_validate({**spec, key: bound + 1}, context={"artifact": True}), key) == bound + 1


@pytest.mark.parametrize(("section", "key", "bound", "model"), BOUNDED, ids=[f"{s}.{k}" for s, k, _, _ in BOUNDED])
def test_config_check_refuses_a_huge_value_in_one_line(section, key, bound, model, tmp_path, capsys):
    cfg = tmp_path / "huge.yaml"
    cfg.write_text(f"{section}:\n  {key}: {HUGE}\n")
    assert main(["config", "check", str(cfg)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "OK" not in captured.out
    assert f"{section}.{key}: Input should be less than or equal to {bound}" in err


def test_config_check_refuses_a_huge_feature_width(tmp_path, capsys):
    cfg = tmp_path / "huge.yaml"
    cfg.write_text(f"features:\n  - name: os\n    type: categorical\n    encoding: hash\n    hash_buckets: {HUGE}\n")
    assert main(["config", "check", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"hash_buckets {HUGE} is above {MAX_HASH_BUCKETS}" in err



# A section the file sets to something other than a mapping: ``train:`` alone is null (refused, as it always was
# without environment variables), ``train: {}`` an empty section.
NOT_MAPPINGS = ["train: 7\n", "train: [1, 2]\n", "train:\n", "train: null\n", "train: seven\n"]


def _check(path, capsys) -> tuple[int, str]:
    rc = main(["config", "check", str(path)])
    captured = capsys.readouterr()
    assert (rc == 0) == captured.out.startswith("OK: ")
    return rc, captured.err.strip()


@pytest.mark.parametrize("text", NOT_MAPPINGS)
@pytest.mark.parametrize(("name", "value"), [("KDSM_TRAIN__THREADS", "1"), ("KDSM_TRAIN", '{"threads": 1}')])
def test_a_section_that_is_not_a_mapping_is_refused_under_an_env_var(text, name, value, tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "section.yaml"
    cfg.write_text(text)
    rc, alone = _check(cfg, capsys)
    assert rc == 2 and len(alone.splitlines()) == 1
    assert alone.endswith("train: Input should be a valid dictionary or instance of OptimConfig")
    monkeypatch.setenv(name, value)
    assert _check(cfg, capsys) == (2, alone)  # the same line: the variable does not hide the file's error
    with pytest.raises(ConfigError, match="train: Input should be a valid dictionary"):
        load_settings(Settings, cfg)


def test_every_error_of_the_file_is_listed_under_an_env_var(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "two.yaml"
    cfg.write_text("train: 7\nmodel:\n  width: -1\n")
    rc, alone = _check(cfg, capsys)
    assert rc == 2 and "train: Input should be a valid dictionary" in alone and "model.width" in alone
    monkeypatch.setenv("KDSM_TRAIN__THREADS", "1")
    monkeypatch.setenv("KDSM_MODEL__DEPTH", "2")
    assert _check(cfg, capsys) == (2, alone)


def test_a_nested_section_that_is_not_a_mapping_is_refused_under_an_env_var(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "adwin.yaml"
    cfg.write_text("drift:\n  adwin: 7\n")
    rc, alone = _check(cfg, capsys)
    assert rc == 2 and "drift.adwin: Input should be a valid dictionary" in alone
    monkeypatch.setenv("KDSM_DRIFT__ADWIN__DELTA", "0.01")
    assert _check(cfg, capsys) == (2, alone)


def test_an_explicit_override_does_not_hide_a_section_that_is_not_a_mapping(tmp_path):
    cfg = tmp_path / "seven.yaml"
    cfg.write_text("train: 7\n")
    with pytest.raises(ConfigError, match="train: Input should be a valid dictionary"):
        load_settings(Settings, cfg, train={"threads": 1})


@pytest.mark.parametrize("text", ["train: {}\n", "train:\n  steps: 5\n", "sigma:\n  bins: 300\n"])
def test_env_vars_still_merge_over_a_section_that_is_a_mapping(text, tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "ok.yaml"
    cfg.write_text(text)
    monkeypatch.setenv("KDSM_TRAIN__THREADS", "1")
    monkeypatch.setenv("KDSM_DRIFT__ADWIN__DELTA", "0.01")
    assert main(["config", "check", str(cfg)]) == 0
    assert capsys.readouterr().out.startswith("OK: ")
    s = load_settings(Settings, cfg)
    assert s.train.threads == 1 and s.drift.adwin.delta == 0.01
    assert s.train.steps == (5 if "steps" in text else None) and s.sigma.bins == (300 if "bins" in text else 200)
