"""The stream benches' own arithmetic and outputs (the group rate of N streamers, the sweep's PNG), and bad options."""

from __future__ import annotations

import pytest

from streamer.dev.bench_scale import group_rate
from streamer.dev.bench_stream import _plot_sweep


def test_group_rate_counts_only_the_window_where_every_process_commits():
    # Child a commits 100 rows every 0.1 s from t=0 to 2; child b joins late (t=1) and stops at t=1.5.
    a = [(i / 10, 100) for i in range(21)]
    b = [(1.0 + i / 10, 50) for i in range(6)]
    r = group_rate([a, b])
    assert r["window_s"] == 0.5
    # (1.0, 1.5]: a commits 5 times (500 rows), b 5 times (250 rows).
    assert r["window_events_per_s"] == 1500.0
    assert r["rows"] == 21 * 100 + 6 * 50
    # A child that committed nothing leaves no common window: the whole run stands in.
    assert group_rate([a, []])["window_s"] == 0.0


def test_sweep_plot_is_a_png(tmp_path):
    pts = [{"max_batch": b, "max_wait_ms": w, "e2e_events_per_s": b * 10 + w,
            "to_alert_acked": {"p99_ms": 50.0 + w}} for b in (128, 512) for w in (10, 100)]
    path = tmp_path / "sweep.png"
    _plot_sweep({"points": pts, "machine": {"cpu": "x", "cores": 2, "device": "cpu"}, "delivery": "at_least_once"}, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


@pytest.mark.parametrize("argv", [["--events", "-3"], ["--max-batch", "0"], ["--rounds", "x"], ["--partitions", "0"]])
def test_bench_stream_refuses_counts_below_one_in_one_line(argv, capsys):
    from streamer.ops.cli import main

    with pytest.raises(SystemExit) as e:
        main(["bench", "stream", *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "expected a positive integer" in err and "Traceback" not in err



@pytest.mark.parametrize("value", ["2", "0", "x"])
def test_bench_stream_refuses_an_alert_share_outside_zero_to_one_in_one_line(value, capsys):
    from streamer.ops.cli import main

    with pytest.raises(SystemExit) as e:
        main(["bench", "stream", "--scorer", "none", "--alert-share", value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "expected a share in (0, 1]" in err and "Traceback" not in err

@pytest.mark.integration
def test_bench_stream_reports_every_round_and_their_medians(kafka_bootstrap, tmp_path, monkeypatch):
    """``--rounds``: consume-only and end to end alternate on fresh groups; the headline is the median of the
    rounds' ratios and the two rates are the medians of the rounds' (real broker). The latency stage's replay
    produces to the bench's broker whatever ``KDSM_KAFKA__BOOTSTRAP`` says (it outranked the replay's config file,
    and the stage waited for events sent elsewhere)."""
    import json
    import statistics

    from streamer.config import Settings
    from streamer.dev.bench_stream import run

    s = Settings()
    monkeypatch.setenv("KDSM_KAFKA__BOOTSTRAP", "127.0.0.1:9")  # the discard port: nothing listens there
    s.kafka.bootstrap = kafka_bootstrap
    s.stream.max_batch = 500
    out = tmp_path / "bench.json"
    r = run(s, events=3000, width=16, depth=1, features=3, latency_seconds=0.5, out=str(out), external_broker=True,
            scorer_kind="none", rounds=3, log=lambda line: None)
    rounds = r["rounds"]
    assert len(rounds) == 3 and all(x["consume_only_msg_per_s"] > 0 and x["e2e_events_per_s"] > 0 for x in rounds)
    for x in rounds:
        assert x["ratio"] == pytest.approx(x["e2e_events_per_s"] / x["consume_only_msg_per_s"], abs=1e-3)
    assert r["ratio_e2e_over_consume"] == pytest.approx(statistics.median(x["ratio"] for x in rounds), abs=1e-3)
    assert r["e2e_events_per_s"] == round(statistics.median(x["e2e_events_per_s"] for x in rounds))
    assert r["config"]["rounds"] == 3 and json.loads(out.read_text())["rounds"] == rounds
    assert r["latency"]["to_commit"]["n"] > 0


def test_a_bench_keeps_its_temp_folder_only_after_a_failure(tmp_path, capsys):
    from streamer.dev.bench_fixtures import remove_scratch

    ok, failed = tmp_path / "ok", tmp_path / "failed"
    for d in (ok, failed):
        (d / "state").mkdir(parents=True)
    try:
        pass
    finally:
        remove_scratch(ok)
    with pytest.raises(RuntimeError):
        try:
            raise RuntimeError("the run failed")
        finally:
            remove_scratch(failed)
    assert not ok.exists() and (failed / "state").is_dir()
    assert f"kept {failed}" in capsys.readouterr().err


def test_sigterm_ends_a_bench_through_its_finally_blocks(tmp_path):
    """``timeout`` (deploy/gpu/check.sh) stops a bench with SIGTERM: its finally blocks must run (stop the broker)."""
    import signal
    import subprocess
    import sys
    import time

    done = tmp_path / "finally-ran"
    code = ("import time\nfrom streamer.dev.bench_fixtures import stop_on_sigterm\nstop_on_sigterm()\n"
            f"try:\n    print('ready', flush=True)\n    time.sleep(60)\nfinally:\n    open({str(done)!r}, 'w').close()\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 128 + signal.SIGTERM and time.monotonic() - t0 < 10
    assert done.exists()
