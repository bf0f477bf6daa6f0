"""The sigma passes as mergeable accumulators, and the engines that run them (local, Dask on 2 worker processes).

Exactness is asserted bit for bit (``np.array_equal``) against the in-process
fit of the whole matrix, and against sorting each column (the reference
code's rank trim) to 1e-12, on heavy ties, constant, binary and spike
columns, one extreme value, and rows with NaN.
"""

import contextlib
import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_sigmas import _sorted_rank_trim_kappa

from offline_train.config import CalibrationConfig, ModelConfig, OptimConfig, RefineConfig
from offline_train.data import ParquetSource
from offline_train.detector import KDSM
from offline_train.engine import DaskEngine, LocalEngine
from offline_train.scaler import ColumnMoments, Scaler
from offline_train.sigma_passes import MAX_WINDOW_VALUES, CutValuesPass
from offline_train.sigmas import KurtosisSigmas
from streamer.ops.cli import main

N = 30_011


def hard_columns(rng, n=N) -> np.ndarray:
    """Columns that break a careless distributed quantile: ties at both cuts, few values, spikes, an outlier."""
    return np.column_stack([
        rng.laplace(size=n),
        rng.poisson(3.0, n),  # heavy ties at both cuts
        rng.integers(0, 2, n),  # binary
        np.full(n, 7.0),  # constant
        np.where(rng.random(n) < 0.985, 0.0, rng.integers(1, 17, n)),  # spike: kept values all 0
        np.concatenate([np.zeros(n * 3 // 10), rng.normal(5, 1, n - n * 3 // 10)]),  # 30% tied at the minimum
        np.append(rng.normal(size=n - 1), 1e12),  # one value squeezes the rest into one fine bin
        np.round(rng.lognormal(size=n), 1),
        rng.normal(1e6, 1e-3, n),  # large mean, tiny spread
    ]).astype(float)


def split_reduce(X: np.ndarray, rng, pieces: int = 9):
    """A reduce that runs a fresh accumulator per random piece of the rows and merges them in random order."""
    cuts = np.sort(rng.choice(np.arange(1, len(X)), pieces - 1, replace=False))
    parts = np.split(X, cuts)

    def reduce(template):
        import copy

        accs = [copy.deepcopy(template).update(p) for p in parts]
        total = accs.pop(rng.integers(len(accs)))
        for i in rng.permutation(len(accs)):
            total = total.merge(accs[i])
        return total

    return reduce


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(13)


def test_moments_merge_bit_for_bit_in_any_split_and_order(rng):
    X = hard_columns(rng)
    whole = Scaler.fit(X)
    merged = Scaler.from_moments(split_reduce(X, rng, 23)(ColumnMoments.empty(X.shape[1])))
    assert np.array_equal(merged.mean_, whole.mean_) and np.array_equal(merged.std_, whole.std_)
    # and the exact mean is the correctly rounded one (numpy's pairwise sum may be off by an ulp)
    from fractions import Fraction
    col = X[:, 8]
    assert whole.mean_[8] == float(sum(Fraction(v) for v in col.tolist()) / len(col))


@pytest.mark.parametrize("trim", [0.0, 0.02, 0.1])
def test_sigma_passes_merge_exactly_to_the_in_process_fit(rng, trim):
    X = hard_columns(rng)
    scaler = Scaler.fit(X)
    whole = KurtosisSigmas(trim=trim).fit(X, scaler)
    merged = KurtosisSigmas(trim=trim).fit_with(split_reduce(X, rng), scaler)
    assert np.array_equal(merged.kappas_, whole.kappas_) and np.array_equal(merged.sigmas_, whole.sigmas_)
    Z = scaler.transform(X)
    for j in (0, 1, 5, 6, 7, 8):  # the rule done by sorting each column
        assert merged.kappas_[j] == pytest.approx(_sorted_rank_trim_kappa(Z[:, j], trim), rel=1e-12, abs=1e-12)
    assert merged.kappas_[2] == merged.kappas_[3] == 1.8  # binary, constant
    assert merged.kappas_[4] == 1000.0 if trim else True  # spike column


def test_windows_stay_small_and_narrow_until_they_settle(rng):
    """An extreme value puts every other row in one fine bin: the cut search narrows instead of holding them."""
    x = np.append(rng.normal(size=N - 1), 1e12)[:, None]
    scaler = Scaler.fit(x)
    rounds, largest = [], [0]

    def reduce(acc):
        acc.update(x)
        if isinstance(acc, CutValuesPass):
            rounds.append(acc)
            largest[0] = max([largest[0]] + [len(w.values) for pair in acc.windows for w in pair or () if not w.overflowed])
        return acc

    est = KurtosisSigmas().fit_with(reduce, scaler)
    assert len(rounds) >= 3  # whole range, one fine bin, a narrower window
    assert largest[0] <= MAX_WINDOW_VALUES
    assert est.kappas_[0] == pytest.approx(_sorted_rank_trim_kappa(scaler.transform(x)[:, 0]), rel=1e-12)


@pytest.fixture(scope="module")
def parquet_with_holes(tmp_path_factory, rng):
    """Two files, many row groups, rows with NaN/inf/null: (path, the raw matrix)."""
    X = hard_columns(rng, 40_000)
    X[rng.random(len(X)) < 0.02, 1] = np.nan
    X[rng.random(len(X)) < 0.005, 6] = np.inf
    d = tmp_path_factory.mktemp("engine")
    half = len(X) // 2
    for i, part in enumerate((X[:half], X[half:])):
        cols = {f"f{j}": pa.array(part[:, j]) for j in range(X.shape[1])}
        pq.write_table(pa.table(cols), d / f"part-{i}.parquet", row_group_size=3_000)
    return d, X


@pytest.fixture(scope="module")
def dask_engine():
    engine = DaskEngine(workers=2, partition_rows=7_000)  # a local cluster of 2 worker processes
    yield engine
    engine.close()


def in_memory_fit(X: np.ndarray, keep: np.ndarray):
    rows = X[np.isfinite(X).all(axis=1) & keep]
    scaler = Scaler.fit(rows)
    return scaler, KurtosisSigmas().fit(rows, scaler)


def test_dask_engine_on_two_workers_equals_the_in_process_fit(parquet_with_holes, dask_engine):
    path, X = parquet_with_holes
    assert dask_engine.workers == 2
    source = ParquetSource(path, batch_rows=4_096)
    assert len(source.partitions(7_000)) >= 6

    def keep_rows(offset, n):  # rows kept by their index in the whole dataset, as the calibration holdout is
        return (np.arange(offset, offset + n) % 5) != 0

    results = {}
    for engine in (LocalEngine(), dask_engine):
        moments = engine.reduce(source, ColumnMoments.empty(X.shape[1]), keep_rows)
        scaler = Scaler.from_moments(moments)
        sig = KurtosisSigmas().fit_with(lambda acc, e=engine: e.reduce(source, acc, keep_rows), scaler)
        results[engine.name] = (scaler, sig, source.rows_read, source.rows_skipped)
    scaler, sig = in_memory_fit(X, np.arange(len(X)) % 5 != 0)
    skipped = int((~np.isfinite(X).all(axis=1)).sum())
    for name, (s, k, read, skip) in results.items():
        assert np.array_equal(s.mean_, scaler.mean_) and np.array_equal(s.std_, scaler.std_), name
        assert np.array_equal(k.kappas_, sig.kappas_) and np.array_equal(k.sigmas_, sig.sigmas_), name
        assert (read, skip) == (len(X), skipped), name


def test_dask_engine_caps_its_tasks_with_bigger_partitions(parquet_with_holes, dask_engine, monkeypatch):
    import offline_train.engine as engine_module

    path, X = parquet_with_holes
    source = ParquetSource(path, batch_rows=4_096)
    monkeypatch.setattr(engine_module, "TASKS_PER_WORKER", 1)  # at most 2 tasks on 2 workers
    sizes = []
    real = source.partitions
    monkeypatch.setattr(source, "partitions", lambda rows: sizes.append(len(real(rows))) or real(rows))
    moments = dask_engine.reduce(source, ColumnMoments.empty(X.shape[1]))
    assert sizes[0] > 2 and sizes[-1] == 2
    scaler = Scaler.from_moments(moments)
    whole, _ = in_memory_fit(X, np.ones(len(X), bool))
    assert np.array_equal(scaler.mean_, whole.mean_) and np.array_equal(scaler.std_, whole.std_)


def test_training_on_either_engine_gives_the_same_statistics(parquet_with_holes, dask_engine):
    path, X = parquet_with_holes
    fits = {}
    for engine in (LocalEngine(), dask_engine):
        det = KDSM(model=ModelConfig(width=16, depth=1), train=OptimConfig(steps=3, precision="fp32"),
                   refine=RefineConfig(enabled=False), calibration=CalibrationConfig(holdout=0.2),
                   max_train_rows=5_000)
        fits[engine.name] = det.fit_source(ParquetSource(path, max_skipped_fraction=0.25), engine=engine)
    a, b = fits["local"], fits["dask"]
    assert np.array_equal(a.scaler_.mean_, b.scaler_.mean_) and np.array_equal(a.sigmas_, b.sigmas_)
    assert a.data_summary_ == b.data_summary_
    assert a.data_summary_["train_rows"] == 5_000  # training still samples data.max_train_rows
    # the holdout is keyed by the stored row index: the same rows as an in-memory split of the raw matrix
    holdout = a._holdout_mask_fn()(0, len(X))
    scaler, sig = in_memory_fit(X, ~holdout)
    assert np.array_equal(a.scaler_.std_, scaler.std_) and np.array_equal(a.kappas_, sig.kappas_)


def _kdsm(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "streamer", *args], capture_output=True, text=True, timeout=timeout)


def test_kdsm_train_engine_dask_end_to_end(parquet_with_holes, tmp_path):
    """The local cluster's job writes nothing on stderr, even with port 8787 (Dask's dashboard port) taken."""
    path, _ = parquet_with_holes
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("model:\n  width: 16\n  depth: 1\ntrain:\n  steps: 5\nrefine:\n  enabled: false\n")
    with contextlib.ExitStack() as stack:
        try:  # another Dask dashboard on this host
            stack.enter_context(socket.create_server(("0.0.0.0", 8787)))
        except OSError:
            pass  # taken by someone else already: the same situation
        r = _kdsm("train", "--data", str(path), "--out", str(tmp_path / "m"), "--config", str(cfg), "--quiet",
                  "--engine", "dask")
    assert r.returncode == 0, r.stderr
    assert "engine: dask, 2 worker(s)" in r.stdout and r.stderr == "", r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["rows_read"] == 40_000
    local = _kdsm("train", "--data", str(path), "--out", str(tmp_path / "l"), "--config", str(cfg), "--quiet")
    assert local.returncode == 0, local.stderr
    meta = [json.loads((tmp_path / m / "metadata.json").read_text()) for m in ("m", "l")]
    assert meta[0]["sigmas"] == meta[1]["sigmas"] and meta[0]["scaler"] == meta[1]["scaler"]


def test_two_jobs_share_one_scheduler(parquet_with_holes, dask_engine, tmp_path):
    """The README's recipe for a model per tenant: concurrent `kdsm train` jobs, one Dask scheduler."""
    path, _ = parquet_with_holes
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("model:\n  width: 16\n  depth: 1\ntrain:\n  steps: 5\nrefine:\n  enabled: false\n")
    address = dask_engine.client.scheduler.address
    jobs = [subprocess.Popen([sys.executable, "-m", "streamer", "train", "--data", str(path / f"part-{i}.parquet"),
                              "--out", str(tmp_path / f"tenant-{i}"), "--config", str(cfg), "--quiet",
                              "--engine", "dask", "--scheduler", address],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    for job in jobs:
        out, err = job.communicate(timeout=300)
        assert job.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1])["rows_read"] == 20_000
    a, b = (json.loads((tmp_path / f"tenant-{i}" / "metadata.json").read_text()) for i in (0, 1))
    assert a["scaler"] != b["scaler"]  # each job its own data


def test_unreachable_scheduler_is_one_line(parquet_with_holes, tmp_path, capsys):
    path, _ = parquet_with_holes
    code = main(["train", "--data", str(path), "--out", str(tmp_path / "m"), "--engine", "dask",
                 "--scheduler", "tcp://127.0.0.1:9", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in err


def test_bad_input_on_the_dask_engine_is_one_line(tmp_path, dask_engine, capsys, monkeypatch):
    # (a string column is a categorical feature since the feature spec, issue 14: a list column is what none can read)
    pq.write_table(pa.table({"f0": [[1], [2]], "f1": [1.0, 2.0]}), tmp_path / "text.parquet")
    address = dask_engine.client.scheduler.address
    cases = [(["--data", str(tmp_path / "missing.parquet")], "no such file or directory"),
             (["--data", str(tmp_path / "text.parquet"), "--features", "f0", "f1"], "type no spec can read: f0")]
    for args, expected in cases:
        code = main(["train", *args, "--out", str(tmp_path / "m"), "--engine", "dask", "--scheduler", address, "--quiet"])
        err = capsys.readouterr().err
        assert code == 2 and expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bench_sigmas_prints_and_writes_its_figures(tmp_path):
    from offline_train.sigma_bench import run

    lines = []
    result = run(sizes=(20_000, 40_000), features=4, workers=2, partition_rows=8_192, batch_rows=4_096,
                 data_dir=tmp_path / "data", out=tmp_path / "bench.json", log=lines.append)
    written = json.loads((tmp_path / "bench.json").read_text())
    assert written["identical"] == {"20000": True, "40000": True} == result["identical"]
    runs = {(r["rows"], r["engine"]): r for r in written["runs"]}
    assert set(runs) == {(20_000, "local"), (20_000, "dask"), (40_000, "local"), (40_000, "dask")}
    for r in runs.values():
        assert r["sigma_rows_per_s"] > 0 and r["peak_rss_mib"] > 0 and r["sigma_passes"] >= 4
    assert len(runs[40_000, "dask"]["peak_rss_mib_workers"]) == 2
    assert any("engines agree bit for bit: True" in line for line in lines)


@pytest.mark.parametrize("argv", [["--rows", "-5"], ["--rows", "0"], ["--workers", "x"], ["--features", "0"]])
def test_bench_sigmas_refuses_counts_below_one_in_one_line(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "sigmas", *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "expected a positive integer" in err and "Traceback" not in err


@pytest.mark.integration
def test_retrain_runs_its_statistics_on_the_configured_engine(tmp_path, redis_url, unique, tiny_model_dir, dask_engine):
    from test_retrain import overrides, shifted, write_archive

    from offline_train.config import load_settings
    from streamer.config import Settings
    from streamer.lifecycle.registry import ModelRegistry
    from streamer.lifecycle.retrain import run_retrain

    def settings(scheduler):
        return load_settings(Settings, None, **overrides(tmp_path, redis_url, unique),
                             data={"engine": "dask", "scheduler": scheduler})

    s = settings("tcp://127.0.0.1:9")
    reg = ModelRegistry.from_settings(s)
    v0 = reg.add(tiny_model_dir)
    reg.promote(v0)
    write_archive(Path(s.archive.dir), shifted(2000, 1))
    res = run_retrain(s, reg, reason="test")  # nothing listens there: the current model stays
    assert res.status == "failed" and "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in res.reason
    assert reg.pointers()["current"] == v0
    res = run_retrain(settings(dask_engine.client.scheduler.address), reg, reason="test")
    assert res.status == "promoted", res.reason
    new = KDSM.load(reg.store.local_path(res.version), device="cpu")
    # the same window on the local engine: the same statistics, bit for bit
    files = reg.get(res.version)["data_window"]["files"]
    local = KDSM.from_settings(s).set_params(train=OptimConfig(steps=5, seed=0, precision="fp32")).fit_source(
        ParquetSource(files, features=new.feature_names_, label_column=None), engine=LocalEngine())
    assert np.array_equal(new.sigmas_, local.sigmas_) and np.array_equal(new.scaler_.std_, local.scaler_.std_)
