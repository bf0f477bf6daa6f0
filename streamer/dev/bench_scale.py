"""``kdsm bench stream --processes 1,2,4``: N streamer processes in one consumer group sharing one device.

For the GPU question "does a second (fourth) streamer on the same GPU add
throughput?", in one run against one broker (a local Tansu unless
``--bootstrap``):

1. one topic of ``--partitions`` partitions (default 4) is filled with JSON
   events once, and read by a bare consumer (consume-only, one process);
2. for each N: N child processes (``python -m streamer.dev.bench_scale``)
   load the same artifact onto the same device, warm it up, and wait at a
   barrier; then all start a ``StreamApp`` in one new group at once and read
   the whole topic (decode, score, alerts, commits), each recording
   (commit time, rows) per batch, until the group's committed offsets reach
   the end of every partition (the parent watches them; a member alone
   cannot tell a drained topic from a rebalance in progress);
3. the group's rate is measured over the window in which every child is
   committing: from the latest first commit to the earliest last commit
   (group joins and the uneven tails are outside it); the whole-run rate
   (all rows / first to last commit) is reported too.

Children are separate processes, as deployed (one ``kdsm stream`` per pod or
per process), so Python's GIL is not shared; the device is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

_READY_TIMEOUT_S = 180.0  # torch import + CUDA init + warm-up, per child, on a busy machine


def _child(args_file: str) -> int:
    """One streamer of the group: load, warm up, signal ready, wait for the go, stream until the parent
    says the group has committed every partition to its end."""
    from streamer.config import Settings
    from streamer.pipeline.app import StreamApp
    from streamer.pipeline.logs import setup_logging
    from streamer.pipeline.provider import StaticModelProvider
    from streamer.service import configure_process

    a = json.loads(Path(args_file).read_text())
    setup_logging("WARNING")
    s = Settings(**a["settings"])  # the SASL password, left out of the file, comes from the environment (child_launch)
    configure_process(s)  # as a kdsm stream process: torch threads and switch interval
    model = StaticModelProvider(a["model"], a["device"]).current()
    model.score_outputs(np.zeros((s.stream.max_batch, len(model.feature_names_))))  # CUDA context and kernels now
    Path(a["ready"]).write_text(str(os.getpid()))
    while not Path(a["go"]).exists():
        time.sleep(0.005)
    commits: list[tuple[float, int]] = []

    class Timeline:
        def on_committed(self, b):
            commits.append((b.committed_at, len(b)))

    class Fixed:
        def current(self):
            return model

    app = StreamApp(s, Fixed(), sinks=[Timeline()])
    th = threading.Thread(target=app.run, daemon=True)
    th.start()
    deadline = time.monotonic() + a["deadline_s"]
    # The parent says when the group's committed offsets reach the end of every partition (a member alone
    # cannot tell a drained topic from a rebalance in progress).
    while time.monotonic() < deadline and th.is_alive() and not Path(a["stop"]).exists():
        time.sleep(0.05)
    app.stop()
    th.join(60)
    Path(a["out"]).write_text(json.dumps({"commits": commits, "counts": app.counts, "device": str(model.device_)}))
    return 0


def group_rate(children: list[list[tuple[float, int]]]) -> dict:
    """The group's events/s while every child commits, and over the whole run.

    >>> r = group_rate([[(0.0, 10), (1.0, 10), (2.0, 10)], [(0.5, 5), (1.5, 5), (3.0, 5)]])
    >>> r["window_events_per_s"], r["window_s"], r["rows"]
    (16.7, 1.5, 45)
    """
    firsts = [c[0][0] for c in children if c]
    lasts = [c[-1][0] for c in children if c]
    rows = sum(n for c in children for _, n in c)
    out = {"rows": rows, "children_committing": len(firsts)}
    if not firsts:
        return {**out, "window_events_per_s": 0.0, "window_s": 0.0, "run_events_per_s": 0.0}
    t_a, t_b = max(firsts), min(lasts)
    t0, t1 = min(firsts), max(lasts)
    first_rows = sum(c[0][1] for c in children if c and c[0][0] == t0)
    out["run_events_per_s"] = round((rows - first_rows) / (t1 - t0), 1) if t1 > t0 else 0.0
    if t_b > t_a and len(firsts) == len(children):
        in_window = sum(n for c in children for t, n in c if t_a < t <= t_b)
        out.update(window_events_per_s=round(in_window / (t_b - t_a), 1), window_s=round(t_b - t_a, 3))
    else:  # too short for a common window: the whole run stands in
        out.update(window_events_per_s=out["run_events_per_s"], window_s=0.0)
    return out


def run(settings, model_path: str | None = None, processes=(1, 2, 4), events: int = 200000, partitions: int = 4,
        width: int = 512, depth: int = 6, features: int = 6, device: str = "auto", threads: int | None = None,
        out: str | None = "runs/bench-stream-scale.json", external_broker: bool = False, log=print) -> dict:
    from offline_train.speed import cpu_name
    from streamer.pipeline.kafka_clients import ensure_topics

    from . import local_services
    from .bench_fixtures import bench_model, consume_only, events_json, remove_scratch, write_result

    s = settings.model_copy(deep=True)
    s.metrics.enabled = False
    tmp = Path(tempfile.mkdtemp(prefix="kdsm-scale-"))
    broker = None
    if not external_broker:
        broker = local_services.Service("kafka", local_services.free_port(), tmp / "state").start()
        s.kafka.bootstrap = broker.url
        # Tansu holds a group join for half the session timeout: the dev configs' 6000/1000 keep joins short.
        s.kafka.session_timeout_ms, s.kafka.heartbeat_interval_ms = 6000, 1000
    try:
        if model_path is None:
            model = bench_model(features, width, depth, device)
            model_path = str(model.save(tmp / "model"))
        else:
            from streamer.pipeline.provider import StaticModelProvider

            model = StaticModelProvider(model_path, device).current()
        names = model.feature_names_
        tag = f"{os.getpid()}-{int(time.time())}"
        topic = f"scale-{tag}"
        s.kafka.events_topic = topic
        s.kafka.alerts_topic, s.kafka.deadletter_topic = f"scale-alerts-{tag}", f"scale-dead-{tag}"
        ensure_topics(s.kafka, [topic, s.kafka.alerts_topic, s.kafka.deadletter_topic], partitions=partitions)
        X = model.scaler_.inverse_transform(np.random.default_rng(1).normal(size=(events, len(names))))
        produce_rate, ends = _produce_counting(s.kafka, topic, events_json(X, names))
        if sum(ends.values()) != events:
            raise RuntimeError(f"produced {sum(ends.values())} of {events} events")
        consume = consume_only(s.kafka, topic, events, s.stream.max_batch)
        log(f"scale: {events} events on {partitions} partitions (produced at {produce_rate:,.0f} msg/s); "
            f"consume-only (1 process) {consume:,.0f} msg/s; device {model.device_}")
        results = []
        for n in processes:
            r = _group(s, model_path, device, threads, n, tmp, f"scale-g{n}-{tag}", ends)
            r["ratio_to_consume_only"] = round(r["window_events_per_s"] / consume, 3) if consume else None
            results.append(r)
            log(f"  N={n}: {r['window_events_per_s']:,.0f} events/s while all {n} commit ({r['window_s']} s), "
                f"whole run {r['run_events_per_s']:,.0f}; rows {r['rows']} (events {events}); "
                f"= {r['ratio_to_consume_only']} of consume-only")
        base = results[0]["window_events_per_s"] if results else 0
        for r in results:
            r["speedup_vs_first"] = round(r["window_events_per_s"] / base, 2) if base else None
        import torch

        result = {"command": " ".join(["kdsm", *sys.argv[1:]]),
                  "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "device": str(model.device_),
                              "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                              "load_avg": os.getloadavg(), "torch_threads_per_process": threads},
                  "broker": "tansu (local, in-memory)" if broker else s.kafka.bootstrap,
                  "events": events, "partitions": partitions, "max_batch": s.stream.max_batch,
                  "max_wait_ms": s.stream.max_wait_ms, "delivery": s.kafka.delivery,
                  "produce_msg_per_s": round(produce_rate), "consume_only_msg_per_s": round(consume), "groups": results}
        write_result(out, result, log)
        return result
    finally:
        if broker:
            broker.stop()
        remove_scratch(tmp)


def _wait_drained(s, group: str, ends: dict[int, int], procs, timeout_s: float = 240.0) -> None:
    """Until the group's committed offset of every partition reaches its end (or a child exits)."""
    from kafka.structs import TopicPartition

    from streamer.pipeline.kafka_clients import make_consumer

    c = make_consumer(s.kafka, group_id=group)  # never subscribes: it only reads the group's offsets
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and all(p.poll() is None for p in procs):
            if all((c.committed(TopicPartition(s.kafka.events_topic, part)) or 0) >= end for part, end in ends.items()):
                return
            time.sleep(0.2)
    finally:
        c.close(autocommit=False)


def _produce_counting(k, topic: str, values: list[bytes]) -> tuple[float, dict[int, int]]:
    """Produce ``values``; msg/s and the end offset of each partition (a new topic: records per partition)."""
    from collections import Counter

    from streamer.pipeline.kafka_clients import make_producer

    counts: Counter = Counter()
    p = make_producer(k, linger_ms=20)
    t = time.perf_counter()
    for v in values:
        p.send(topic, value=v).add_callback(lambda md: counts.update((md.partition,)))
    p.flush()
    rate = len(values) / (time.perf_counter() - t)
    p.close()
    return rate, dict(counts)


def child_launch(s, extra: dict) -> tuple[dict, dict[str, str]]:
    """A child's args file content and environment. The SASL password stays out of the file (and argv): the child
    gets it as KDSM_KAFKA__SASL_PASSWORD, whether the parent had it from that variable or from ``--config``."""
    args = {"settings": s.model_dump(mode="json", exclude={"kafka": {"sasl_password"}}), **extra}
    env = dict(os.environ)
    if s.kafka.sasl_password is not None:
        env["KDSM_KAFKA__SASL_PASSWORD"] = s.kafka.sasl_password.get_secret_value()
    return args, env


def _group(s, model_path: str, device: str, threads: int | None, n: int, tmp: Path, group: str,
           ends: dict[int, int]) -> dict:
    """Start n children in one group at one barrier; collect their commit timelines."""
    go, stop = tmp / f"{group}.go", tmp / f"{group}.stop"
    procs, outs, readies = [], [], []
    for i in range(n):
        c = s.model_copy(deep=True)
        c.kafka.group_id, c.kafka.client_id = group, f"{group}-{i}"
        c.kafka.transactional_id = f"{group}-{i}.tx"
        if threads:
            c.stream.threads = threads
        files = {k: str(tmp / f"{group}-{i}.{k}") for k in ("args", "ready", "out", "log")}
        args, env = child_launch(c, {"model": model_path, "device": device, "ready": files["ready"], "go": str(go),
                                     "out": files["out"], "stop": str(stop), "deadline_s": 240.0})
        Path(files["args"]).write_text(json.dumps(args))
        with open(files["log"], "wb") as log_file:
            procs.append(subprocess.Popen([sys.executable, "-m", "streamer.dev.bench_scale", files["args"]],
                                          stdout=log_file, stderr=subprocess.STDOUT, env=env))
        outs.append(Path(files["out"]))
        readies.append((Path(files["ready"]), Path(files["log"])))
    try:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while not all(r.exists() for r, _ in readies):
            if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
                tails = "\n".join(lg.read_text()[-1500:] for _, lg in readies)
                raise RuntimeError(f"bench children not ready (N={n}):\n{tails}")
            time.sleep(0.05)
        go.write_text("go")
        _wait_drained(s, group, ends, procs)
        stop.write_text("stop")
        for p in procs:
            p.wait(120)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    missing = [str(o) for o in outs if not o.exists()]
    if missing:
        raise RuntimeError(f"bench children wrote no result: {missing}: " + readies[0][1].read_text()[-1500:])
    data = [json.loads(o.read_text()) for o in outs]
    r = group_rate([[tuple(x) for x in d["commits"]] for d in data])
    return {"processes": n, **r, "per_process_rows": [sum(x[1] for x in d["commits"]) for d in data],
            "device": data[0]["device"]}


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
