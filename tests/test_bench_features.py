"""The feature-spec benches, the bundled mixed data set and the mixed demo."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from offline_train.config import load_settings
from offline_train.data import BUNDLED_SOLAR_FLARE
from offline_train.evaluation.solar_flare import SPEC, build_table
from streamer.config import Settings
from streamer.dev.bench_features import run_quality, run_speed

ROOT = Path(__file__).resolve().parents[1]


def test_bundled_solar_flare_is_the_documented_rule_applied_to_rivers_copy():
    assert pq.read_table(BUNDLED_SOLAR_FLARE).equals(build_table())
    t = build_table()
    assert t.num_rows == 1066 and sum(t.column("label").to_pylist()) == 38  # M- or X-class flares


def test_demo_mixed_config_holds_the_benchs_spec():
    assert load_settings(Settings, ROOT / "configs" / "demo-mixed.yaml").features == SPEC


def test_speed_bench_writes_its_figures(tmp_path):
    out = tmp_path / "speed.json"
    r = run_speed(Settings(), events=600, repeats=1, out=str(out), log=lambda m: None)
    saved = json.loads(out.read_text())
    assert saved["mixed_event"]["features"] == 17 and saved["mixed_event"]["spec_decoder_us"] > 0
    assert r["numeric_event"]["fast_path_us"] > 0 and "load_avg_before" in saved["machine"]


def test_quality_bench_reports_each_method(tmp_path):
    s = Settings()
    s.model.width, s.model.depth, s.train.steps = 16, 1, 20
    r = run_quality(s, seeds=1, out=str(tmp_path / "q.json"), log=lambda m: None)
    assert [row["method"].split(" ")[0] for row in r["results"]] == ["K-DSM", "IForest", "KNN", "K-DSM"]
    assert all(0 < row["auc_roc_mean"] <= 1 for row in r["results"]) and r["data"]["anomalies"] == 38


@pytest.mark.integration
def test_mixed_demo_alerts_name_categorical_features(tmp_path):
    from streamer.dev.demo import run_demo

    lines: list[str] = []
    assert run_demo(Settings, events=600, rate=2000, duration=60, steps=60, workdir=str(tmp_path), out=lines.append,
                    mixed=True) == 0
    alerts = [line for line in lines if line.startswith("ALERT ")]
    assert alerts and "done: 600 events scored" in "\n".join(lines)
    assert any(re.search(r'(zurich_class|spot_size|spot_distribution) = "\w"', a) for a in alerts)
