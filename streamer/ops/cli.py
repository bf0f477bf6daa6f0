"""``kdsm``: one command, many subcommands, each with ``--help``.

Errors a user can fix (bad config, missing file, bad data, bad artifact)
print one line on stderr and exit with status 2, without a traceback. A
closed stdout (``kdsm ... | head``) ends the command quietly. Start-up
imports only what the parser needs (argparse, pydantic for the settings):
torch, pyarrow, Kafka and Redis clients load inside the command that uses
them, so ``kdsm --help`` answers at once.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys

# The project's own modules are imported inside the functions below, so a Ctrl-C while they load is one line from
# ``main``'s handler as well.


def command_modules() -> tuple:
    """Modules exposing ``register(subparsers, settings_cls)``, in help order."""
    from offline_train import cli as offline_commands

    from . import commands, configs, models

    return offline_commands, commands, configs, models


def register_benches(bench_sub, settings_cls) -> None:
    """``kdsm bench NAME``: modules exposing ``register_bench(bench_subparsers, settings_cls)``."""
    from offline_train import sigma_bench, speed
    from offline_train.evaluation import cli as evaluation_cli
    from streamer.dev import bench_features, bench_lifecycle, bench_stream

    for module in (speed, sigma_bench, evaluation_cli, bench_stream, bench_lifecycle, bench_features):
        module.register_bench(bench_sub, settings_cls)


def user_errors() -> tuple[type[Exception], ...]:
    """Errors a user can fix: one line and exit status 2, no traceback."""
    from offline_train.artifact import ArtifactError
    from offline_train.config import ConfigError
    from offline_train.data import DataError
    from offline_train.engine import EngineUnavailable
    from offline_train.storage import StorageError
    from streamer.lifecycle.control import RedisRefused, RedisUnavailable
    from streamer.lifecycle.registry import RegistryError
    from streamer.lifecycle.thresholds import ThresholdError

    # The path errors name the path (KDSM_ARCHIVE__DIR under a regular file: "Not a directory: 'afile/arch'").
    errors = (ConfigError, DataError, ArtifactError, FileNotFoundError, PermissionError, NotADirectoryError,
              IsADirectoryError, FileExistsError, ThresholdError, RegistryError, RedisUnavailable, RedisRefused,
              EngineUnavailable, StorageError)
    model = sys.modules.get("offline_train.model")  # loaded by any command that resolves a torch device
    if model is not None:
        errors += (model.DeviceError,)
    kafka_clients = sys.modules.get("streamer.pipeline.kafka_clients")  # only a command that loaded it reaches a broker
    if kafka_clients is not None:
        errors += (kafka_clients.KafkaUnavailable,)
    services = sys.modules.get("streamer.dev.local_services")  # the demo and the benches start their own dev services
    if services is not None:  # a missing redis-server or tansu, a port someone else holds: the message says what to do
        errors += (services.ServiceError,)
    return errors


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("kdsm-stream")
    except PackageNotFoundError:  # run from a checkout without installing it
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line: what is wrong and where the usage is, not the usage block first.

    Subcommands' parsers are of this class too (``add_subparsers`` makes its parsers of its parent's class).
    """

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` shows the usage)\n")

    def parse_args(self, args=None, namespace=None):
        # argparse hands a subcommand's unknown flags up to the top parser, whose error would point at `kdsm --help`,
        # which does not list them: the subcommand that got them reports them.
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._chosen(parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def _chosen(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The innermost subcommand's parser that ``parsed`` went through (``kdsm thresholds show``'s, say)."""
        parser = self
        while True:
            sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
            if sub is None or getattr(parsed, sub.dest, None) not in sub.choices:
                return parser
            parser = sub.choices[getattr(parsed, sub.dest)]


def build_parser(benches: bool = True) -> argparse.ArgumentParser:
    """The whole ``kdsm`` parser; ``benches=False`` leaves ``kdsm bench``'s (heavy) subcommands out."""
    from streamer.config import Settings

    parser = _Parser(prog="kdsm", description="Streaming tabular anomaly detection with K-DSM.")
    parser.add_argument("--version", action="version", version=f"kdsm {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in command_modules():
        module.register(sub, Settings)
    bench = sub.add_parser("bench", help="benchmarks that print figures and write them to files")
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    if benches:
        register_benches(bench_sub, Settings)
    _show_defaults(parser)
    return parser


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every option's help ends with its default, where it has one and the text does not say it already."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _show_defaults(sub)
        elif (action.option_strings and action.help and action.help != argparse.SUPPRESS
              and action.default not in (None, False, argparse.SUPPRESS) and "default" not in action.help):
            action.help += " (default: %(default)s)"


def _check_env() -> None:
    """A misspelt ``KDSM_*`` variable is an error, as a misspelt key in a config file is (pydantic would ignore it)."""
    from offline_train.config import ConfigError, unknown_env
    from streamer.config import Settings

    bad = unknown_env(Settings)
    if bad:
        raise ConfigError("unknown environment variable(s), no setting reads them: " + ", ".join(bad)
                          + " (every KDSM_<SECTION>__<KEY>: configs/default.yaml)")


def _stdout_closed() -> int:
    """stdout's reader went away (``| head``): drop what is left, no traceback; the status a SIGPIPE death gives."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141


class _Interrupts:
    """Notes a Ctrl-C as it raises ``KeyboardInterrupt`` (what Python's own handler does), so ``main`` knows an error
    that followed one came from it: a Ctrl-C that lands while a Rust extension (pydantic's core) initialises makes
    it panic, and the panic (a ``BaseException``, not a ``KeyboardInterrupt``) would print a traceback."""

    def __init__(self):
        self.seen, self.previous, self._defer = False, None, False

    def __enter__(self) -> _Interrupts:
        try:
            self.previous = signal.signal(signal.SIGINT, self._on_sigint)
        except ValueError:  # not the main thread (main() called in a thread): Python's handler stays
            self.previous = None
        return self

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

    @contextlib.contextmanager
    def deferred(self):
        """Within: a Ctrl-C is only noted, and raised on the way out. For the parser's imports, so none lands inside
        an extension's initialisation: the Rust panic hook would print its own lines before any handler runs."""
        self._defer = True
        try:
            yield
        finally:
            self._defer = False
        if self.seen:
            raise KeyboardInterrupt

    def _on_sigint(self, signum, frame):
        self.seen = True
        if not self._defer:
            raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    with _Interrupts() as interrupts:
        try:
            with interrupts.deferred():  # the imports: torch for the benches (seconds), pydantic for the settings
                parser = build_parser(benches=bool(argv) and argv[0] == "bench")
            return _main(parser, argv)
        except BrokenPipeError:
            return _stdout_closed()
        except BaseException as e:  # while the commands load (the benches: torch, seconds) or while one runs
            if not (isinstance(e, KeyboardInterrupt) or interrupts.seen):
                raise
            print(f"kdsm {argv[0]}: interrupted" if argv and not argv[0].startswith("-") else "kdsm: interrupted",
                  file=sys.stderr)
            # A Ctrl-C that met code run by ``PyRun_String`` (torch runs some while it imports) leaves CPython's
            # "unhandled KeyboardInterrupt" flag set, even once handled, and the interpreter would then end by SIGINT
            # (status -2) instead of 130. Compiling and running a string resets that flag.
            exec("")  # noqa: S102 - the reset; nothing is run
            return 130


def _main(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    args = parser.parse_args(argv)
    # kafka-python logs every failed connection attempt; without a handler Python would print them all on
    # stderr. Commands that set up logging route them to the JSON log (streamer.pipeline.logs).
    kafka_log = logging.getLogger("kafka")
    if not kafka_log.handlers:
        kafka_log.addHandler(logging.NullHandler())
    try:
        _check_env()
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
        return code
    except BrokenPipeError:
        raise
    except Exception as e:
        if not isinstance(e, user_errors()):
            raise
        name = f"kdsm {args.command}" + (f" {args.bench}" if args.command == "bench" else "")
        print(f"{name}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
