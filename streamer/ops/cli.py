"""``kdsm``: one command, many subcommands, each with ``--help``.

Errors a user can fix (bad config, missing file, bad data, bad artifact)
print one line on stderr and exit with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import sys

from offline_train import cli as offline_commands
from streamer.config import Settings

from . import commands, configs, models

# Modules exposing ``register(subparsers, settings_cls)``, in help order.
COMMAND_MODULES = (offline_commands, commands, configs, models)


def register_benches(bench_sub) -> None:
    """``kdsm bench NAME``: modules exposing ``register_bench(bench_subparsers, settings_cls)``."""
    from offline_train import speed
    from offline_train.evaluation import cli as evaluation_cli
    from streamer.dev import bench_lifecycle, bench_stream

    for module in (speed, evaluation_cli, bench_stream, bench_lifecycle):
        module.register_bench(bench_sub, Settings)


def user_errors() -> tuple[type[Exception], ...]:
    """Errors a user can fix: one line and exit status 2, no traceback."""
    from offline_train.artifact import ArtifactError
    from offline_train.config import ConfigError
    from offline_train.data import DataError
    from streamer.lifecycle.registry import RegistryError
    from streamer.lifecycle.thresholds import ThresholdError

    return ConfigError, DataError, ArtifactError, FileNotFoundError, PermissionError, ThresholdError, RegistryError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kdsm", description="Streaming tabular anomaly detection with K-DSM.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(sub, Settings)
    bench = sub.add_parser("bench", help="benchmarks that print figures and write them to files")
    register_benches(bench.add_subparsers(dest="bench", metavar="BENCHMARK", required=True))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Exception as e:
        if not isinstance(e, user_errors()):
            raise
        print(f"kdsm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"kdsm {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
