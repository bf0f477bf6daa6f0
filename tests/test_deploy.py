"""Deployment files, checked without Docker or a cluster.

compose.yaml gets a `docker compose config`-like check (interpolation,
references, env names through Settings, commands through the real `kdsm`
parser); the Dockerfile's install lines are compared with
deploy/local/setup.sh; the k8s manifests, the Prometheus scrape config and
the Grafana dashboard are checked against the code they point at
(/healthz and /metrics of streamer.pipeline.metrics, metric names, config keys).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import runpy
import shlex
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from offline_train.config import load_settings
from streamer.config import Settings
from streamer.ops.cli import build_parser
from streamer.ops.render import iter_keys
from streamer.pipeline.metrics import MetricsServer, StreamMetrics

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
SETTINGS_ENV = {k.env for k in iter_keys(Settings)}

# Service keys of the Compose specification this project may use (a typo is an error, as in `docker compose config`).
SERVICE_KEYS = {"image", "build", "command", "entrypoint", "environment", "env_file", "configs", "secrets", "volumes",
                "networks", "ports", "expose", "depends_on", "deploy", "healthcheck", "restart", "hostname",
                "stop_grace_period", "user", "working_dir", "labels", "logging", "ulimits", "shm_size"}
TOP_KEYS = {"name", "services", "volumes", "networks", "configs", "secrets"}


@pytest.fixture(autouse=True)
def _no_kdsm_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("KDSM_") and "__" in name:
            monkeypatch.delenv(name)


# ----------------------------------------------------------------------------- compose helpers
_VAR = re.compile(r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


class InterpolationError(ValueError):
    pass


def interpolate(value, env: dict[str, str]):
    """Compose interpolation: ${V}, ${V:-d}, ${V-d}, ${V:?err}, ${V?err}, $V; $$ is a literal $."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3)
        val = env.get(name)
        unset = val is None or (op is not None and op.startswith(":") and val == "")
        if op in (":-", "-") and unset:
            return arg
        if op in (":?", "?") and unset:
            raise InterpolationError(f"required variable {name} is missing: {arg}")
        return val or ""

    return _VAR.sub(sub, value)


def env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def load_compose(*files: str, env: dict[str, str] | None = None) -> dict:
    env = env_file(DEPLOY / ".env.example") if env is None else env
    merged: dict = {}
    for f in files:
        doc = interpolate(yaml.safe_load((DEPLOY / f).read_text()), env)
        _merge(merged, doc)
    return merged


def _merge(a: dict, b: dict) -> None:
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            _merge(a[k], v)
        else:
            a[k] = v


def as_env(environment) -> dict[str, str]:
    if isinstance(environment, list):
        return dict(e.split("=", 1) for e in environment)
    return {k: "" if v is None else str(v) for k, v in (environment or {}).items()}


def kdsm_argvs(svc: dict) -> list[list[str]]:
    """The `kdsm ...` invocations a service runs (exec form with the image's kdsm entrypoint, or inside sh -c)."""
    entry, cmd = svc.get("entrypoint"), svc.get("command")
    if entry is None and isinstance(cmd, list):  # image ENTRYPOINT ["kdsm"]
        return [[str(c) for c in cmd]]
    scripts = [c for c in (cmd if isinstance(cmd, list) else [cmd]) if isinstance(c, str)]
    return _argvs_in_shell(" ".join(scripts))


def _argvs_in_shell(script: str) -> list[list[str]]:
    out = []
    for m in re.finditer(r"(?:^|[\s;|&(])kdsm\s+([^;|&\n)]+)", script):
        out.append(shlex.split(m.group(1)))
    return out


@functools.lru_cache(maxsize=1)
def _parser():
    return build_parser()


def _parse(argv: list[str]):
    try:
        return _parser().parse_args(argv)
    except SystemExit:
        raise AssertionError(f"`kdsm {' '.join(argv)}` is not a valid kdsm command") from None


def _uses_kdsm_image(svc: dict) -> bool:
    return "build" in svc and svc["build"].get("dockerfile") == "deploy/Dockerfile"


# ----------------------------------------------------------------------------- compose
def test_compose_interpolates_with_the_example_env_and_requires_the_secrets():
    c = load_compose("compose.yaml")
    assert c["services"]["redis"]["command"][2] == "change-me-redis"
    env = env_file(DEPLOY / ".env.example")
    for secret in ("REDIS_PASSWORD", "KAFKA_KDSM_PASSWORD", "GRAFANA_ADMIN_PASSWORD"):
        with pytest.raises(InterpolationError, match=secret):
            load_compose("compose.yaml", env={k: v for k, v in env.items() if k != secret})


def test_compose_structure_and_references():
    c = load_compose("compose.yaml")
    assert {k for k in c if not k.startswith("x-")} <= TOP_KEYS  # x-* are extension fields (YAML anchors)
    services = c["services"]
    for name, svc in services.items():
        assert set(svc) <= SERVICE_KEYS, f"{name}: unknown keys {set(svc) - SERVICE_KEYS}"
        assert "image" in svc or "build" in svc, f"{name}: neither image nor build"
        if "build" in svc:
            ctx = (DEPLOY / svc["build"]["context"]).resolve()
            assert (ctx / svc["build"]["dockerfile"]).is_file(), name
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith((".", "/")):
                assert (DEPLOY / src).exists(), f"{name}: bind mount source {src} missing"
            else:
                assert src in c["volumes"], f"{name}: volume {src} not declared"
        for net in svc.get("networks", []):
            assert net in c["networks"], f"{name}: network {net} not declared"
        for cfg in svc.get("configs", []):
            assert cfg["source"] in c["configs"], f"{name}: config {cfg['source']} not declared"
        deps = svc.get("depends_on", {})
        for dep, spec in (deps.items() if isinstance(deps, dict) else ((d, {}) for d in deps)):
            assert dep in services, f"{name} depends on unknown {dep}"
            assert spec.get("condition", "service_started") in {"service_started", "service_healthy",
                                                                 "service_completed_successfully"}
            if spec.get("condition") == "service_healthy":
                assert "healthcheck" in services[dep] and not services[dep]["healthcheck"].get("disable"), dep
    for cfg in c["configs"].values():
        assert (DEPLOY / cfg["file"]).is_file(), cfg["file"]
    # what the ops brief asks for
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    assert "controller" in kafka["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft, no ZooKeeper
    assert "zookeeper" not in json.dumps(c).lower()
    redis_cmd = services["redis"]["command"]
    assert "--requirepass" in redis_cmd and redis_cmd[redis_cmd.index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") for v in services["redis"]["volumes"])
    assert int(services["streamer"]["deploy"]["replicas"]) >= 2
    assert int(services["kafka-topics"]["environment"]["TOPIC_PARTITIONS"]) >= int(services["streamer"]["deploy"]["replicas"])


def _kafka_cluster_id_ok(cid: str) -> bool:
    """What Kafka's Uuid.fromString accepts (kafka-storage format): URL-safe base64 of exactly 16 bytes, no padding."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{22}", cid):
        return False
    raw = base64.urlsafe_b64decode(cid + "==")
    return len(raw) == 16 and base64.urlsafe_b64encode(raw).decode().rstrip("=") == cid


def test_kafka_cluster_id_is_a_valid_kraft_id():
    # the old default, 'kdsm-kraft-cluster-0001', decodes to 17 bytes: the broker refused to format its storage
    assert not _kafka_cluster_id_ok("kdsm-kraft-cluster-0001")
    env = env_file(DEPLOY / ".env.example")
    assert _kafka_cluster_id_ok(env["KAFKA_CLUSTER_ID"])
    assert load_compose("compose.yaml")["services"]["kafka"]["environment"]["CLUSTER_ID"] == env["KAFKA_CLUSTER_ID"]
    # and the compose default, when deploy/.env does not set it
    default = load_compose("compose.yaml", env={k: v for k, v in env.items() if k != "KAFKA_CLUSTER_ID"})
    cid = default["services"]["kafka"]["environment"]["CLUSTER_ID"]
    assert _kafka_cluster_id_ok(cid) and len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_deploy_secrets_and_history_are_git_ignored():
    """deploy/.env.example and deploy/data/README.md promise that deploy/.env (the real passwords) and the
    bootstrap history deploy/data/*.parquet are not committed by accident: .gitignore must say so."""
    def ignored(path: str) -> bool:
        r = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT, capture_output=True, text=True)
        if r.returncode == 128 and "not a git repository" in r.stderr:
            pytest.skip("not a git checkout")
        assert r.returncode in (0, 1), r.stderr
        return r.returncode == 0

    assert ignored("deploy/.env") and ignored("deploy/data/train.parquet") and ignored("deploy/data/history-2026.parquet")
    # what must stay committed
    for kept in ("deploy/.env.example", "deploy/data/README.md", "deploy/compose.yaml", "offline_train/bundled/cardio.parquet"):
        assert not ignored(kept), kept


def _listeners(value: str) -> dict[str, tuple[str, int]]:
    """KAFKA_LISTENERS / KAFKA_ADVERTISED_LISTENERS: name -> (host, port); an empty host binds every interface."""
    out = {}
    for item in value.split(","):
        name, _, addr = item.partition("://")
        host, _, port = addr.rpartition(":")
        out[name] = (host, int(port))
    return out


def test_kafka_listeners_without_authentication_are_loopback_only(tmp_path):
    """Only the SASL listener is reachable from the compose network: the PLAINTEXT ones (inter-broker BROKER,
    KRaft CONTROLLER) bind to loopback; they were on every interface, open without a password to every container
    of the shared network. The topic creator therefore speaks SASL to the client listener, as the streamers do."""
    c = load_compose("compose.yaml")
    kafka = as_env(c["services"]["kafka"]["environment"])
    protocols = dict(p.split(":") for p in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    bound = _listeners(kafka["KAFKA_LISTENERS"])
    assert set(bound) == set(protocols)
    for name, (host, _) in bound.items():
        if not protocols[name].startswith("SASL_"):
            assert host in ("localhost", "127.0.0.1"), f"{name} ({protocols[name]}) listens on {host or 'every interface'}"
    advertised = _listeners(kafka["KAFKA_ADVERTISED_LISTENERS"])
    assert all(host in ("localhost", "127.0.0.1") for name, (host, _) in advertised.items() if not protocols[name].startswith("SASL_"))
    assert kafka["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"1@localhost:{bound['CONTROLLER'][1]}"
    assert kafka["KAFKA_INTER_BROKER_LISTENER_NAME"] == "BROKER"
    assert f"--bootstrap-server localhost:{bound['BROKER'][1]}" in c["services"]["kafka"]["healthcheck"]["test"][1]
    # every client on the network uses the SASL listener with the kdsm user and password
    client_host, client_port = advertised["CLIENT"]
    assert protocols["CLIENT"] == "SASL_PLAINTEXT" and "user_kdsm=\"change-me-kafka\"" in kafka["KAFKA_LISTENER_NAME_CLIENT_PLAIN_SASL_JAAS_CONFIG"]
    assert as_env(c["services"]["streamer"]["environment"])["KDSM_KAFKA__BOOTSTRAP"] == f"{client_host}:{client_port}"
    # the topic creator's script, run with a stand-in kafka-topics.sh that records its arguments and client config
    svc = c["services"]["kafka-topics"]
    assert svc["entrypoint"] == ["/bin/bash", "-c"]
    stub = tmp_path / "kafka-topics.sh"
    stub.write_text('#!/bin/bash\nprintf "%s\\n" "$*" >> "$OUT/calls"\n'
                    'while [ $# -gt 0 ]; do [ "$1" = --command-config ] && cp "$2" "$OUT/client.properties"; shift; done\n')
    stub.chmod(0o755)
    script = svc["command"][0].replace("/opt/kafka/bin/kafka-topics.sh", str(stub)).replace("/tmp/client.properties", str(tmp_path / "cp"))
    env = {**as_env(svc["environment"]), "OUT": str(tmp_path), "PATH": os.environ["PATH"]}
    subprocess.run(["/bin/bash", "-c", script], env=env, check=True, timeout=30)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 4 and all(f"--bootstrap-server {client_host}:{client_port} --command-config " in call for call in calls)
    props = dict(line.split("=", 1) for line in (tmp_path / "client.properties").read_text().splitlines())
    assert props["security.protocol"] == "SASL_PLAINTEXT" and props["sasl.mechanism"] == "PLAIN"
    assert props["sasl.jaas.config"] == ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                                         'username="kdsm" password="change-me-kafka";')
    assert (tmp_path / "cp").stat().st_mode & 0o077 == 0  # the password file: owner only


def test_compose_kdsm_env_names_are_settings_keys_and_load():
    c = load_compose("compose.yaml", "compose.gpu.yaml")
    seen = 0
    for name, svc in c["services"].items():
        env = as_env(svc.get("environment"))
        kdsm = {k: v for k, v in env.items() if k.startswith("KDSM_")}
        for k in kdsm:
            assert k in SETTINGS_ENV, f"{name}: {k} is not a setting (KDSM_<SECTION>__<KEY>)"
        if not kdsm:
            continue
        seen += 1
        os.environ.update(kdsm)
        try:
            s = load_settings(Settings, ROOT / "configs" / "production.yaml")
        finally:
            for k in kdsm:
                del os.environ[k]
        assert s.kafka.bootstrap == kdsm["KDSM_KAFKA__BOOTSTRAP"]
        assert s.redis.password.get_secret_value() == "change-me-redis"
        assert s.kafka.sasl_password.get_secret_value() == "change-me-kafka"
    assert seen >= 3


def test_compose_commands_are_real_kdsm_commands():
    c = load_compose("compose.yaml")
    argvs = {name: kdsm_argvs(svc) for name, svc in c["services"].items() if _uses_kdsm_image(svc)}
    assert set(argvs) == {"bootstrap-model", "streamer", "retrain", "retrain-watch"}
    for name, cmds in argvs.items():
        assert cmds, f"{name} runs no kdsm command"
        for argv in cmds:
            args = _parse(argv)
            assert args.config == "/etc/kdsm/config.yaml", name
    assert argvs["streamer"][0][0] == "stream" and argvs["retrain"][0][0] == "retrain"
    assert argvs["bootstrap-model"][0][0] == "train"
    # the bootstrap model is trained where stream.model points and becomes the registry's current version
    train, add = (_parse(a) for a in argvs["bootstrap-model"])
    prod = load_settings(Settings, ROOT / "configs" / "production.yaml")
    assert prod.registry.enabled
    assert train.out == add.model == prod.stream.model == as_env(c["services"]["streamer"]["environment"])["KDSM_STREAM__MODEL"]
    assert (add.command, add.action, add.promote) == ("models", "add", True)
    assert argvs["retrain-watch"][0][:2] == ["retrain", "--watch"]
    # the config they read is the mounted production profile
    for name in argvs:
        mounts = {m["target"]: c["configs"][m["source"]]["file"] for m in c["services"][name]["configs"]}
        assert mounts["/etc/kdsm/config.yaml"] == "../configs/production.yaml"


def test_prometheus_scrapes_every_streamer_on_the_metrics_port():
    c = load_compose("compose.yaml")
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    mounted = {m["target"]: c["configs"][m["source"]]["file"] for m in c["services"]["prometheus"]["configs"]}
    assert mounted["/etc/prometheus/prometheus.yml"] == "./prometheus.yml"
    streamer = c["services"]["streamer"]
    env = as_env(streamer["environment"])
    os.environ.update({k: v for k, v in env.items() if k.startswith("KDSM_")})
    try:
        s = load_settings(Settings, ROOT / "configs" / "production.yaml")
    finally:
        for k in env:
            os.environ.pop(k, None)
    assert s.metrics.enabled and s.metrics.host == "0.0.0.0"
    job = next(j for j in prom["scrape_configs"] if j["job_name"] == "kdsm-streamer")
    assert job["metrics_path"] == "/metrics"
    sd = job["dns_sd_configs"][0]
    assert sd["names"] == ["streamer"] and sd["port"] == s.metrics.port
    assert str(s.metrics.port) in [str(p) for p in streamer["expose"]]


def test_prometheus_rules_are_loaded_and_use_exported_metrics():
    c = load_compose("compose.yaml")
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    mounted = {m["target"]: c["configs"][m["source"]]["file"] for m in c["services"]["prometheus"]["configs"]}
    for rule_file in prom["rule_files"]:
        assert rule_file in mounted
        rules = yaml.safe_load((DEPLOY / mounted[rule_file]).read_text())
        exported = _exported_sample_names()
        n = 0
        for group in rules["groups"]:
            for rule in group["rules"]:
                names = set(re.findall(r"\bkdsm_[a-z0-9_]+", rule["expr"]))
                assert names and names <= exported, f"{rule['alert']}: {names - exported}"
                assert rule["annotations"]["summary"] and rule["labels"]["severity"]
                n += 1
        assert n >= 4


def test_streamer_stuck_rule_needs_work_and_ignores_the_unset_commit_gauge():
    """KdsmStreamerStuck (severity page) used to be `time() - kdsm_last_commit_timestamp_seconds > 120 and
    kdsm_assigned_partitions > 0`: it paged on every quiet topic (no batch, no commit) and right after a start
    (the gauge is 0 until the first commit, so time() - 0 > 120)."""
    rules = yaml.safe_load((DEPLOY / "prometheus-rules.yml").read_text())
    rule = next(r for g in rules["groups"] for r in g["rules"] if r["alert"] == "KdsmStreamerStuck")
    expr = " ".join(rule["expr"].split())
    assert rule["labels"]["severity"] == "page"
    # the gauge counts only once set; before the first commit the age is measured from the process start
    assert "(kdsm_last_commit_timestamp_seconds > 0 or process_start_time_seconds) > 120" in expr
    assert "and kdsm_assigned_partitions > 0" in expr
    # work to commit: batches in flight, or events consumed in the last 5 minutes (summed over `result`
    # only, so the series keep every target label and `and` matches them one to one)
    assert "and (kdsm_in_flight_batches > 0 or sum without (result) (increase(kdsm_events_total[5m])) > 0)" in expr
    assert expr.count("(") == expr.count(")")
    # process_start_time_seconds is not a kdsm_ metric: it must come from the streamer's /metrics too
    # (prometheus_client's process collector, which MetricsServer serves beside the streamer's own registry)
    served = {line.split()[0].split("{")[0] for line in StreamMetrics().render().decode().splitlines()
              if line and not line.startswith("#")}
    for g in rules["groups"]:
        for r in g["rules"]:
            assert set(re.findall(r"\bprocess_[a-z_]+", r["expr"])) <= served, r["alert"]
    assert "process_start_time_seconds" in served


def test_gpu_overlay_reserves_an_nvidia_gpu():
    c = load_compose("compose.yaml", "compose.gpu.yaml")
    for name in ("streamer", "retrain"):
        dev = c["services"][name]["deploy"]["resources"]["reservations"]["devices"][0]
        assert dev["driver"] == "nvidia" and "gpu" in dev["capabilities"]
    assert c["services"]["streamer"]["deploy"]["replicas"]  # the base service survives the merge


# ----------------------------------------------------------------------------- Dockerfile
def _pip_installs(lines: list[str]) -> list[tuple[str, bool]]:
    """(requirement, editable) of each `pip install` in shell lines, options dropped."""
    out = []
    for line in lines:
        for m in re.finditer(r"pip install\s+(.*?)(?:&&|;|$)", line):
            tokens = shlex.split(m.group(1))
            editable = "-e" in tokens
            skip = False
            for t in tokens:
                if skip:
                    skip = False
                    continue
                if t in ("--index-url", "--extra-index-url", "-i"):
                    skip = True
                    continue
                if t.startswith("-"):
                    continue
                out.append((t, editable))
    return out


def _dockerfile_runs() -> list[str]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.strip()[4:] for line in text.splitlines() if line.strip().startswith("RUN ")]


def test_dockerfile_installs_like_the_setup_script():
    docker = _pip_installs(_dockerfile_runs())
    setup = _pip_installs([line for line in (DEPLOY / "local" / "setup.sh").read_text().splitlines()
                           if not line.strip().startswith("#")])
    torch_pin = [r for r, _ in setup if r.startswith("torch")]
    assert torch_pin == ["torch==2.13.0"]
    assert [r for r, _ in docker] == ["torch==2.13.0", "."], docker
    # the project itself: setup.sh installs '.[dev]' editable, the image installs '.' (no dev tools)
    assert [r.split("[")[0] for r, _ in setup if not r.startswith("torch")] == ["."]
    # torch first in both (an unpinned torch pulled by the project would be the multi-GB CUDA build)
    assert [r for r, _ in setup].index("torch==2.13.0") == 0


def test_dockerfile_copies_existing_paths_and_runs_a_real_command():
    text = (DEPLOY / "Dockerfile").read_text()
    for line in text.splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), f"COPY source {src} missing"
                assert f"!{src}" in (DEPLOY / "Dockerfile.dockerignore").read_text().replace("/**", "")
    entry = json.loads(re.search(r"^ENTRYPOINT (.+)$", text, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD (.+)$", text, re.M).group(1))
    assert entry == ["kdsm"]
    _parse(cmd)
    assert "cp configs/production.yaml /etc/kdsm/config.yaml" in text
    port = int(re.search(r"^EXPOSE (\d+)", text, re.M).group(1))
    assert port == Settings().metrics.port
    assert f"127.0.0.1:{port}/healthz" in text
    # the CUDA variant is a documented build argument
    assert re.search(r"--build-arg TORCH_INDEX_URL=https://download\.pytorch\.org/whl/cu\d+", text)


# ----------------------------------------------------------------------------- Kubernetes
def _k8s_docs() -> dict[tuple[str, str], dict]:
    """The resources `kubectl apply -k deploy/k8s` applies (the files its kustomization lists)."""
    docs = {}
    for name in yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]:
        path = K8S / name
        for d in yaml.safe_load_all(path.read_text()):
            if d:
                assert {"apiVersion", "kind", "metadata"} <= set(d), path
                docs[(d["kind"], d["metadata"]["name"])] = d
    return docs


def _pod_spec(doc: dict) -> dict:
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return doc["spec"]["template"]["spec"]


def test_kustomization_lists_every_manifest():
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kust["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == {n for n in on_disk if not n.endswith(".example.yaml")}
    assert on_disk - listed == {"secret.example.yaml"}


def _kustomize_docs(folder: Path) -> list[tuple[Path, dict]]:
    """Every document a kustomization under deploy/k8s puts on the cluster: its resources (files, or folders
    with their own kustomization, recursively) and its patches."""
    kust = yaml.safe_load((folder / "kustomization.yaml").read_text())
    out = []
    for r in kust.get("resources", []):
        path = (folder / r).resolve()
        if path.is_dir():
            out += _kustomize_docs(path)
        else:
            out += [(path, d) for d in yaml.safe_load_all(path.read_text()) if d]
    for p in kust.get("patches", []):
        path = (folder / p["path"]).resolve()
        out += [(path, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def test_no_kustomization_applies_a_placeholder_secret():
    """The Secrets are the operator's: listed as resources, every `kubectl apply -k` (base, gpu, s3) would
    overwrite the real kdsm-credentials / kdsm-s3 with the CHANGE-ME placeholders of the examples."""
    kustomizations = sorted(K8S.rglob("kustomization.yaml"))
    assert {k.parent.relative_to(K8S).as_posix() for k in kustomizations} == {".", "gpu", "s3"}
    for kust in kustomizations:
        docs = _kustomize_docs(kust.parent)
        assert docs, kust
        for path, d in docs:
            assert "CHANGE-ME" not in json.dumps(d), f"{kust} applies the placeholders of {path.name}"
            assert d["kind"] != "Secret", f"{kust} applies Secret {d['metadata']['name']} from {path.name}"
    # the examples are still there, outside every kustomization, and keep the placeholders
    for example, name in ((K8S / "secret.example.yaml", "kdsm-credentials"), (K8S / "s3" / "s3-secret.example.yaml", "kdsm-s3")):
        secret = yaml.safe_load(example.read_text())
        assert secret["kind"] == "Secret" and secret["metadata"]["name"] == name
        assert set(secret["stringData"].values()) == {"CHANGE-ME"}


def test_docs_create_the_namespace_before_the_secret_and_the_secret_before_apply():
    """On a fresh cluster `kubectl -n kdsm create secret` fails without the namespace, and `apply -k` without the
    Secret starts pods that cannot read their passwords: the documented order is namespace, Secret(s), apply -k."""
    ops = (ROOT / "docs" / "operations.md").read_text()
    k8s = ops[ops.index("### Kubernetes"):]
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", k8s, re.S) if "create secret" in b]
    assert len(blocks) == 2  # base/gpu, and s3
    for block in blocks:
        lines = [line for line in block.replace("\\\n", " ").splitlines() if line.startswith("kubectl")]
        ns = next(i for i, line in enumerate(lines) if line.startswith("kubectl apply -f deploy/k8s/namespace.yaml"))
        secrets = [i for i, line in enumerate(lines) if "create secret" in line]
        applies = [i for i, line in enumerate(lines) if line.startswith("kubectl apply -k")]
        assert secrets and applies and ns < min(secrets) and max(secrets) < min(applies), block
        assert yaml.safe_load((K8S / "namespace.yaml").read_text())["metadata"]["name"] == "kdsm"


def test_k8s_references_resolve_and_env_names_are_settings():
    docs = _k8s_docs()
    secret = yaml.safe_load((K8S / "secret.example.yaml").read_text())  # the keys the real Secret must have
    assert secret["metadata"]["name"] == "kdsm-credentials"
    for (kind, name), d in docs.items():
        if kind not in ("Deployment", "CronJob", "Job"):
            continue
        pod = _pod_spec(d)
        volumes = {v["name"]: v for v in pod["volumes"]}
        for v in volumes.values():
            if "configMap" in v:
                assert ("ConfigMap", v["configMap"]["name"]) in docs
            if "persistentVolumeClaim" in v:
                assert ("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"]) in docs
        for ctr in pod["containers"]:
            for m in ctr.get("volumeMounts", []):
                assert m["name"] in volumes, f"{name}: mount of undeclared volume {m['name']}"
            for e in ctr.get("env", []):
                if e["name"].startswith("KDSM_"):
                    assert e["name"] in SETTINGS_ENV, f"{name}: {e['name']} is not a setting"
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] == "kdsm-credentials" and ref["key"] in secret["stringData"]
            argv = ctr.get("args", [])
            if ctr.get("command"):  # sh -c script
                for inv in _argvs_in_shell(" ".join(argv)):
                    assert _parse(inv).config == "/etc/kdsm/config.yaml"
            else:
                assert _parse(argv).config == "/etc/kdsm/config.yaml"
    # the secrets reach the env names the settings read
    st = docs[("Deployment", "kdsm-streamer")]["spec"]["template"]["spec"]["containers"][0]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in st["env"] if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]}
    assert refs == {"KDSM_KAFKA__SASL_PASSWORD": "kafka-sasl-password", "KDSM_REDIS__PASSWORD": "redis-password"}


def test_configmap_is_the_production_config():
    docs = _k8s_docs()
    text = docs[("ConfigMap", "kdsm-config")]["data"]["config.yaml"]
    assert text == (ROOT / "configs" / "production.yaml").read_text()
    render = runpy.run_path(str(K8S / "configmap.py"))["render"]
    assert (K8S / "configmap.yaml").read_text() == render(text), "regenerate: python deploy/k8s/configmap.py > deploy/k8s/configmap.yaml"


def _streamer_settings(docs) -> Settings:
    ctr = docs[("Deployment", "kdsm-streamer")]["spec"]["template"]["spec"]["containers"][0]
    plain = {e["name"]: str(e["value"]) for e in ctr["env"] if "value" in e}
    os.environ.update(plain)
    try:
        return load_settings(Settings, ROOT / "configs" / "production.yaml")
    finally:
        for k in plain:
            del os.environ[k]


def test_streamer_probes_hit_the_health_endpoint_the_streamer_serves():
    docs = _k8s_docs()
    dep = docs[("Deployment", "kdsm-streamer")]
    assert dep["spec"]["replicas"] >= 2
    ctr = dep["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    s = _streamer_settings(docs)
    assert ports["metrics"] == s.metrics.port and s.metrics.host == "0.0.0.0"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        get = ctr[probe]["httpGet"]
        assert get["port"] == "metrics" and get["path"] == "/healthz"
    assert {"cpu", "memory"} <= set(ctr["resources"]["requests"]) and {"cpu", "memory"} <= set(ctr["resources"]["limits"])
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/port"] == str(s.metrics.port) and ann["prometheus.io/path"] == "/metrics"
    svc = docs[("Service", "kdsm-streamer-metrics")]
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["ports"][0]["targetPort"] == "metrics"
    # and those paths are what streamer.pipeline.metrics serves: /healthz 200 while the loop turns, /metrics text
    server = MetricsServer(StreamMetrics(), "127.0.0.1", 0).start()
    try:
        for path in (ann["prometheus.io/path"], ctr["livenessProbe"]["httpGet"]["path"]):
            with urllib.request.urlopen(server.url + path, timeout=5) as r:
                assert r.status == 200
    finally:
        server.stop()


def test_bootstrap_job_waits_for_the_history_and_creates_its_directory(tmp_path):
    """On a fresh PVC /var/lib/kdsm/data did not exist and the Job failed at once (no history), so the documented
    `kubectl cp HISTORY.parquet <pod>:/var/lib/kdsm/data/train.parquet` had no directory and no running pod.
    An init container now creates the directory and waits there for the file (or for an existing model)."""
    job = _k8s_docs()[("Job", "kdsm-bootstrap-model")]
    pod = _pod_spec(job)
    (init,) = pod["initContainers"]
    (train,) = pod["containers"]
    assert init["name"] == "wait-for-history" and init["image"] == train["image"]
    assert init["volumeMounts"] == [m for m in train["volumeMounts"] if m["name"] == "data"]
    assert {v["name"] for v in pod["volumes"]} >= {m["name"] for m in init["volumeMounts"]}
    argvs = [_parse(a) for a in _argvs_in_shell(" ".join(train["args"]))]
    data = next(a.data for a in argvs if a.command == "train")
    assert data == "/var/lib/kdsm/data/train.parquet"
    skip = re.search(r"test -f (\S+) \|\|", train["args"][0]).group(1)  # the train container's "already done"
    script = init["args"][0]
    assert f"mkdir -p {os.path.dirname(data)}" in script and f"test -f {data}" in script and f"test -f {skip}" in script
    # and it behaves so, in a shell, on a stand-in for the volume
    root = tmp_path / "vol"
    root.mkdir()
    local = script.replace("/var/lib/kdsm", str(root)).replace("sleep 5", "sleep 0.1")
    proc = subprocess.Popen(["/bin/sh", "-c", local])
    try:
        time.sleep(1.0)
        assert proc.poll() is None and (root / "data").is_dir()  # the directory kubectl cp writes into
        (root / "data" / "train.parquet.part").write_bytes(b"PAR1")  # the documented copy: a temporary name...
        time.sleep(0.5)
        assert proc.poll() is None  # ...does not start the training
        (root / "data" / "train.parquet.part").rename(root / "data" / "train.parquet")
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    # a volume that has the bootstrap model already: no wait (the train container skips)
    again = tmp_path / "again"
    (again / "bootstrap-model").mkdir(parents=True)
    (again / "bootstrap-model" / "metadata.json").write_text("{}")
    assert subprocess.run(["/bin/sh", "-c", script.replace("/var/lib/kdsm", str(again))], timeout=10).returncode == 0
    # the documented copy targets that container, under a temporary name, then renames
    ops = (ROOT / "docs" / "operations.md").read_text()
    k8s = ops[ops.index("### Kubernetes"):]
    assert f"cp HISTORY.parquet $pod:{data}.part -c wait-for-history" in k8s
    assert f"-c wait-for-history -- mv {data}.part {data}" in k8s


def test_retrain_cronjob():
    docs = _k8s_docs()
    cj = docs[("CronJob", "kdsm-retrain")]
    assert cj["spec"]["concurrencyPolicy"] == "Forbid"
    assert len(cj["spec"]["schedule"].split()) == 5
    ctr = _pod_spec(cj)["containers"][0]
    assert _parse(ctr["args"]).command == "retrain"


def test_gpu_overlay_patches_existing_containers_with_a_gpu_request():
    docs = _k8s_docs()
    kust = yaml.safe_load((K8S / "gpu" / "kustomization.yaml").read_text())
    assert kust["resources"] == ["../"]
    for p in kust["patches"]:
        patch = yaml.safe_load((K8S / "gpu" / p["path"]).read_text())
        base = docs[(patch["kind"], patch["metadata"]["name"])]
        base_ctrs = {c["name"] for c in _pod_spec(base)["containers"]}
        for ctr in _pod_spec(patch)["containers"]:
            assert ctr["name"] in base_ctrs
            assert ctr["resources"]["limits"]["nvidia.com/gpu"] == 1
            for e in ctr.get("env", []):
                assert e["name"] in SETTINGS_ENV
    assert {i["name"] for i in kust["images"]} == {"kdsm-stream"}


# ----------------------------------------------------------------------------- Grafana
def _exported_sample_names() -> set[str]:
    names = set()
    for fam in StreamMetrics().registry.collect():
        if fam.type == "counter":
            names |= {fam.name + "_total", fam.name + "_created"}
        elif fam.type == "histogram":
            names |= {fam.name + s for s in ("_bucket", "_sum", "_count", "_created")}
        else:
            names.add(fam.name)
    return names


def test_dashboard_queries_only_metrics_the_streamer_exports():
    dash = json.loads((DEPLOY / "grafana" / "kdsm-dashboard.json").read_text())
    exported = _exported_sample_names()
    used = set()
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert p["targets"], p["title"]
        for t in p["targets"]:
            names = set(re.findall(r"\bkdsm_[a-z0-9_]+", t["expr"]))
            assert names, f"{p['title']}: no kdsm metric"
            assert names <= exported, f"{p['title']}: {names - exported} not exported by streamer.pipeline.metrics"
            used |= names
    # the headline metrics of the issue are on it
    for m in ("kdsm_events_total", "kdsm_alerts_total", "kdsm_dead_letters_total", "kdsm_batch_seconds_bucket",
              "kdsm_e2e_latency_seconds_bucket", "kdsm_model_info", "kdsm_last_commit_timestamp_seconds"):
        assert m in used


def test_grafana_provisioning_points_at_the_dashboard():
    c = load_compose("compose.yaml")
    targets = {m["target"]: c["configs"][m["source"]]["file"] for m in c["services"]["grafana"]["configs"]}
    prov = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards.yaml").read_text())
    folder = prov["providers"][0]["options"]["path"]
    assert targets[f"{folder}/kdsm-dashboard.json"] == "./grafana/kdsm-dashboard.json"
    ds = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources.yaml").read_text())["datasources"][0]
    assert ds["url"] == "http://prometheus:9090" and "prometheus" in c["services"]
