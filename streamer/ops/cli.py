"""``kdsm``: one command, many subcommands, each with ``--help``.

Errors a user can fix (bad config, missing file, bad data, bad artifact)
print one line on stderr and exit with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from offline_train.artifact import ArtifactError
from offline_train.config import ConfigError
from offline_train.data import DataError
from streamer.config import Settings
from streamer.lifecycle.registry import RegistryError
from streamer.lifecycle.thresholds import ThresholdError

# Modules exposing ``register(subparsers, settings_cls)``, in help order.
COMMAND_MODULES = [
    "offline_train.cli",
    "streamer.ops.commands",
    "streamer.ops.configs",
    "streamer.ops.models",
]
# Modules exposing ``register_bench(bench_subparsers, settings_cls)`` for ``kdsm bench NAME``.
BENCH_MODULES: list[str] = ["offline_train.speed", "offline_train.evaluation.cli", "streamer.dev.bench_stream", "streamer.dev.bench_lifecycle"]

USER_ERRORS = (ConfigError, DataError, ArtifactError, FileNotFoundError, PermissionError, ThresholdError, RegistryError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kdsm", description="Streaming tabular anomaly detection with K-DSM.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub, Settings)
    if BENCH_MODULES:
        bench = sub.add_parser("bench", help="benchmarks that print figures and write them to files")
        bench_sub = bench.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
        for name in BENCH_MODULES:
            importlib.import_module(name).register_bench(bench_sub, Settings)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as e:
        print(f"kdsm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"kdsm {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
