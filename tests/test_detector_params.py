"""``KDSM``'s own parameters (``scale_discrete``, ``max_train_rows``) are checked when ``fit`` or ``fit_source``
starts, as ``DataConfig`` checks ``data.scale_discrete`` and ``data.max_train_rows``.

Before, ``max_train_rows=-5`` trained silently on an odd subset and saved a model ``KDSM.load`` refused, 0 failed in a
numpy reduction, 1 in the k-NN part, 2.5 with a TypeError, and ``scale_discrete="no"`` counted as True.
"""

import numpy as np
import pytest
from sklearn.base import clone

from offline_train.config import ModelConfig, OptimConfig
from offline_train.data import ParquetSource, write_parquet
from offline_train.detector import KDSM


def tiny(**kw) -> KDSM:
    return KDSM(model=ModelConfig(width=8, depth=1), train=OptimConfig(steps=5, precision="fp32", threads=1), **kw)


def rows(n: int = 60, d: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d))


BAD = {  # name: (parameters, the parameter the refusal names)
    "max_train_rows -5": ({"max_train_rows": -5}, "max_train_rows"),
    "max_train_rows 0": ({"max_train_rows": 0}, "max_train_rows"),
    "max_train_rows 1": ({"max_train_rows": 1}, "max_train_rows"),
    "max_train_rows 2.5": ({"max_train_rows": 2.5}, "max_train_rows"),
    "max_train_rows 100.0": ({"max_train_rows": 100.0}, "max_train_rows"),
    "max_train_rows '100'": ({"max_train_rows": "100"}, "max_train_rows"),
    "max_train_rows True": ({"max_train_rows": True}, "max_train_rows"),
    "scale_discrete 'no'": ({"scale_discrete": "no"}, "scale_discrete"),
    "scale_discrete 1": ({"scale_discrete": 1}, "scale_discrete"),
    "scale_discrete None": ({"scale_discrete": None}, "scale_discrete"),
}


@pytest.mark.parametrize("case", BAD, ids=str)
def test_a_bad_parameter_is_a_value_error_naming_it_at_fit(case):
    params, name = BAD[case]
    det = tiny(**params)
    assert det.get_params()[name] == params[name]  # __init__ only stores it (the estimator contract)
    with pytest.raises(ValueError, match=f"KDSM parameter {name} must be ") as refused:
        det.fit(rows())
    assert repr(params[name]) in str(refused.value)
    assert not hasattr(det, "net_")  # refused before any training


@pytest.mark.parametrize("case", ["max_train_rows -5", "max_train_rows 2.5", "scale_discrete 'no'"], ids=str)
def test_a_bad_parameter_is_refused_by_fit_source_too(case, tmp_path):
    params, name = BAD[case]
    path = write_parquet(tmp_path / "rows.parquet", rows(), ["a", "b", "c"])
    with pytest.raises(ValueError, match=f"KDSM parameter {name} must be "):
        tiny(**params).fit_source(ParquetSource(path))


def test_a_refused_refit_keeps_the_model_it_had():
    det = tiny().fit(rows())
    before = det.decision_function(rows(5, seed=1))
    with pytest.raises(ValueError, match="max_train_rows"):
        det.set_params(max_train_rows=0).fit(rows(seed=2))
    np.testing.assert_array_equal(det.decision_function(rows(5, seed=1)), before)


@pytest.mark.parametrize("params", [{"max_train_rows": None}, {"max_train_rows": 2},
                                    {"max_train_rows": np.int64(40), "scale_discrete": np.bool_(True)},
                                    {"scale_discrete": True}], ids=str)
def test_good_parameters_fit_save_and_load(params, tmp_path):
    det = tiny(**params).fit(rows())
    loaded = KDSM.load(det.save(tmp_path / "m"), device="cpu")
    want = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in params.items()}
    assert {k: loaded.get_params()[k] for k in params} == want
    np.testing.assert_array_equal(loaded.decision_function(rows(5, seed=1)), det.decision_function(rows(5, seed=1)))
    clone(loaded).fit(rows())  # the loaded parameters are good ones too


# ``fit_source`` on a file too small for calibration's hold-out: as ``fit``, it trains and calibrates on every usable
# row. Before, ``kdsm train`` refused a 2- or 3-row file that ``KDSM.fit`` trained on ("1 of 3 read (0 with missing or
# non-finite features, 2 held out for calibration)"). Rows 0 and 1 fall in the hold-out at the default seed.


@pytest.mark.parametrize("n", [2, 3])
def test_fit_source_on_too_few_rows_for_a_hold_out_calibrates_on_the_training_rows_as_fit_does(n, tmp_path):
    X = rows(n)
    source = ParquetSource(write_parquet(tmp_path / "rows.parquet", X, ["a", "b", "c"]))
    det = tiny().fit_source(source)
    assert det.calibration_source_ == tiny().fit(X).calibration_source_ == "train"
    assert det.data_summary_ == {"rows_read": n, "rows_skipped": 0, "train_rows": n, "calibration_rows": 0}
    assert len(det.calibration_.scores) == n
    loaded = KDSM.load(det.save(tmp_path / "m"), device="cpu")
    assert loaded.calibration_source_ == "train" and np.isfinite(loaded.decision_function(X)).all()


def test_fit_source_still_refuses_fewer_than_2_usable_rows(tmp_path):
    from offline_train.data import DataError

    X = rows(4)
    X[1:, 0] = np.nan  # one usable row
    source = ParquetSource(write_parquet(tmp_path / "rows.parquet", X, ["a", "b", "c"]))
    with pytest.raises(DataError, match=r"0 of 4 read \(3 with missing or non-finite features, 1 held out for "
                                        r"calibration\); at least 2 are needed"):
        tiny().fit_source(source)


def test_fit_source_with_2_usable_rows_among_skipped_ones_trains_on_them(tmp_path):
    X = rows(5)
    X[[2, 3, 4], 1] = np.inf  # rows 0 and 1 are usable, and both fall in the hold-out
    det = tiny().fit_source(ParquetSource(write_parquet(tmp_path / "rows.parquet", X, ["a", "b", "c"])))
    assert det.calibration_source_ == "train"
    assert det.data_summary_ == {"rows_read": 5, "rows_skipped": 3, "train_rows": 2, "calibration_rows": 0}


def test_kdsm_train_takes_a_3_row_file(tmp_path, capsys):
    from streamer.ops.cli import main

    data = write_parquet(tmp_path / "n3.parquet", rows(3), ["a", "b", "c"])
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("model:\n  width: 8\n  depth: 1\ntrain:\n  steps: 5\n  threads: 1\n")
    out = tmp_path / "model"
    assert main(["train", "--quiet", "--data", str(data), "--out", str(out), "--config", str(cfg)]) == 0, \
        capsys.readouterr().err
    assert KDSM.load(out, device="cpu").calibration_source_ == "train"
