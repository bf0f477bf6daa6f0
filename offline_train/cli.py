"""Offline subcommands of ``kdsm``: train, score and features infer. Registered by ``streamer.ops.cli``.

Each ``register`` takes the argparse subparsers and the settings class to load
(the full product settings, so one YAML file serves every command).
"""

from __future__ import annotations

import argparse
import json
import sys

from .argtypes import positive_int, seed
from .config import ConfigError, flag_overrides, load_settings
from .published import METHOD_NAMES, published_sections


def register(sub: argparse._SubParsersAction, settings_cls) -> None:
    p = sub.add_parser("train", help="train K-DSM on Parquet and write a model artifact",
                       description="Parquet -> sigmas -> model -> train -> calibrate -> artifact (+ report/).")
    p.add_argument("--data", required=True, help="a Parquet file, a directory of them, or a glob; local or s3://bucket/prefix")
    p.add_argument("--out", required=True, help="artifact directory to write (a path or s3://bucket/prefix)")
    p.add_argument("--config", help="YAML config file (env KDSM_<SECTION>__<KEY> overrides it)")
    p.add_argument("--features", nargs="+", help="feature columns, in order (default: inferred from the schema: numeric, boolean and string columns, structs flattened, except id/ts/label; kdsm features infer prints them)")
    p.add_argument("--profile", choices=["fast", "paper"], help="training profile (default from config: fast)")
    p.add_argument("--steps", type=positive_int, help="fixed number of optimiser steps (overrides the profile)")
    p.add_argument("--method", choices=METHOD_NAMES, default="default",
                   help="what to train: the default (for contaminated history: the refinement and the three-part score) "
                        "or a published method by name; kdsm is the one for history known to be clean (every row "
                        "learnt, the network's score alone; as configs/clean-history.yaml)")
    p.add_argument("--no-ema", action="store_true", help="turn off the EMA-teacher filter only (the default's refinement "
                                                         "still trims; for clean history use --method kdsm)")
    p.add_argument("--seed", type=seed, help="random seed (0..4294967295)")
    p.add_argument("--device", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--force", action="store_true", help="replace the model artifact already at --out")
    p.add_argument("--engine", choices=["local", "dask"], help="where the statistics passes run (default from config: local)")
    p.add_argument("--scheduler", help="Dask scheduler address for --engine dask (default: a local cluster of data.workers processes)")
    p.set_defaults(func=lambda a: _train(a, settings_cls))

    p = sub.add_parser("score", help="score a Parquet file with a model artifact",
                       description="Writes id/ts/label (when present), score, p_value and severity per row; with the "
                       "default blend also score_network, score_isolation, score_knn and leading_part.")
    p.add_argument("--model", required=True, help="artifact directory (a path or s3://bucket/prefix)")
    p.add_argument("--data", required=True, help="a Parquet file, a directory of them, or a glob; local or s3://bucket/prefix")
    p.add_argument("--out", required=True, help="output Parquet file (a path or s3://bucket/key.parquet)")
    p.add_argument("--config", help="YAML config file (for the storage section of s3:// locations)")
    p.set_defaults(func=lambda a: _score(a, settings_cls))

    p = sub.add_parser("features", help="the feature spec (README \"Feature spec\")",
                       description="Feature spec tools: infer prints the spec training would infer from the data.")
    fsub = p.add_subparsers(dest="features_command", metavar="ACTION", required=True)
    q = fsub.add_parser("infer", help="print the feature spec inferred from Parquet data, as YAML for the config",
                        description="Types from the Parquet schema (numbers, strings, booleans; structs flattened to "
                                    "dotted paths), missing: impute where the data has nulls, identifier-like string "
                                    "columns left out (said in a comment). Paste it under features: to edit it.")
    q.add_argument("--data", required=True, help="a Parquet file, a directory of them, or a glob")
    q.add_argument("--config", help="YAML config file (data.id_column, timestamp_column, label_column are left out)")
    q.set_defaults(func=lambda a: _infer(a, settings_cls))


def _train(a, settings_cls) -> int:
    from .job import train_job

    s = load_settings(settings_cls, a.config)
    # CLI flags are the highest-priority overrides; validate_assignment checks them.
    with flag_overrides():
        if a.method != "default":
            for section, value in published_sections(a.method, s).items():
                setattr(s, section, value)
        if a.features:
            if s.features is not None:  # the spec would win silently: refused as data.features is (config.py)
                raise ConfigError("set either features (the spec, in the config) or --features (column names), not both")
            s.data.features = a.features
        if a.profile:
            s.train.profile = a.profile
        if a.steps:
            s.train.steps = a.steps
        if a.no_ema:
            s.ema.enabled = False
        if a.seed is not None:
            s.train.seed = a.seed
        if a.device:
            s.train.device = a.device
        if a.engine:
            s.data.engine = a.engine
        if a.scheduler:
            s.data.scheduler = a.scheduler

    from .model import resolve_device

    resolve_device(s.train.device)  # an unusable device fails here, in one line, before any data is read
    summary = train_job(s, a.data, a.out, progress=not a.quiet and sys.stderr.isatty(), force=a.force)
    print(json.dumps({"version": summary["version"], "labels": summary.get("labels"),
                      "train_seconds": summary["train"]["seconds"],
                      "rows_read": summary["data"]["rows_read"], "rows_skipped": summary["data"]["rows_skipped"]}))
    return 0


def _score(a, settings_cls) -> int:
    from .job import score_job

    load_settings(settings_cls, a.config)  # configures object storage for s3:// locations
    score_job(a.model, a.data, a.out)
    return 0


def _infer(a, settings_cls) -> int:
    from .data import ParquetSource
    from .features import specs_yaml

    dc = load_settings(settings_cls, a.config).data
    source = ParquetSource(a.data, features=dc.features, id_column=dc.id_column, timestamp_column=dc.timestamp_column,
                           label_column=dc.label_column, batch_rows=dc.batch_rows)
    print(specs_yaml(source.specs, source.left_out), end="")
    return 0
