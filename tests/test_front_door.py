"""The front door as a new user meets it: fast help, --version, pipes, and one-line errors instead of tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
