"""``kdsm replay``: Parquet rows become JSON events (no label), keyed by id, stamped with the send time."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import yaml
from stream_support import create_topics, make_settings, read_topic

from offline_train.data import write_parquet
from streamer.ops.cli import main as kdsm


@pytest.mark.integration
def test_replay_produces_rows_as_events_at_a_rate(tmp_path, kafka_bootstrap, redis_url, unique):
    s = make_settings(kafka_bootstrap, redis_url, unique)
    create_topics(s)
    X = np.random.default_rng(0).normal(size=(50, 3))
    data = write_parquet(tmp_path / "rows.parquet", X, ["a", "b", "c"], y=np.zeros(50, int), ids=np.arange(100, 150))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"kafka": {"bootstrap": kafka_bootstrap}}))
    t0 = time.time()
    assert kdsm(["replay", "--data", str(data), "--topic", s.kafka.events_topic, "--rate", "100", "--config", str(cfg)]) == 0
    assert time.time() - t0 >= 0.4  # 50 events at 100/s take about half a second
    recs = read_topic(kafka_bootstrap, s.kafka.events_topic, 50)
    events = [json.loads(r.value) for r in recs]
    assert [e["id"] for e in events] == list(range(100, 150))
    assert [r.key for r in recs] == [str(i).encode() for i in range(100, 150)]
    assert all("label" not in e and t0 - 1 <= e["ts"] <= time.time() + 1 for e in events)
    np.testing.assert_array_equal(np.array([[e["a"], e["b"], e["c"]] for e in events]), X)


@pytest.mark.parametrize(("argv", "message"), [
    (["--limit", "-1"], "--limit: expected a positive integer"), (["--limit", "0"], "--limit: expected a positive integer"),
    (["--repeat", "0"], "--repeat: expected a positive integer"), (["--repeat", "-2"], "--repeat: expected a positive integer"),
    (["--rate", "0"], "--rate: expected a positive number"), (["--rate", "-10"], "--rate: expected a positive number")])
def test_replay_refuses_a_bad_option_in_one_line(argv, message, capsys):
    """--limit -1 dropped the last row, --repeat 0 sent nothing, --rate 0 or below sent flat out: now a usage line
    and exit 2, before the data is read or a broker reached."""
    with pytest.raises(SystemExit) as e:
        kdsm(["replay", "--data", "absent.parquet", *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err
