"""``kdsm demo`` ends cleanly: on Ctrl-C (once or twice) it stops everything it started, without a traceback; a missing
dev-service program is one line, not a traceback."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from streamer.dev import local_services

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]


def _demo(workdir: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "streamer", "demo", "--workdir", str(workdir), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie no longer does)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _ports(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"started \w+ at (?:redis://)?127\.0\.0\.1:(\d+)", text)]


def test_a_missing_service_program_is_one_line_and_stops_what_started(tmp_path):
    """`PATH` without redis-server: a traceback ending in ServiceError, exit 1. Now one line, exit 2, and the broker
    started before it is stopped."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    p = _demo(tmp_path / "work", "--events", "10", env={"PATH": str(bin_dir)})
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2, (out, err)
    assert "Traceback" not in err and err.strip().splitlines() == [
        "kdsm demo: error: redis-server not found: apt-get install -y redis-server"], err
    ports = _ports(out)
    assert ports and not any(local_services.port_open("127.0.0.1", port) for port in ports), out


@pytest.mark.parametrize("signals", [1, 2], ids=["one Ctrl-C", "two Ctrl-C"])
def test_ctrl_c_stops_everything_the_demo_started(signals, tmp_path):
    """On Ctrl-C the replay's producer outlived the broker (a KafkaTimeoutError traceback at exit); a second Ctrl-C cut
    the clean-up short and left Tansu and Redis running. Now: exit 130, one line, both stopped."""
    work = tmp_path / "work"
    p = _demo(work, "--events", "100000", "--rate", "200", "--steps", "10", "--duration", "300")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True)  # list.extend: line by line
    reader.start()
    pids: list[int] = []
    try:
        deadline, replaying = time.monotonic() + 150, None
        while time.monotonic() < deadline and p.poll() is None:
            if replaying is None and any(line.startswith("replaying ") for line in lines):
                replaying = time.monotonic()
            if replaying is not None and (any(line.startswith("ALERT ") for line in lines)
                                          or time.monotonic() > replaying + 10):
                break  # the streamer scores the replay
            time.sleep(0.2)
        assert replaying is not None and p.poll() is None, "".join(lines)
        pids = [int(f.read_text().split()[0]) for f in (work / "services").glob("*.pid")]
        assert len(pids) == 2 and all(_running(pid) for pid in pids)
        for _ in range(signals):
            p.send_signal(signal.SIGINT)
            time.sleep(0.05)
        err = p.communicate(timeout=60)[1]
        reader.join(10)
        assert p.returncode == 130, err
        assert err.strip().splitlines() == ["kdsm demo: interrupted"], err
        assert not [pid for pid in pids if _running(pid)]
        assert not any(local_services.port_open("127.0.0.1", port) for port in _ports("".join(lines)))
        assert not list((work / "services").glob("*.pid"))
    finally:  # a failure leaves nothing of this test running
        if p.poll() is None:
            p.kill()
            p.wait(10)
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
