"""``KDSM`` honours the scikit-learn / PyOD estimator contract.

The applicable scikit-learn checks run on a tiny network. Not applicable:
the checks that want ``predict`` to return -1/+1 (``check_outliers_*``: KDSM
follows PyOD, 1 = outlier) and pickling (the artifact is the persistence
format; nothing is unpickled on a load path). ``check_n_features_in_after_fitting``
calls ``estimator.score`` where there is one, and KDSM's ``score`` is a parameter
(the score section), not a method: the test below checks the same in its words.
"""

import json
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils import estimator_checks as checks

from offline_train.config import ModelConfig, OptimConfig
from offline_train.detector import KDSM


def tiny(**kw) -> KDSM:
    return KDSM(model=ModelConfig(width=16, depth=1), train=OptimConfig(steps=10, precision="fp32"), **kw)


APPLICABLE = [
    checks.check_no_attributes_set_in_init,
    checks.check_parameters_default_constructible,
    checks.check_get_params_invariance,
    checks.check_set_params,
    checks.check_estimator_cloneable,
    checks.check_do_not_raise_errors_in_init_or_set_params,
    checks.check_dont_overwrite_parameters,
    checks.check_estimators_overwrite_params,
    checks.check_fit2d_predict1d,
    checks.check_estimators_nan_inf,
    checks.check_estimators_empty_data_messages,
    checks.check_dict_unchanged,
    checks.check_fit_idempotent,
    checks.check_n_features_in,
    checks.check_estimators_unfitted,
    checks.check_complex_data,
    checks.check_fit2d_1sample,
    checks.check_estimator_sparse_tag,
    checks.check_estimator_sparse_array,
    checks.check_estimator_sparse_matrix,
]


@pytest.mark.parametrize("check", APPLICABLE, ids=lambda c: c.__name__)
def test_sklearn_check(check):
    check("KDSM", tiny())


def test_complex_and_sparse_rows_are_refused_when_scoring_too():
    """Complex rows were scored on their real part (a ComplexWarning at most), sparse ones failed in numpy."""
    from scipy import sparse

    X = np.random.default_rng(0).normal(size=(60, 3))
    det = tiny().fit(X)
    for method in (det.decision_function, det.predict, det.score_parts, det.explain):
        with pytest.raises(ValueError, match="Complex data not supported"):
            method(X[:2] + 1j)
        with pytest.raises(TypeError, match="sparse"):
            method(sparse.csr_matrix(X[:2]))
    with pytest.raises(ValueError, match="X has 2 features, but KDSM is expecting 3 features as input"):
        det.explain(X[:2, :2])
    np.testing.assert_array_equal(det.decision_function(X.tolist()), det.decision_function(X))


def test_a_row_of_another_width_is_refused_in_scikit_learns_words():
    """What check_n_features_in_after_fitting checks (it cannot run: it calls the ``score`` parameter as a method)."""
    X = np.random.default_rng(0).normal(size=(15, 4))
    det = tiny().fit(X)
    assert det.n_features_in_ == 4
    for method in (det.predict, det.decision_function, det.score_parts, det.explain):
        with pytest.raises(ValueError, match=r"X has 1 features, but \w+ is expecting 4 features as input"):
            method(X[:, [1]])


def test_init_only_stores_and_clone_keeps_params():
    det = tiny(max_train_rows=500)
    assert det.ema is None and det.sigma is None  # defaults resolve in fit, not in __init__
    twin = clone(det)
    assert twin.get_params()["max_train_rows"] == 500 and twin.model == det.model
    assert not hasattr(twin, "net_")


def test_fit_predict_scores_and_labels_match_pyod():
    X = np.random.default_rng(0).normal(size=(300, 3))
    det = tiny()
    labels = det.fit_predict(X)
    assert det.decision_scores_.shape == (300,) and labels.shape == (300,)
    np.testing.assert_array_equal(labels, (det.decision_scores_ >= det.threshold_).astype(int))
    np.testing.assert_allclose(det.decision_scores_, det.decision_function(X), rtol=1e-6)


def test_works_in_a_pipeline():
    X = np.random.default_rng(1).normal(size=(200, 3))
    pipe = make_pipeline(FunctionTransformer(np.abs), tiny()).fit(X)
    assert pipe.decision_function(X[:5]).shape == (5,)


def test_rows_without_columns_are_refused_before_any_part_is_built():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns on a zero-width layer: nothing may be built first
        with pytest.raises(ValueError, match="0 feature\\(s\\) \\(shape=\\(12, 0\\)\\)"):
            tiny().fit(np.zeros((12, 0)))


@pytest.mark.parametrize("names", [["a", "b"], ["a", "b", "c", "d"]])
def test_feature_names_of_the_wrong_count_are_a_value_error_naming_both(names):
    """A torch shape error from deep in training before."""
    with pytest.raises(ValueError, match=f"{len(names)} feature name\\(s\\) for the 3 column\\(s\\) of X"):
        tiny().fit(np.random.default_rng(0).normal(size=(40, 3)), feature_names=names)


def test_feature_names_given_twice_are_a_value_error_not_a_model_that_will_not_load():
    """fit trained and saved such a model, and its load refused it (feature names must be unique)."""
    with pytest.raises(ValueError, match="feature\\(s\\) named twice: a"):
        tiny().fit(np.random.default_rng(0).normal(size=(40, 3)), feature_names=["a", "b", "a"])


def test_fit_trains_on_a_seeded_sample_of_max_train_rows_as_fit_source_does():
    """fit ignored max_train_rows (only fit_source sampled). Data within the cap trains exactly as before."""
    from offline_train.config import CalibrationConfig

    X = np.random.default_rng(0).normal(size=(120, 3))
    cal = CalibrationConfig(holdout=0.0)
    capped = tiny(max_train_rows=50, calibration=cal).fit(X)
    assert len(capped.calibration_.scores) == 50 and capped.train_summary_.epochs == 10 * 128 / 50
    assert len(capped.decision_scores_) == 120  # PyOD's training scores: every row given
    np.testing.assert_array_equal(tiny(max_train_rows=120, calibration=cal).fit(X).decision_scores_,
                                  tiny(calibration=cal).fit(X).decision_scores_)


def test_every_method_of_an_unfitted_detector_raises_not_fitted(tmp_path):
    det, X = tiny(), np.zeros((3, 2))
    calls = {
        "decision_function": lambda: det.decision_function(X), "predict": lambda: det.predict(X),
        "score_parts": lambda: det.score_parts(X), "score_outputs": lambda: det.score_outputs(X),
        "standardise": lambda: det.standardise(X), "explain": lambda: det.explain(X),
        "explain with outputs": lambda: det.explain(X, outputs=np.zeros((3, 2))),
        "p_values": lambda: det.p_values(np.zeros(3)), "severity": lambda: det.severity(np.zeros(3)),
        "thresholds_": lambda: det.thresholds_, "threshold_": lambda: det.threshold_,
        "schema_hash_": lambda: det.schema_hash_, "save": lambda: det.save(tmp_path / "m"),
    }
    for name, call in calls.items():
        with pytest.raises(NotFittedError, match="not fitted yet"):
            call()
        assert not (tmp_path / "m").exists(), name
    assert det.severity(np.array([0.0, 2.0]), {"warning": 1.0}).tolist() == ["", "warning"]  # needs no fitted state


def test_a_refit_forgets_what_the_last_fit_or_load_learned(tmp_path):
    from offline_train.artifact import METADATA
    from offline_train.data import ParquetSource, write_parquet

    rng = np.random.default_rng(2)
    det = tiny().fit_source(ParquetSource(write_parquet(tmp_path / "d.parquet", rng.normal(size=(300, 3)),
                                                        ["a", "b", "c"])))
    assert det.data_summary_["rows_read"] == 300
    det.fit(rng.normal(size=(200, 2)))  # from rows in memory: no Parquet summary
    assert not hasattr(det, "data_summary_")
    saved = det.save(tmp_path / "m")
    assert json.loads((saved / METADATA).read_text())["data_summary"] is None
    loaded = KDSM.load(saved)
    assert hasattr(loaded, "metadata_")
    loaded.fit(rng.normal(size=(200, 4)))
    assert not hasattr(loaded, "metadata_") and loaded.feature_names_ == ["f0", "f1", "f2", "f3"]
