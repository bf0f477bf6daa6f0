"""Model-lifecycle subcommands of ``kdsm``: ``retrain`` and ``models``. Registered by ``streamer.ops.cli``.

Each prints JSON on stdout. ``kdsm retrain`` exits 0 when it promoted or
registered a model, or when another retrain holds the lock; 1 when training
could not run (no/too little/corrupt data, training error); 2 when an object
store (archive or registry) cannot be reached, as other user errors; 3 when the
new model failed the validation gate. In every non-zero case the current model
keeps serving. ``kdsm models prune`` exits 1 when a pruned version's artifact
could not be deleted from the store (its registry entry is gone; the output
names the artifact to delete by hand).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from offline_train.argtypes import positive_int
from offline_train.config import load_settings

PRUNE_KEEP = 10  # `kdsm models prune` without --keep: the newest versions kept (besides current, previous, validating)

log = logging.getLogger("kdsm.retrain")


def register(sub: argparse._SubParsersAction, settings_cls) -> None:
    p = sub.add_parser("retrain", help="retrain on the event archive, validate, register and promote (fleet-wide lock)",
                       description="Without flags: one run (the scheduled job). --request: ask for a run through Redis. "
                                   "--watch: serve requests (drift events and --request) until stopped.")
    p.add_argument("--config", help="YAML config file (env KDSM_<SECTION>__<KEY> overrides it)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--request", action="store_true", help="only write a retrain request to the Redis request stream")
    g.add_argument("--watch", action="store_true", help="consume retrain requests and run one retrain per burst")
    p.add_argument("--reason", default=None, help="why (recorded with the run or the request)")
    p.add_argument("--max-runs", type=positive_int, help="--watch: stop after this many runs")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], type=str.upper,
                   help="JSON log lines on stderr from this level up")
    p.set_defaults(func=lambda a: _retrain(a, settings_cls))

    p = sub.add_parser("models", help="the model registry: list, show, add, promote, rollback, prune",
                       description="Versions live in the artifact store (registry.store_dir) and Redis; streamers with "
                                   "registry.enabled follow the current pointer and hot-swap between batches.")
    msub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, help_ in (("list", "registered versions, newest first"), ("show", "one version's metadata"),
                        ("add", "register an artifact directory (e.g. from `kdsm train`)"),
                        ("promote", "make a version current (the old current becomes previous)"),
                        ("rollback", "make the previous version current again"),
                        ("prune", "remove old versions and their artifacts, keeping the newest --keep, the current and "
                                  "the previous one and any still validating")):
        q = msub.add_parser(name, help=help_)
        q.add_argument("--config", help="YAML config file")
        if name in ("show", "promote"):
            q.add_argument("version", help="model version (see `kdsm models list`)")
        if name == "add":
            q.add_argument("--model", required=True, help="artifact directory")
            q.add_argument("--promote", action="store_true", help="also make it current")
        if name == "promote":
            q.add_argument("--force", action="store_true", help="promote even a version that failed the gate")
        if name in ("promote", "rollback"):
            q.add_argument("--reason", default="manual", help="recorded in the registry log")
        if name == "prune":
            q.add_argument("--keep", type=positive_int, default=PRUNE_KEEP, metavar="N",
                           help="how many of the newest versions (by registration time) to keep, at least 1")
            q.add_argument("--dry-run", action="store_true", help="only say what would be pruned; change nothing")
            q.add_argument("--reason", default=None, help="recorded in the registry log (default: retention: keep "
                                                          "the newest N)")
        q.set_defaults(func=lambda a: _models(a, settings_cls))


def _registry(s):
    """The registry, after one PING: an unreachable Redis is one line (exit 2), not a traceback at the first command."""
    from streamer.lifecycle.control import redis_client, require
    from streamer.lifecycle.registry import ModelRegistry

    return ModelRegistry.from_settings(s, client=require(redis_client(s.redis), s.redis))


def _part(meta: dict, field: str, key: str):
    """``meta[field][key]``, or None where the entry (edited by hand) has no such object."""
    sub = meta.get(field)
    return sub.get(key) if isinstance(sub, dict) else None


def _print(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    print()


def _retrain(a, settings_cls) -> int:
    from streamer.lifecycle.control import redis_replies

    s = load_settings(settings_cls, a.config)
    with redis_replies(s.redis):  # an error reply (bad DB index, NOPERM on the prefix, MISCONF): one line, exit 2
        return _retrain_with(a, s)


def _retrain_with(a, s) -> int:
    from streamer.lifecycle.control import redis_client
    from streamer.lifecycle.requests import request_retrain
    from streamer.pipeline.logs import setup_logging

    reg = _registry(s)
    if a.request:
        _print({"requested": request_retrain(reg, a.reason or "manual"), "stream": reg.keys.requests})
        return 0
    # The training job (torch, the detector) is imported only here: a request above answers in about a second.
    from streamer.lifecycle.metrics import LifecycleMetrics
    from streamer.lifecycle.retrain import run_retrain, watch

    setup_logging(a.log_level)
    if a.watch:
        metrics = LifecycleMetrics()  # kdsm_retrain_runs_total, served on retrain.metrics_port (0: not served)
        server = serve_metrics(s, metrics)
        try:
            results = watch(s, reg, redis_client(s.redis, blocking=True), max_runs=a.max_runs, metrics=metrics)
        finally:
            if server is not None:
                server.stop()
        _print([r.to_dict() for r in results])
        return 0
    res = run_retrain(s, reg, reason=a.reason or "schedule")
    _print(res.to_dict())
    return res.exit_code


class _WatchMetrics:
    """What ``MetricsServer`` serves for a watcher: its counters, then the process's. ``/healthz`` answers 200 while
    the process serves (a run trains for minutes between two loops of the watcher)."""

    def __init__(self, metrics):
        self.metrics = metrics

    @property
    def last_loop(self) -> float:
        return time.time()

    def render(self) -> bytes:
        from prometheus_client import REGISTRY, generate_latest

        return generate_latest(self.metrics.registry) + generate_latest(REGISTRY)


def serve_metrics(settings, metrics):
    """``kdsm retrain --watch``'s ``/metrics`` on ``metrics.host:retrain.metrics_port``, started; None when the port
    is 0. A one-shot run exits before any scrape: its outcome is in ``<prefix>retrain:runs`` instead. Here, in the
    command, because it joins the lifecycle's counters to the pipeline's server (rooms import only down)."""
    from offline_train.config import ConfigError
    from streamer.pipeline.metrics import MetricsServer

    host, port = settings.metrics.host, settings.retrain.metrics_port
    if not port:
        return None
    try:
        server = MetricsServer(_WatchMetrics(metrics), host, port).start()
    except ConfigError as e:  # a port taken, a host not of this machine: one line naming the watcher's settings, exit 2
        raise ConfigError(f"retrain metrics server cannot listen on {host}:{port} (metrics.host, retrain.metrics_port): "
                          f"{e.__context__ or e}") from None
    log.info({"event": "metrics", "url": server.url + "/metrics", "health": server.url + "/healthz"})
    return server


def _models(a, settings_cls) -> int:
    from streamer.lifecycle.control import redis_replies
    from streamer.pipeline.logs import setup_logging

    setup_logging("WARNING")  # an unreadable registry entry that `list` skips is a JSON log line
    s = load_settings(settings_cls, a.config)
    with redis_replies(s.redis):
        return _models_with(a, s)


def _models_with(a, s) -> int:
    reg = _registry(s)
    if a.action == "list":
        _print([{k: m.get(k) for k in ("version", "created", "status", "current", "previous", "trigger")}
                | {"gate": _part(m, "gate", "passed"), "rows": _part(m, "data_window", "rows")}
                | ({"error": m["error"]} if "error" in m else {})
                for m in reg.list()])
    elif a.action == "show":
        meta = reg.get(a.version)
        if meta is None:
            from streamer.lifecycle.registry import RegistryError

            raise RegistryError(f"unknown model version {a.version!r}")
        _print({**meta, "pointers": reg.pointers(), "artifact": str(reg.store.location(a.version))})
    elif a.action == "add":
        v, repaired = reg.add_artifact(a.model, meta={"trigger": "manual add"})
        out = {"added": v} | ({"repaired": repaired} if repaired else {})
        if a.promote:
            was = reg.current_version()
            out["previous"], out["current"] = reg.promote(v, reason="manual add")
            out["promoted"] = was != v
        _print(out)
    elif a.action == "promote":
        old, new = reg.promote(a.version, reason=a.reason, force=a.force)
        _print({"previous": old, "current": new})
    elif a.action == "prune":
        res = reg.prune(a.keep, dry_run=a.dry_run, reason=a.reason)
        _print(res)
        return 1 if res.get("artifact_errors") else 0
    else:
        old, new = reg.rollback(reason=a.reason)
        _print({"rolled_back": old, "current": new})
    return 0
