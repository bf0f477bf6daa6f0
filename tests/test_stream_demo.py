"""``kdsm demo`` runs end to end on embedded defaults and stops what it started."""

from __future__ import annotations

import re

import pytest

from streamer.config import Settings
from streamer.dev import local_services
from streamer.dev.demo import run_demo

pytestmark = pytest.mark.integration


def test_demo_trains_streams_prints_alerts_and_cleans_up(tmp_path):
    lines: list[str] = []
    assert run_demo(Settings, events=400, rate=2000, duration=60, steps=20, workdir=str(tmp_path), out=lines.append) == 0
    text = "\n".join(lines)
    assert "done: 400 events scored" in text
    ports = [int(m) for m in re.findall(r"started \w+ at (?:redis://)?127\.0\.0\.1:(\d+)", text)]
    assert len(ports) == 2 and not any(local_services.port_open("127.0.0.1", p) for p in ports)
    n_alerts = int(re.search(r"(\d+) alerts", text).group(1))
    alert_lines = [line for line in lines if line.startswith("ALERT ")]
    assert len(alert_lines) == n_alerts > 0
    # Each alert line shows the three parts of the default's score and the one the score equals.
    assert all(re.search(r"\(network [\d.]+, forest -?[\d.]+, k-NN [\d.]+; led by (network|forest|k-NN)\)", line)
               for line in alert_lines)
    assert (tmp_path / "model" / "report" / "report.json").exists()
    metrics = (tmp_path / "metrics.txt").read_text()
    assert "kdsm_events_total" in metrics
    # Every alert the streamer published is printed, the last batch's too.
    published = sum(float(v) for v in re.findall(r"^kdsm_alerts_total\{[^}]*\} (\S+)$", metrics, re.M))
    assert published == n_alerts


@pytest.mark.parametrize(("argv", "message"), [
    (["--events", "-5"], "expected a positive integer"), (["--steps", "0"], "expected a positive integer"),
    (["--rate", "0"], "expected a positive number"), (["--duration", "x"], "expected a positive number"),
    (["--metrics-port", "70000"], "expected a TCP port (1-65535)")])
def test_demo_refuses_a_bad_option_in_one_line(argv, message, capsys):
    """Before any service starts: a count, rate or duration that cannot run is a usage line and exit 2."""
    from streamer.ops.cli import main

    with pytest.raises(SystemExit) as e:
        main(["demo", *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err
