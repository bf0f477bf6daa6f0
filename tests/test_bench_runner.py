"""The benchmark runner and ``kdsm bench adbench`` end to end (tiny models, small data)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import make_blobs

from offline_train.config import TrainSettings
from offline_train.evaluation.runner import BenchSpec, read_rows, run_bench
from streamer.ops.cli import main

# Two ADBench datasets and the paper's semi-supervised tables, copied from ../shared so the
# test needs nothing outside the checkout (CI runs in a fresh clone anywhere).
ADBENCH = Path(__file__).resolve().parent / "data" / "adbench"
TINY = {"KDSM_TRAIN__STEPS": "40", "KDSM_MODEL__WIDTH": "32", "KDSM_MODEL__DEPTH": "1", "KDSM_TRAIN__THREADS": "1"}


def write_blobs(folder: Path, name: str, seed: int) -> Path:
    inl, out = make_blobs(n=400, d=5, n_out=25, seed=seed)
    X = np.vstack([inl, out])
    y = np.r_[np.zeros(len(inl), int), np.ones(len(out), int)]
    path = folder / f"{name}.npz"
    np.savez(path, X=X, y=y)
    return path


@pytest.fixture
def data_dir(tmp_path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    write_blobs(d, "1_blobs", 0)
    write_blobs(d, "2_other", 1)
    (d / "3_broken.npz").write_bytes(b"not an npz")
    return d


def test_resume_skips_finished_runs_and_records_failures(data_dir, tmp_path):
    spec = BenchSpec(data_dir, tmp_path / "out", methods=("knn", "ecod"), split="clean", seeds=(0, 1))
    rows = run_bench(spec, TrainSettings(), progress=False)
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(ok) == 2 * 2 * 2  # 2 good datasets x 2 seeds x 2 methods
    assert len(failed) == 2 * 2 and all(r["dataset"] == "3_broken" and "npz" in r["error"] for r in failed)
    assert all(float(r["aucroc"]) > 0.9 for r in ok)  # planted outliers are easy
    before = {(r["dataset"], r["seed"], r["method"]): r["fit_s"] for r in read_rows(spec.csv_path) if r["status"] == "ok"}

    # Same spec plus a method: only the new method's runs (and the retried failures) run.
    spec.methods = ("knn", "ecod", "iforest")
    rows2 = run_bench(spec, TrainSettings(), progress=False)
    csv_rows = read_rows(spec.csv_path)
    ok2 = [r for r in csv_rows if r["status"] == "ok"]
    assert len(ok2) == 2 * 2 * 3
    assert sum(r["status"] == "failed" for r in csv_rows) == 2 * 3  # old failure rows replaced, not duplicated
    again = {(r["dataset"], r["seed"], r["method"]): r["fit_s"] for r in ok2 if r["method"] != "iforest"}
    assert again == before  # finished runs were not repeated (their timings would differ)
    assert len(rows2) == len(csv_rows)


def test_config_id_covers_refine_and_score_so_a_changed_setting_reruns(data_dir, tmp_path):
    from offline_train.evaluation.runner import config_id

    base = TrainSettings()
    ids = {config_id(base.model_copy(update={section: getattr(base, section).model_copy(update=change)}))
           for section, change in [("refine", {"rounds": 1}), ("refine", {"enabled": False}),
                                   ("score", {"knn": False}), ("score", {"forest_metric": "depth"})]}
    assert len(ids) == 4 and config_id(base) not in ids
    # Neither the seed nor calibration (the bench calibrates in-sample) changes a score.
    assert config_id(base.model_copy(update={"calibration": base.calibration.model_copy(update={"holdout": 0.5})})) \
        == config_id(base) == config_id(base.model_copy(update={"train": base.train.model_copy(update={"seed": 3})}))

    # A CSV row of another config (an old id) is kept but not resumed: the run is done again.
    spec = BenchSpec(data_dir, tmp_path / "out", datasets=["blobs"], methods=("knn",), split="clean")
    run_bench(spec, TrainSettings(), progress=False)
    csv_rows = read_rows(spec.csv_path)
    for r in csv_rows:
        r["config"] = "5193e5cf"
    spec.csv_path.write_text(",".join(csv_rows[0]) + "\n" + "".join(",".join(r.values()) + "\n" for r in csv_rows))
    rows = run_bench(spec, TrainSettings(), progress=False)
    assert [r["config"] for r in rows] == [config_id(TrainSettings())]
    assert [r["config"] for r in read_rows(spec.csv_path)] == ["5193e5cf", config_id(TrainSettings())]


def test_identical_split_for_every_method(data_dir, tmp_path):
    spec = BenchSpec(data_dir, tmp_path / "out", datasets=["blobs"], methods=("knn", "lof", "ecod"), split="paper")
    rows = run_bench(spec, TrainSettings(), progress=False)
    sizes = {(r["n_train"], r["n_test"], r["n_test_anomalies"]) for r in rows}
    assert len(rows) == 3 and len(sizes) == 1


def test_wider_baselines_run_only_when_named_and_find_planted_outliers(data_dir, tmp_path):
    from offline_train.evaluation.cli import DEFAULT_METHODS
    from offline_train.evaluation.methods import EXTRA_BASELINES

    assert not set(EXTRA_BASELINES) & {m for v in DEFAULT_METHODS.values() for m in v.split(",")}
    spec = BenchSpec(data_dir, tmp_path / "out", datasets=["blobs"], methods=EXTRA_BASELINES, split="clean")
    rows = run_bench(spec, TrainSettings(), progress=False)
    assert sorted(r["method"] for r in rows) == sorted(EXTRA_BASELINES)
    assert all(r["status"] == "ok" and float(r["aucroc"]) > 0.9 for r in rows), rows


def test_pca_baseline_scores_collinear_columns_finitely():
    # PyOD's PCA at its defaults divides by a zero-variance component here: every score infinite.
    from offline_train.evaluation.methods import fit_score
    from offline_train.scaler import Scaler

    X = np.random.default_rng(0).normal(size=(300, 4))
    X = np.c_[X, X[:, 0] + X[:, 1]]
    X[:10] += 6
    r = fit_score("pca", X, X, Scaler.fit(X), TrainSettings(), seed=0)
    assert np.isfinite(r.scores).all() and r.scores[:10].min() > np.median(r.scores[10:])


def test_cli_end_to_end_on_real_datasets(tmp_path, monkeypatch, capsys):
    if not (ADBENCH / "14_glass.npz").exists():
        pytest.fail(f"ADBench data missing at {ADBENCH}")
    for k, v in TINY.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "bench"
    argv = ["bench", "adbench", "--data-dir", str(ADBENCH), "--datasets", "glass,45_wine", "--methods", "kdsm,dsm,knn", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "Mean over datasets" in printed and "| kdsm | 2 |" in printed
    rows = read_rows(out / "results.csv")
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows)
    assert {r["steps"] for r in rows if r["method"] in ("kdsm", "dsm")} == {"40"}
    report = (out / "report.md").read_text()
    # The paper's glass figure for K-DSM (semi AUC-PR 0.780) sits beside ours.
    assert "| glass |" in report and "0.780" in report
    assert (out / "aucpr.png").stat().st_size > 10_000
    info = json.loads((out / "run.json").read_text())
    assert info[-1]["env"]["KDSM_TRAIN__STEPS"] == "40" and info[-1]["wall_seconds"] > 0

    # Re-running resumes: nothing left to do, the CSV is unchanged.
    before = (out / "results.csv").read_text()
    assert main(argv) == 0
    assert (out / "results.csv").read_text() == before


def test_run_json_records_every_setting_the_config_id_hashes(data_dir, tmp_path, monkeypatch, capsys):
    """run.json's settings left out refine and score, which config_id hashes, and calibration: the resolved settings
    as the bench applies them (calibration in-sample, holdout 0, whatever the config says)."""
    from offline_train.evaluation.runner import config_id

    monkeypatch.setenv("KDSM_REFINE__ROUNDS", "3")
    monkeypatch.setenv("KDSM_SCORE__KNN_K", "7")
    monkeypatch.setenv("KDSM_CALIBRATION__HOLDOUT", "0.3")
    out = tmp_path / "o"
    assert main(["bench", "adbench", "--data-dir", str(data_dir), "--datasets", "1_blobs", "--methods", "knn",
                 "--out", str(out)]) == 0
    info = json.loads((out / "run.json").read_text())[-1]
    settings = info["settings"]
    assert {"sigma", "model", "ema", "refine", "score", "train", "data", "calibration"} <= set(settings)
    assert settings["refine"]["rounds"] == 3 and settings["score"]["knn_k"] == 7
    assert settings["calibration"]["holdout"] == 0.0
    s = TrainSettings()
    s.refine.rounds, s.score.knn_k = 3, 7
    assert info["config"] == config_id(s)


def test_second_run_into_the_same_folder_is_refused_in_one_line(data_dir, tmp_path, capsys):
    """Two processes in one --out would rewrite each other's results.csv (rows lost): the second is refused."""
    import fcntl

    out = tmp_path / "o"
    out.mkdir()
    with open(out / ".lock", "w") as held:  # another process's run, as the kernel sees it (flock is per open file)
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code = main(["bench", "adbench", "--data-dir", str(data_dir), "--methods", "knn", "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and "another kdsm bench adbench is writing to" in err and "Traceback" not in err
        assert not (out / "results.csv").exists()
    rows = run_bench(BenchSpec(data_dir, out, methods=("knn",)), TrainSettings(), progress=False)
    assert {r["dataset"] for r in rows if r["status"] == "ok"} == {"1_blobs", "2_other"}  # free again once released


def test_unusable_files_fail_their_rows_and_bad_options_are_one_line(data_dir, tmp_path, capsys):
    np.savez(data_dir / "4_flat.npz", X=np.zeros(50), y=np.zeros(50, int))  # X is 1-D (an IndexError killed the grid)
    np.savez(data_dir / "5_short_y.npz", X=np.zeros((100, 2)), y=np.zeros(50, int))  # was scored on 50 rows, "ok"
    (data_dir / "6_bad_zip.npz").write_bytes(b"PK\x03\x04" + b"\x00" * 40)  # zipfile.BadZipFile killed the grid
    X, y = np.random.default_rng(0).normal(size=(100, 2)), np.r_[np.zeros(90, int), np.ones(10, int)]
    X[7, 0] = np.inf
    np.savez(data_dir / "7_inf.npz", X=X, y=y)  # the scaler's OverflowError killed the grid (no report, no rows)
    np.savez(data_dir / "8_soft_y.npz", X=np.ones((100, 1)), y=np.r_[np.zeros(90), np.full(10, 0.7)])  # cast to 0: "ok"
    rows = run_bench(BenchSpec(data_dir, tmp_path / "o", methods=("knn",)), TrainSettings(), progress=False)
    failed = {r["dataset"]: r["error"] for r in rows if r["status"] == "failed"}
    assert set(failed) == {"3_broken", "4_flat", "5_short_y", "6_bad_zip", "7_inf", "8_soft_y"}
    assert "(50,)" in failed["4_flat"] and "(100, 2)" in failed["5_short_y"]
    assert "X[7, 0] = inf" in failed["7_inf"] and "y[90] = 0.7" in failed["8_soft_y"]
    assert {r["dataset"] for r in rows if r["status"] == "ok"} == {"1_blobs", "2_other"}

    def bench(*args) -> str:
        assert main(["bench", "adbench", "--data-dir", str(data_dir), *args]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        return err

    (tmp_path / "a_file").write_text("")
    assert "is a file" in bench("--methods", "knn", "--out", str(tmp_path / "a_file"))
    assert "names no method" in bench("--methods", ",", "--out", str(tmp_path / "o2"))


def test_a_bench_where_every_run_failed_exits_1(tmp_path, capsys):
    """Every run failed (exit 0 before, as if the bench had run): exit 1 and a line saying so; the failures are
    still rows of results.csv, and one run that succeeded keeps exit 0."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "1_broken.npz").write_bytes(b"not an npz")
    argv = ["bench", "adbench", "--data-dir", str(data), "--methods", "knn", "--out", str(tmp_path / "o")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "no run succeeded (1 failed)" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert [r["status"] for r in read_rows(tmp_path / "o" / "results.csv")] == ["failed"]
    write_blobs(data, "2_blobs", 0)
    assert main(argv) == 0


def test_cli_rejects_unknown_method(tmp_path, capsys):
    assert main(["bench", "adbench", "--data-dir", str(tmp_path), "--methods", "kdsm,nope", "--out", str(tmp_path / "o")]) == 2
    assert "nope" in capsys.readouterr().err


def test_default_method_is_kdsm_train_default_and_compare_reads_the_csv(tmp_path, monkeypatch, capsys):
    """``default`` is what ``kdsm train`` ships (refinement on); ``kdsm bench compare`` puts it beside the others."""
    for k, v in TINY.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "bench"
    argv = ["bench", "adbench", "--data-dir", str(ADBENCH), "--datasets", "glass,45_wine", "--setting", "unsup",
            "--methods", "default,kdsm-ema,iforest", "--out", str(out)]
    assert main(argv) == 0
    rows = read_rows(out / "results.csv")
    kept = {r["method"]: r["kept_fraction"] for r in rows if r["dataset"] == "14_glass"}
    assert 0.5 <= float(kept["default"]) < 1 and kept["kdsm-ema"] == ""  # the published method trains on every row
    capsys.readouterr()
    table = tmp_path / "compare.md"
    assert main(["bench", "compare", str(out / "results.csv"), "--setting", "unsup", "--out", str(table)]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[2].startswith("| default |") and "of 2 |" in printed
    assert table.read_text().endswith(printed)
    # An ablation: the same CSV under a label stands beside the original as its own method.
    assert main(["bench", "compare", str(out / "results.csv"), f"{out / 'results.csv'}=variant", "--setting", "unsup",
                 "--focus", "variant"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("| variant |") and any(line.startswith("| default |") for line in lines)
    assert main(["bench", "compare", str(tmp_path / "missing.csv"), "--setting", "unsup"]) == 2
    assert "no such results file" in capsys.readouterr().err


def test_parallel_jobs_give_the_rows_of_one_job_and_fail_the_broken_file(data_dir, tmp_path, monkeypatch):
    """``--jobs 2``: the same rows, figure for figure, as one run at a time (one torch thread each, seeded)."""
    for k, v in TINY.items():
        monkeypatch.setenv(k, v)
    settings = TrainSettings()
    figures = ("n_train", "n_test", "aucpr", "aucroc", "f1", "steps", "status")
    rows = {}
    for jobs in (1, 2):
        spec = BenchSpec(data_dir, tmp_path / f"jobs{jobs}", methods=("default", "iforest"), setting="unsup", seeds=(0, 1))
        got = run_bench(spec, settings, progress=False, jobs=jobs)
        rows[jobs] = {(r["dataset"], r["seed"], r["method"]): tuple(r.get(k) for k in figures) for r in got}
        assert len(read_rows(spec.csv_path)) == 3 * 2 * 2  # every run written once, by this process
    assert rows[2] == rows[1]
    assert sum(v[-1] == "failed" for v in rows[2].values()) == 2 * 2  # 3_broken, both seeds, both methods
    assert all(float(v[3]) > 0.8 for k, v in rows[2].items() if k[0] != "3_broken")


def test_jobs_below_one_is_refused_in_one_line(data_dir, tmp_path, capsys):
    code = main(["bench", "adbench", "--data-dir", str(data_dir), "--methods", "knn", "--jobs", "0", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "--jobs must be at least 1" in err and "Traceback" not in err


def _group(pgid: int, marker: str) -> list[int]:
    """Live processes of process group ``pgid`` whose command line holds ``marker`` (from /proc: no procps)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid and marker in open(f"/proc/{entry}/cmdline").read():
                    found.append(int(entry))
            except (ProcessLookupError, FileNotFoundError, PermissionError):
                pass
    return found


def _bench_two_workers(tmp_path) -> subprocess.Popen:
    """``kdsm bench adbench --jobs 2`` with long runs (both workers mid-run at a signal), in its own process group,
    with SIGINT at its default as an interactive shell leaves it."""
    env = {**os.environ, **TINY, "KDSM_TRAIN__STEPS": "20000"}
    cmd = [sys.executable, "-m", "streamer.ops.cli", "bench", "adbench", "--data-dir", str(ADBENCH), "--methods",
           "default,kdsm", "--jobs", "2", "--out", str(tmp_path / "o")]
    return subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_ctrl_c_stops_every_worker_at_once_in_one_line(tmp_path):
    """Ctrl-C (SIGINT to the foreground group: the bench and its workers) ends ``--jobs 2`` within seconds,
    exit 130, no traceback, no worker left running."""
    p = _bench_two_workers(tmp_path)
    try:
        deadline = time.monotonic() + 60  # spawned, imported, their initializer run (SIGINT ignored), then training
        while time.monotonic() < deadline:
            workers = _group(p.pid, "spawn_main")
            if len(workers) == 2 and all(_ignores_sigint(pid) for pid in workers):
                break
            time.sleep(0.1)
        time.sleep(1.0)
        assert len(_group(p.pid, "spawn_main")) == 2, "both workers should be running"
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
        assert time.monotonic() - t0 < 10
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    # Exactly one line: no traceback, and no "leaked semaphore" warning from multiprocessing's resource tracker (the
    # workers' tqdm lock was a named semaphore that a terminated worker never unlinked).
    assert p.returncode == 130 and err == "kdsm bench: interrupted\n", err
    time.sleep(0.5)
    assert not _group(p.pid, "spawn_main"), "workers left running"


def _sigint_state(pid: int) -> str:
    """How process ``pid`` takes SIGINT: "blocked", "ignored", "caught" or "default" (from /proc/PID/status)."""
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
    for state, key in (("blocked", "SigBlk"), ("ignored", "SigIgn"), ("caught", "SigCgt")):
        if int(fields[key].strip(), 16) >> (signal.SIGINT - 1) & 1:
            return state
    return "default"


def _ignores_sigint(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGINT (the SigIgn bit, whatever its mask says)."""
    try:
        fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
    except FileNotFoundError:
        return False
    return bool(int(fields["SigIgn"].strip(), 16) >> (signal.SIGINT - 1) & 1)


def test_ctrl_c_while_the_workers_still_import_is_one_line_too(tmp_path):
    """From the moment they exist, the workers never take Ctrl-C themselves (it is blocked while they import, ignored
    once their initializer has run), so Ctrl-C at that moment ends the bench in one line. Before, a worker caught it
    while importing and printed a KeyboardInterrupt traceback (in about half of the runs)."""
    p = _bench_two_workers(tmp_path)
    states = set()
    try:
        deadline = time.monotonic() + 60
        while len(workers := _group(p.pid, "spawn_main")) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        watch_until = time.monotonic() + 3  # the workers' imports (several seconds here) and their initializer
        while time.monotonic() < watch_until:
            for pid in workers:
                try:
                    states.add(_sigint_state(pid))
                except FileNotFoundError:
                    pass
            time.sleep(0.02)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert states and states <= {"blocked", "ignored"}, states
    assert p.returncode == 130 and err == "kdsm bench: interrupted\n", err
    time.sleep(0.5)
    assert not _group(p.pid, "spawn_main"), "workers left running"


def test_run_json_counts_the_workers_cpu(tmp_path, monkeypatch, capsys):
    """With ``--jobs 2`` the runs' CPU is spent in the workers: run.json's cpu_seconds must include it."""
    for k, v in {**TINY, "KDSM_TRAIN__STEPS": "1500"}.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "o"
    argv = ["bench", "adbench", "--data-dir", str(ADBENCH), "--methods", "kdsm,dsm", "--jobs", "2", "--out", str(out)]
    assert main(argv) == 0
    rows = read_rows(out / "results.csv")
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    info = json.loads((out / "run.json").read_text())[-1]
    assert info["jobs"] == 2 and info["cpu_seconds"] >= sum(float(r["fit_cpu_s"]) for r in rows) > 0


def test_cli_config_file_sets_the_default_method(tmp_path, monkeypatch):
    """``--config``: the default method trains under the file's settings (env still overrides them)."""
    for k, v in TINY.items():
        if k != "KDSM_TRAIN__STEPS":
            monkeypatch.setenv(k, v)
    cfg = tmp_path / "core.yaml"
    cfg.write_text("refine:\n  rounds: 0\ntrain:\n  steps: 30\n")
    out = tmp_path / "bench"
    argv = ["bench", "adbench", "--config", str(cfg), "--data-dir", str(ADBENCH), "--datasets", "45_wine",
            "--methods", "default", "--setting", "unsup", "--out", str(out)]
    assert main(argv) == 0
    rows = read_rows(out / "results.csv")
    assert [(r["method"], r["status"], r["steps"]) for r in rows] == [("default", "ok", "30")]
