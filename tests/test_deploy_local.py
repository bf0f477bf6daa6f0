"""deploy/local/start.sh and stop.sh: idempotent, and a clear message when a port is taken."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
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


def test_a_pid_file_left_by_a_reboot_names_nobody_we_would_signal(tmp_path):
    """After a reboot the pid file survives and its pid may be any process's: stop.sh must not SIGTERM it, and
    start must not take it (with whatever holds the port) for ours."""
    from streamer.dev.local_services import Service

    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for name in ("kafka", "redis", "s3"):
            svc = Service(name, free_port(), tmp_path)
            svc.pid_file.parent.mkdir(parents=True, exist_ok=True)
            svc.pid_file.write_text(str(stranger.pid))
            assert svc.pid() is None and svc.stop() is False
        assert stranger.poll() is None  # still running: nothing signalled it
    finally:
        stranger.kill()
        stranger.wait()


def _only_kafka(state: Path, kport: int, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KDSM_LOCAL_STATE": str(state), "KAFKA_PORT": str(kport), "S3_PORT": str(free_port())}
    return subprocess.run(["bash", str(ROOT / "deploy" / "local" / "start.sh"), "--only", "kafka", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_start_durable_refuses_a_running_in_memory_broker(tmp_path):
    """The running broker keeps its log in memory: `start.sh --durable` must not reuse it and call it durable."""
    kport = free_port()
    try:
        first = _only_kafka(tmp_path, kport)  # a real Tansu, in memory (no S3 server needed)
        assert first.returncode == 0, first.stderr
        pid = (tmp_path / f"kafka-{kport}.pid").read_text()
        assert (tmp_path / f"kafka-{kport}.storage").read_text() == "memory"
        durable = _only_kafka(tmp_path, kport, "--durable")
        assert durable.returncode == 3 and "(durable)" not in durable.stdout
        assert "Traceback" not in durable.stderr and len(durable.stderr.strip().splitlines()) == 1, durable.stderr
        assert f"the broker running on port {kport} keeps its log in memory, but this start asks for s3://tansu/" in durable.stderr
        assert f"stop --only kafka --kafka-port {kport}" in durable.stderr
        assert (tmp_path / f"kafka-{kport}.pid").read_text() == pid and port_open("127.0.0.1", kport)  # left alone
        again = _only_kafka(tmp_path, kport)  # the same kind as the running one: reused, as before
        assert again.returncode == 0 and (tmp_path / f"kafka-{kport}.pid").read_text() == pid
    finally:
        stop = subprocess.run(["python3", "-m", "streamer.dev.local_services", "stop", "--only", "kafka",
                               "--kafka-port", str(kport)], env={**os.environ, "KDSM_LOCAL_STATE": str(tmp_path)},
                              capture_output=True, text=True, timeout=60)
    assert "kafka: stopped" in stop.stdout and not (tmp_path / f"kafka-{kport}.storage").exists()


def test_plain_start_refuses_a_running_durable_broker(tmp_path, monkeypatch):
    """The other way round, and a durable start on the same S3 server reuses it. A stand-in listens on the port
    (the check needs only our pid file, its storage record and an open port; no SeaweedFS)."""
    from streamer.dev.local_services import Service

    kport, sport = free_port(), free_port()
    monkeypatch.setattr(Service, "command", lambda self: [sys.executable, "-c", (
        "import socket, time; s = socket.socket(); "
        f"s.bind(('127.0.0.1', {kport})); s.listen(); time.sleep(120)")])
    broker = Service("kafka", kport, tmp_path, s3_endpoint=f"http://127.0.0.1:{sport}").start()
    try:
        plain = _only_kafka(tmp_path, kport)
        assert plain.returncode == 3 and len(plain.stderr.strip().splitlines()) == 1, plain.stderr
        assert f"keeps its log in s3://tansu/ at http://127.0.0.1:{sport}, but this start asks for memory" in plain.stderr
        other_store = _only_kafka(tmp_path, kport, "--durable")  # start.sh's S3_PORT is another server
        assert other_store.returncode == 3, other_store.stderr
        env = {**os.environ, "KDSM_LOCAL_STATE": str(tmp_path)}
        same = subprocess.run(["python3", "-m", "streamer.dev.local_services", "start", "--only", "kafka", "--durable",
                               "--kafka-port", str(kport), "--s3-port", str(sport)], env=env, capture_output=True,
                              text=True, timeout=60)
        assert same.returncode == 0 and "(durable)" in same.stdout, same.stderr
        assert (tmp_path / f"kafka-{kport}.pid").read_text().split()[0] == str(broker.pid())
    finally:
        broker.stop()


def test_durable_start_says_how_to_run_kdsm_on_it(tmp_path, s3_endpoint):
    """The durable broker loses an idempotent batch in flight at a crash (docs/results/tansu-idempotence):
    start.sh --durable tells the user the setting that turns a retry into a duplicate instead."""
    kport, other_port = free_port(), free_port()
    env = {**os.environ, "KDSM_LOCAL_STATE": str(tmp_path), "KAFKA_PORT": str(kport),
           "S3_PORT": s3_endpoint.rsplit(":", 1)[1]}
    try:
        durable = subprocess.run(["bash", str(ROOT / "deploy" / "local" / "start.sh"), "--only", "kafka", "--durable"],
                                 env=env, capture_output=True, text=True, timeout=120)
        assert durable.returncode == 0, durable.stderr
        assert "(durable)" in durable.stdout and "KDSM_KAFKA__IDEMPOTENT_PRODUCER=false" in durable.stdout
        plain = _only_kafka(tmp_path / "other", other_port)
        assert plain.returncode == 0 and "IDEMPOTENT" not in plain.stdout
    finally:
        for state, p in ((tmp_path, kport), (tmp_path / "other", other_port)):
            subprocess.run(["python3", "-m", "streamer.dev.local_services", "stop", "--only", "kafka", "--kafka-port",
                            str(p)], env={**os.environ, "KDSM_LOCAL_STATE": str(state)}, capture_output=True, timeout=60)
    assert not port_open("127.0.0.1", kport) and not port_open("127.0.0.1", other_port)


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
