"""The front door as a new user meets it: fast help, --version, pipes, and one-line errors instead of tracebacks."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "pyarrow", "numpy", "redis", "kafka", "sklearn", "river", "matplotlib")


def kdsm_proc(*args, env=None, **kw) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "streamer", *args], capture_output=True, text=True, env=e, cwd=ROOT,
                          timeout=kw.pop("timeout", 120), **kw)


def test_help_loads_no_heavy_module():
    """`kdsm --help` took 9.6 s importing torch, pyarrow, river...: the parser needs none of them."""
    code = ("import sys\nfrom streamer.ops.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "usage: kdsm" in r.stdout and "LOADED []" in r.stdout, r.stdout[-300:]


def test_subcommand_help_is_light_too_and_bench_help_is_complete():
    r = kdsm_proc("stream", "--help")
    assert r.returncode == 0 and "--model" in r.stdout
    r = kdsm_proc("bench", "--help")
    assert r.returncode == 0 and all(b in r.stdout for b in ("train", "adbench", "stream", "lifecycle"))


def test_version():
    r = kdsm_proc("--version")
    assert r.returncode == 0 and r.stdout.startswith("kdsm ") and len(r.stdout.split()) >= 2


def _closed_stdout(*args) -> tuple[int, str]:
    e = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "streamer", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=e, cwd=ROOT)
    p.stdout.close()  # the reader is gone before the first write, as with `| head -0`
    err = p.stderr.read()
    return p.wait(timeout=60), err


def test_a_closed_pipe_ends_quietly():
    for args in (("config", "show"), ("--help",)):
        code, err = _closed_stdout(*args)
        assert "Traceback" not in err and "BrokenPipeError" not in err, err
        assert code == (141 if args[0] == "config" else 0), (args, code, err)  # argparse's help ignores the closed pipe


# ----------------------------------------------------------------------------- unreachable services
def _error_lines(stderr: str) -> list[str]:
    """stderr lines that are not JSON log events."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("{")]


def _down_port() -> int:
    from streamer.dev.local_services import free_port

    return free_port()  # nothing listens there


def test_unreachable_kafka_is_one_line_within_the_connect_timeout(redis_url, tiny_model_dir):
    port = _down_port()
    env = {"KDSM_KAFKA__BOOTSTRAP": f"127.0.0.1:{port}", "KDSM_KAFKA__CONNECT_TIMEOUT_S": "2",
           "KDSM_REDIS__URL": redis_url, "KDSM_METRICS__ENABLED": "false"}
    for args in (("stream", "--model", str(tiny_model_dir)),
                 ("replay", "--data", "offline_train/bundled/cardio.parquet", "--limit", "5")):
        t0 = time.monotonic()
        r = kdsm_proc(*args, env=env)
        took = time.monotonic() - t0
        assert r.returncode == 2, (args, r.returncode, r.stderr[-2000:])
        assert "Traceback" not in r.stderr, r.stderr[-2000:]
        lines = _error_lines(r.stderr)
        assert len(lines) == 1 and f"Kafka at 127.0.0.1:{port} is unreachable" in lines[0], lines
        assert took < 30, f"{args[0]} took {took:.0f} s with a 2 s connect timeout"


def test_a_topic_name_kafka_refuses_is_one_line_at_load(tiny_model_dir, tmp_path):
    """kafka.events_topic: "bad topic!" passed `kdsm config check` (OK) and `kdsm stream` died in kafka-python's
    subscribe with a ValueError traceback (exit 1), after reaching the broker."""
    cfg = tmp_path / "topics.yaml"
    cfg.write_text('kafka:\n  events_topic: "bad topic!"\n')
    r = kdsm_proc("config", "check", str(cfg))
    assert r.returncode == 2 and "kafka.events_topic" in r.stderr and "is not a Kafka topic name" in r.stderr, r.stderr
    env = {"KDSM_KAFKA__EVENTS_TOPIC": "bad topic!", "KDSM_KAFKA__BOOTSTRAP": f"127.0.0.1:{_down_port()}",
           "KDSM_METRICS__ENABLED": "false"}
    r = kdsm_proc("stream", "--model", str(tiny_model_dir), env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and lines[0].startswith("kdsm stream: error: ") and "kafka.events_topic" in lines[0] \
        and "' ', '!' not allowed" in lines[0], lines


def test_a_handshake_the_broker_refuses_is_named_in_the_unreachable_line(kafka_bootstrap, redis_url, tiny_model_dir):
    """A broker that answered and refused the SASL handshake read "no broker answered within 2 s", as an address
    nothing listens on does: the line now names kafka-python's last failed attempt and the settings to look at."""
    env = {"KDSM_KAFKA__BOOTSTRAP": kafka_bootstrap, "KDSM_KAFKA__CONNECT_TIMEOUT_S": "2",
           "KDSM_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KDSM_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
           "KDSM_KAFKA__SASL_USERNAME": "kdsm", "KDSM_KAFKA__SASL_PASSWORD": "not-a-real-one",
           "KDSM_REDIS__URL": redis_url, "KDSM_METRICS__ENABLED": "false"}
    r = kdsm_proc("stream", "--model", str(tiny_model_dir), env=env)  # the dev broker takes no SASL
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and f"Kafka at {kafka_bootstrap} is unreachable: no broker accepted a connection within 2 s" \
        in lines[0] and "; the last attempt failed: [Error 33] UnsupportedSaslMechanismError (kafka.security_protocol, " \
        "kafka.sasl_mechanism" in lines[0], lines
    assert '"logger": "kafka' not in r.stderr and "not-a-real-one" not in r.stderr  # kafka-python's log stays quiet
    port = _down_port()
    r = kdsm_proc("stream", "--model", str(tiny_model_dir), env={"KDSM_KAFKA__BOOTSTRAP": f"127.0.0.1:{port}",
                                                                  "KDSM_KAFKA__CONNECT_TIMEOUT_S": "2",
                                                                  "KDSM_REDIS__URL": redis_url,
                                                                  "KDSM_METRICS__ENABLED": "false"})
    lines = _error_lines(r.stderr)
    assert r.returncode == 2 and len(lines) == 1 and "no broker answered within 2 s" in lines[0] \
        and "; the last attempt failed: KafkaConnectionError: 111 ECONNREFUSED" in lines[0], lines


def test_unreachable_redis_is_one_line(tiny_model_dir, tmp_path):
    port = _down_port()
    env = {"KDSM_REDIS__URL": f"redis://:secret@127.0.0.1:{port}/0", "KDSM_REGISTRY__STORE_DIR": str(tmp_path / "store")}
    for args in (("models", "list"), ("models", "rollback"), ("retrain",), ("retrain", "--request"),
                 ("thresholds", "show", "--model", str(tiny_model_dir))):
        r = kdsm_proc(*args, env=env)
        assert r.returncode == 2, (args, r.returncode, r.stderr[-2000:])
        assert "Traceback" not in r.stderr, r.stderr[-2000:]
        lines = _error_lines(r.stderr)
        assert len(lines) == 1 and f"Redis at redis://:***@127.0.0.1:{port}/0 is unreachable" in lines[0], (args, lines)
        assert "secret" not in r.stderr


def test_registry_and_threshold_commands_load_no_model_code(redis_url, tmp_path, unique, tiny_model_dir):
    """`kdsm models list`, `kdsm retrain --request` and `kdsm thresholds show` took 5-7 s, about 4-5 s of it
    importing torch and scikit-learn that they never used."""
    code = ("import sys\nfrom streamer.ops.cli import main\ncodes = []\n"
            f"for args in (['models', 'list'], ['models', 'rollback'], ['retrain', '--request'],\n"
            f"             ['thresholds', 'show', '--model', {str(tiny_model_dir)!r}]):\n"
            "    try:\n        codes.append(main(args) or 0)\n    except SystemExit as e:\n        codes.append(e.code)\n"
            "print('CODES', codes)\n"
            "print('LOADED', sorted(m for m in ('torch', 'sklearn', 'offline_train.detector') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KDSM_REDIS__URL": redis_url, "KDSM_REDIS__KEY_PREFIX": f"kdsm-{unique}",
           "KDSM_REGISTRY__STORE_DIR": str(tmp_path / "store")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "CODES [0, 2, 0, 0]" in r.stdout and '"artifact_quantiles"' in r.stdout and '"requested"' in r.stdout and "nothing to roll back to" in r.stderr, (r.stdout[-300:], r.stderr[-1000:])
    assert "LOADED []" in r.stdout, r.stdout[-300:]


def test_sigterm_while_waiting_for_kafka_stops_at_once(redis_url, tiny_model_dir):
    port = _down_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KDSM_KAFKA__BOOTSTRAP": f"127.0.0.1:{port}",
           "KDSM_KAFKA__CONNECT_TIMEOUT_S": "120", "KDSM_REDIS__URL": redis_url, "KDSM_METRICS__ENABLED": "false"}
    p = subprocess.Popen([sys.executable, "-m", "streamer", "stream", "--model", str(tiny_model_dir), "--log-level", "DEBUG"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        seen = []
        for line in p.stderr:  # kafka-python's first bootstrap attempt: the signal handlers are in place
            seen.append(line)
            if '"logger": "kafka' in line:
                break
        else:
            raise AssertionError("".join(seen)[-2000:])
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        rest = p.communicate(timeout=30)[1]
        assert time.monotonic() - t0 < 10
        assert p.returncode == 130 and "Traceback" not in rest, (p.returncode, rest[-2000:])
        assert "interrupted" in rest
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# ----------------------------------------------------------------------------- devices and outputs
def test_cuda_without_cuda_is_one_line(tiny_model_dir, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    data = "offline_train/bundled/cardio.parquet"
    for args, env in ((("train", "--data", data, "--out", str(tmp_path / "m"), "--steps", "5", "--device", "cuda"), {}),
                      (("train", "--data", data, "--out", str(tmp_path / "m"), "--steps", "5", "--device", "cuda:x"), {}),
                      (("stream", "--model", str(tiny_model_dir)), {"KDSM_STREAM__DEVICE": "cuda"})):
        r = kdsm_proc(*args, env=env)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr[-2000:])
        lines = _error_lines(r.stderr)
        assert len(lines) == 1 and "device 'cuda" in lines[0], lines
    assert not (tmp_path / "m").exists()


def test_train_checks_out_before_training_and_overwrites_only_with_force(tmp_path, tiny_model_dir):
    data = "offline_train/bundled/cardio.parquet"
    a_file = tmp_path / "model.bin"
    a_file.write_text("not an artifact")
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("precious")
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    before = (model / "metadata.json").read_text()
    for out, why in ((a_file, "is a file"), (other, "holds other files"), (model, "--force")):
        t0 = time.monotonic()
        r = kdsm_proc("train", "--data", data, "--out", str(out), "--steps", "2000")
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert why in r.stderr and "trained:" not in r.stdout  # refused before any training
        assert time.monotonic() - t0 < 30
    r = kdsm_proc("train", "--data", data, "--out", str(other), "--steps", "5", "--force")
    assert r.returncode == 2 and (other / "keep.txt").read_text() == "precious"  # --force replaces artifacts only
    assert (model / "metadata.json").read_text() == before
    r = kdsm_proc("train", "--data", data, "--out", str(model), "--steps", "5", "--force",
                  env={"KDSM_MODEL__WIDTH": "32", "KDSM_MODEL__DEPTH": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert (model / "metadata.json").read_text() != before


# ----------------------------------------------------------------------------- environment
def test_a_misspelt_environment_variable_is_reported():
    r = kdsm_proc("config", "show", env={"KDSM_KAFKA__BOOTSTRAPP": "broker:9092"})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and "KDSM_KAFKA__BOOTSTRAPP (did you mean KDSM_KAFKA__BOOTSTRAP?)" in lines[0], lines
    r = kdsm_proc("config", "show", env={"KDSM_REDIS_URL": "redis://x:1/0"})  # one underscore: ignored before
    assert r.returncode == 2 and "did you mean KDSM_REDIS__URL?" in r.stderr
    # the right names, a dict key below a section, and tool variables without a section pass
    r = kdsm_proc("config", "show", env={"KDSM_KAFKA__BOOTSTRAP": "broker:9092", "KDSM_TEST_SOMETHING": "1",
                                         "KDSM_CALIBRATION__SEVERITIES__WARNING": "0.95"})
    assert r.returncode == 0 and "broker:9092" in r.stdout, r.stderr


# ----------------------------------------------------------------------------- help texts
def _walk(parser, path=("kdsm",)):
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))


def test_every_option_has_help_with_its_default_and_no_description_is_cut_off():
    import argparse

    from streamer.ops.cli import build_parser

    bad = []
    for path, parser in _walk(build_parser()):
        cmd = " ".join(path)
        if parser.description and parser.description.rstrip()[-1] not in ".)":
            bad.append(f"{cmd}: description ends mid-sentence: ...{parser.description[-40:]!r}")
        for a in parser._actions:
            if not a.option_strings or a.dest in ("help", "version"):
                continue
            if not a.help:
                bad.append(f"{cmd} {a.option_strings[-1]}: no help")
            elif a.default not in (None, False, argparse.SUPPRESS) and "default" not in a.help:
                bad.append(f"{cmd} {a.option_strings[-1]}: default {a.default!r} not shown")
    assert not bad, "\n".join(bad)
    r = kdsm_proc("thresholds", "set", "--help")
    assert "{warning,critical,...}" in r.stdout
    r = kdsm_proc("bench", "stream", "--help")
    assert "(target >= 0.9)." in " ".join(r.stdout.split())


def _loads_pydantic(pid: int) -> bool:
    """True once the process has mapped pydantic's compiled core: ``main`` imports pydantic inside its handler."""
    try:
        return "pydantic_core" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("delay", ["parser", 1.5, 3.0])
def test_ctrl_c_while_the_command_loads_is_one_line(tmp_path, delay):
    """Ctrl-C in the first seconds, while `kdsm bench` still imports (the benches load torch), ends in one line with
    status 130, as it does once the command runs; before, it printed a KeyboardInterrupt traceback. "parser" signals
    as soon as ``main`` builds its parser (a fixed 0.3 s could land before the interpreter reached ``main`` on a
    loaded machine: a Ctrl-C during Python's own start-up is Python's to report)."""
    e = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "streamer", "bench", "adbench", "--data-dir", str(tmp_path), "--out",
                          str(tmp_path / "o")], env=e, cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    if delay == "parser":
        deadline = time.monotonic() + 30
        while not _loads_pydantic(p.pid) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
    else:
        time.sleep(delay)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    if "error: no .npz files" in err:  # a fast machine got as far as the empty data folder: the command's own error,
        # then the signal may still land while the interpreter exits (status -2): one line and no traceback either way
        assert p.returncode in (2, -signal.SIGINT) and err.count("\n") == 1 and "Traceback" not in err, err
        return
    assert p.returncode == 130 and err in ("kdsm: interrupted\n", "kdsm bench: interrupted\n"), err


class _Panic(BaseException):
    """Stands for pyo3's ``PanicException``: what a Rust extension raises when a Ctrl-C broke its initialisation."""


def _parser_running(func):
    import argparse

    p = argparse.ArgumentParser(prog="kdsm")
    p.add_argument("command")
    p.set_defaults(func=func)
    return p


def test_an_error_that_follows_a_ctrl_c_is_the_interrupt(monkeypatch, capsys):
    """A Ctrl-C inside an extension's import surfaces as its own exception, not KeyboardInterrupt: still one line,
    status 130. An error of that kind with no Ctrl-C before it is not hidden."""
    from streamer.ops import cli

    def interrupted_import(args):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler raises at the next bytecode
        except KeyboardInterrupt as e:
            raise _Panic("failed to import the datetime C API") from e

    monkeypatch.setattr(cli, "build_parser", lambda benches: _parser_running(interrupted_import))
    # The handler main found: Python's own, or SIG_IGN where the tests run as a background job of a script (POSIX
    # shells start those with SIGINT ignored, and Python then installs no handler).
    before = signal.getsignal(signal.SIGINT)
    assert cli.main(["train"]) == 130
    assert capsys.readouterr().err == "kdsm train: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is before  # main put it back

    def panics(args):
        raise _Panic("a real bug")

    monkeypatch.setattr(cli, "build_parser", lambda benches: _parser_running(panics))
    with pytest.raises(_Panic):
        cli.main(["train"])


def test_a_ctrl_c_while_the_parser_loads_waits_for_the_imports(monkeypatch, capsys):
    """A Ctrl-C while the parser's modules import is noted and raised once they are in: the import itself is never
    broken (the Rust panic hook would print its own lines), the command does not run, and the answer is one line."""
    from streamer.ops import cli

    ran, imported = [], []

    def loading(benches):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        imported.append(True)  # reached: the signal did not break the "import"
        return _parser_running(lambda args: ran.append(True))

    monkeypatch.setattr(cli, "build_parser", loading)
    assert cli.main(["bench"]) == 130
    assert imported and not ran
    assert capsys.readouterr().err == "kdsm bench: interrupted\n"


# ----------------------------------------------------------------------------- kdsm bench: bad arguments
_SMALL_TRAIN = ["--width", "8", "--depth", "1", "--steps", "2", "--rounds", "1"]  # keep a run cheap where one happens


BAD_BENCH_ARGUMENTS = [
    # counts of zero or below: NaN or inf written over the default output (exit 0), or a traceback
    (["bench", "features-quality", "--seeds", "0"], "expected a positive integer"),
    (["bench", "features-quality", "--seeds", "-1"], "expected a positive integer"),
    (["bench", "features-speed", "--repeats", "0", "--events", "100"], "expected a positive integer"),
    (["bench", "features-speed", "--events", "0"], "expected a positive integer"),
    (["bench", "lifecycle", "--rounds", "0", "--events", "100", "--batch", "50"], "expected a positive integer"),
    (["bench", "lifecycle", "--events", "0"], "expected a positive integer"),
    (["bench", "lifecycle", "--batch", "0", "--events", "100"], "expected a positive integer"),
    (["bench", "train", "--width", "0", "--depth", "1", "--steps", "2", "--rounds", "1"], "expected a positive integer"),
    (["bench", "train", "--width", "-1", "--depth", "1", "--steps", "2", "--rounds", "1"], "expected a positive integer"),
    (["bench", "train", "--rounds", "0", "--width", "8", "--depth", "1", "--steps", "2"], "expected a positive integer"),
    (["bench", "stream", "--processes", "abc"], "expected comma-separated positive integers"),
    (["bench", "stream", "--processes", "0", "--bootstrap", "127.0.0.1:9"], "expected comma-separated positive integers"),
    (["bench", "stream", "--device", "bogus"], "invalid device 'bogus'"),  # was: after a local broker started
    # --out that cannot be written: refused before the benchmark runs, not after it
    *[([*cmd, "--out", out], says) for cmd in (
        ["bench", "train", *_SMALL_TRAIN],
        ["bench", "sigmas", "--rows", "1000", "--features", "2"],
        ["bench", "lifecycle", "--events", "100", "--batch", "50", "--rounds", "1"],
        ["bench", "features-speed", "--events", "100", "--repeats", "1"],
        ["bench", "features-quality", "--seeds", "1"],
        ["bench", "compare", "ok.csv", "--setting", "semi"],
    ) for out, says in (("adir", "is a directory"), ("afile/x.json", "afile is a file"))],
    (["bench", "sigmas", "--rows", "1000", "--features", "2", "--data-dir", "afile"], "expected a folder"),
    (["bench", "sigmas", "--rows", "1000", "--features", "2", "--data-dir", "afile/sub"], "expected a folder"),
    # files that are not a results.csv of kdsm bench adbench: KeyError 'setting', UnicodeDecodeError
    (["bench", "compare", "other.csv", "--setting", "semi"], "no column(s) dataset, setting"),
    (["bench", "compare", "binary.csv", "--setting", "semi"], "not UTF-8 text"),
    # --compare-tree that is no checkout: the current code was timed against itself as "before/after"
    (["bench", "features-speed", "--events", "100", "--repeats", "1", "--rounds", "1", "--compare-tree", "emptydir"],
     "is not a checkout of kdsm-stream"),
    (["bench", "features-speed", "--events", "100", "--repeats", "1", "--rounds", "1", "--compare-tree", "afile"],
     "not a folder"),
    # values the config refuses, given as flags: a traceback from pydantic's assignment check
    (["bench", "stream", "--threads", "5000"], "invalid value for threads: Input should be less than or equal to 1024"),
    # a user error names the benchmark, not "kdsm bench"
    (["bench", "compare", "missing.csv", "--setting", "semi"], "kdsm bench compare: error: no such results file"),
    # a usage error is one line that says where the usage is (argparse printed the usage block first)
    (["bench", "train", "--bogus"],
     "kdsm bench train: error: unrecognized arguments: --bogus (`kdsm bench train --help` shows the usage)"),
    (["thresholds", "show", "--bogus"],
     "kdsm thresholds show: error: unrecognized arguments: --bogus (`kdsm thresholds show --help` shows the usage)"),
    (["bench", "compare", "--setting", "semi"], "kdsm bench compare: error: the following arguments are required: csv"),
    (["demo", "--workdir", "afile"], "expected a folder"),
    (["demo", "--workdir", "afile/sub"], "expected a folder"),
]


@pytest.mark.parametrize("argv,says", BAD_BENCH_ARGUMENTS, ids=[" ".join(argv) for argv, _ in BAD_BENCH_ARGUMENTS])
def test_bad_bench_arguments_are_one_line_and_write_nothing(argv, says, tmp_path, monkeypatch, capsys):
    """Each wrote NaN/inf over its default output with exit 0, crashed with a traceback (most after the whole
    benchmark ran), or started a broker first. Now: exit 2, one error line, nothing written (the defaults,
    docs/results/features/*.json and runs/*.json, are relative to the working folder)."""
    from streamer.ops.cli import main

    for k, v in {"KDSM_TRAIN__STEPS": "20", "KDSM_MODEL__WIDTH": "32", "KDSM_MODEL__DEPTH": "1"}.items():
        monkeypatch.setenv(k, v)  # a case that would train, trains for a moment
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "ok.csv").write_text("dataset,setting,split,seed,method,status,aucpr,aucroc\n")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00dataset\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: one error line
        code = e.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, (code, err[-2000:])
    assert len(lines) == 1 and says in lines[0], err[-2000:]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_tls_against_a_plain_listener_is_one_line_within_the_connect_timeout(kafka_bootstrap, redis_url,
                                                                              tiny_model_dir):
    """security_protocol SSL against the dev broker's plain-TCP listener: kafka-python's bootstrap waited on the TLS
    handshake past connect_timeout_s (over 40 s, no end seen); now one line names the protocol, within the timeout."""
    env = {"KDSM_KAFKA__BOOTSTRAP": kafka_bootstrap, "KDSM_KAFKA__CONNECT_TIMEOUT_S": "2",
           "KDSM_KAFKA__SECURITY_PROTOCOL": "SSL", "KDSM_REDIS__URL": redis_url, "KDSM_METRICS__ENABLED": "false"}
    t0 = time.monotonic()
    r = kdsm_proc("stream", "--model", str(tiny_model_dir), env=env, timeout=60)
    took = time.monotonic() - t0
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and f"Kafka at {kafka_bootstrap} is unreachable" in lines[0] \
        and "security_protocol SSL, but" in lines[0] and "is the listener plain TCP?" in lines[0], lines
    assert took < 30, f"took {took:.0f} s with a 2 s connect timeout"
