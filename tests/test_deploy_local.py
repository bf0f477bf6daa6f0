"""deploy/local/start.sh and stop.sh: idempotent, and a clear message when a port is taken."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from streamer.dev.local_services import free_port, port_open

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, state: Path, kport: int, rport: int, sport: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "KDSM_LOCAL_STATE": str(state), "KAFKA_PORT": str(kport), "REDIS_PORT": str(rport),
           "S3_PORT": str(sport or free_port())}
    return subprocess.run(["bash", str(ROOT / "deploy" / "local" / script)], env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_taken_port_is_reported_not_fought_over(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        r = _run("start.sh", tmp_path, taken, free_port())
        assert r.returncode == 1
        assert f"port {taken} on 127.0.0.1 is already taken by another program" in r.stderr
        assert "KAFKA_PORT=" in r.stderr and "Traceback" not in r.stderr
        # stop.sh leaves the other program alone (only services with our pid file are stopped)
        s = _run("stop.sh", tmp_path, taken, free_port())
        assert s.returncode == 0 and "kafka: was not running" in s.stdout
        assert port_open("127.0.0.1", taken)


def test_start_and_stop_are_idempotent(tmp_path):
    kport, rport, sport = free_port(), free_port(), free_port()
    ports = (("kafka", kport), ("redis", rport), ("s3", sport))
    try:
        first = _run("start.sh", tmp_path, kport, rport, sport)
        assert first.returncode == 0, first.stderr
        assert all(port_open("127.0.0.1", p) for _, p in ports)
        pids = {n: (tmp_path / f"{n}-{p}.pid").read_text() for n, p in ports}
        second = _run("start.sh", tmp_path, kport, rport, sport)
        assert second.returncode == 0 and f"KDSM_KAFKA__BOOTSTRAP=127.0.0.1:{kport}" in second.stdout
        assert f"KDSM_STORAGE__S3_ENDPOINT=http://127.0.0.1:{sport}" in second.stdout
        assert {n: (tmp_path / f"{n}-{p}.pid").read_text() for n, p in ports} == pids
    finally:
        stop = _run("stop.sh", tmp_path, kport, rport, sport)
    assert stop.returncode == 0 and "kafka: stopped" in stop.stdout and "redis: stopped" in stop.stdout
    assert "s3: stopped" in stop.stdout
    assert not any(port_open("127.0.0.1", p) for _, p in ports)
    again = _run("stop.sh", tmp_path, kport, rport, sport)
    assert again.returncode == 0 and "kafka: was not running" in again.stdout


def test_local_redis_keeps_its_data_across_stop_and_start(tmp_path):
    """docs/operations.md: stopping the local services keeps the registry (Redis appends to a file in the state dir)."""
    import redis

    from streamer.dev.local_services import Service

    svc = Service("redis", free_port(), tmp_path)
    svc.start()
    try:
        client = redis.Redis.from_url(svc.url, decode_responses=True)
        client.hset("kdsm:registry:pointers", mapping={"current": "v2", "previous": "v1"})
        client.close()
        assert svc.stop()
        assert not port_open("127.0.0.1", svc.port)
        svc.start()
        client = redis.Redis.from_url(svc.url, decode_responses=True)
        assert client.hgetall("kdsm:registry:pointers") == {"current": "v2", "previous": "v1"}
        client.close()
    finally:
        svc.stop()


def test_free_ports_are_distinct_and_outside_the_ephemeral_range():
    """Outgoing connections draw source ports from the ephemeral range; a port handed out there could be taken
    between choosing it and a slow server binding it (SeaweedFS then exits with code 255)."""
    from streamer.dev.local_services import _ephemeral_range

    low, _ = _ephemeral_range()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(p < low for p in ports)


def test_s3_server_that_loses_a_port_race_is_started_again_on_fresh_ports(tmp_path, monkeypatch):
    """The first weed start dies the way a lost port race does (an inner port taken); start() tries again."""
    from streamer.dev.local_services import Service

    svc = Service("s3", free_port(), tmp_path)
    real_command, calls = Service.command, []

    def command(self):
        calls.append(1)
        if len(calls) == 1:
            return ["sh", "-c", "echo 'F1126 volume.go:577 failed to listen on grpc port 1: bind: address already "
                                "in use'; exit 255"]
        return real_command(self)

    monkeypatch.setattr(Service, "command", command)
    try:
        svc.start(timeout=60)
        assert len(calls) == 2 and port_open("127.0.0.1", svc.port)
    finally:
        svc.stop()


def test_s3_server_that_keeps_exiting_is_reported_with_its_reason(tmp_path, monkeypatch):
    from streamer.dev.local_services import Service, ServiceError

    svc = Service("s3", free_port(), tmp_path)
    monkeypatch.setattr(Service, "command", lambda self: ["sh", "-c", "echo 'F1126 x.go:1 bad disk'; exit 255"])
    with pytest.raises(ServiceError) as e:
        svc.start(timeout=10)
    assert "code 255: F1126 x.go:1 bad disk" in str(e.value) and str(svc.log_file) in str(e.value)


@pytest.mark.parametrize("argv", [["start", "--s3-port", "99999"], ["stop", "--redis-port", "-5"],
                                  ["start", "--kafka-port", "abc"]])
def test_a_port_out_of_range_is_refused_in_one_line(argv, capsys):
    from streamer.dev.local_services import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "expected a TCP port (1-65535)" in err and "Traceback" not in err
