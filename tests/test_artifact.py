"""Artifact round trip, tamper detection, schema checks, and loading onto CPU."""

import json
import os
import shutil

import numpy as np
import pytest
from conftest import make_blobs
from safetensors.torch import load_file, save_file

from offline_train.artifact import METADATA, WEIGHTS, ArtifactError, schema_hash
from offline_train.config import (
    CalibrationConfig,
    EMAConfig,
    ModelConfig,
    OptimConfig,
    RefineConfig,
    ScoreConfig,
    SigmaConfig,
)
from offline_train.detector import KDSM


def test_round_trip_gives_identical_scores(tiny_model_dir, tmp_path):
    X, out = make_blobs(n=200, n_out=10, seed=9)
    rows = np.vstack([X, out])
    a = KDSM.load(tiny_model_dir, device="cpu")
    again = a.save(tmp_path / "copy")
    b = KDSM.load(again, device="cpu")
    np.testing.assert_array_equal(a.decision_function(rows), b.decision_function(rows))
    assert a.version_ == b.version_ and a.schema_hash_ == b.schema_hash_
    assert a.thresholds_ == b.thresholds_
    np.testing.assert_array_equal(a.sigmas_, b.sigmas_)


def test_metadata_is_plain_json_with_everything_needed(tiny_model_dir):
    meta = json.loads((tiny_model_dir / METADATA).read_text())
    for key in ("version", "features", "schema_hash", "scaler", "sigmas", "thresholds", "quantiles",
                "train_summary", "checksum", "format"):
        assert key in meta
    assert meta["features"] == [f"f{j}" for j in range(6)]


def _every_section(**params) -> KDSM:
    """A small KDSM with every config section given, as a loaded one reports them (so get_params compare), and
    ``params`` over them."""
    sections = dict(sigma=SigmaConfig(), model=ModelConfig(width=16, depth=1), ema=EMAConfig(), refine=RefineConfig(),
                    score=ScoreConfig(), train=OptimConfig(steps=20, precision="fp32"), calibration=CalibrationConfig())
    return KDSM(**{**sections, **params})


def test_load_restores_every_parameter_so_a_clone_trains_the_same_model(tmp_path):
    """load dropped scale_discrete, max_train_rows and calibration.holdout (back to their defaults): get_params of a
    loaded model was wrong, and clone(KDSM.load(p)).fit(X) trained another model."""
    from sklearn.base import clone

    X = np.random.default_rng(0).normal(size=(300, 3))
    X[:, 2] = X[:, 2] > 0  # a binary column: scale_discrete decides whether it is standardised
    det = _every_section(calibration=CalibrationConfig(holdout=0.3), scale_discrete=True, max_train_rows=100).fit(X)
    loaded = KDSM.load(det.save(tmp_path / "m"))
    assert loaded.get_params() == det.get_params()
    np.testing.assert_allclose(clone(loaded).fit(X).decision_function(X), det.decision_function(X), rtol=1e-6)


def test_a_model_fitted_on_every_row_saves_and_loads(tmp_path):
    """KDSM(max_train_rows=None) (every row) fitted and saved, and load refused its artifact ("1 validation error for
    DataConfig max_train_rows"); it loads as None, and a clone trains the same model."""
    from sklearn.base import clone

    X = np.random.default_rng(1).normal(size=(200, 3))
    det = _every_section(refine=RefineConfig(enabled=False), max_train_rows=None).fit(X)
    loaded = KDSM.load(det.save(tmp_path / "m"))
    assert loaded.max_train_rows is None and loaded.get_params() == det.get_params()
    np.testing.assert_allclose(clone(loaded).fit(X).decision_function(X), det.decision_function(X), rtol=1e-6)


def test_an_artifact_without_the_estimator_parameters_loads_with_the_old_defaults(tiny_model_dir, tmp_path):
    from offline_train.artifact import _checksum

    m = _copy(tiny_model_dir, tmp_path)
    meta = json.loads((m / METADATA).read_text())
    meta.pop("estimator", None)
    meta["calibration"].pop("holdout", None)
    meta["checksum"] = _checksum(m / WEIGHTS, meta)
    (m / METADATA).write_text(json.dumps(meta))
    p = KDSM.load(m).get_params()
    assert (p["scale_discrete"], p["max_train_rows"], p["calibration"].holdout) == (False, 200_000, 0.2)


def _copy(src, tmp_path):
    dst = tmp_path / "m"
    shutil.copytree(src, dst)
    return dst


def test_tampered_weights_are_refused(tiny_model_dir, tmp_path):
    m = _copy(tiny_model_dir, tmp_path)
    t = load_file(str(m / WEIGHTS))
    t["net.head.2.bias"] = t["net.head.2.bias"] + 1.0
    save_file(t, str(m / WEIGHTS))
    with pytest.raises(ArtifactError, match="checksum"):
        KDSM.load(m)


def test_tampered_threshold_is_refused(tiny_model_dir, tmp_path):
    m = _copy(tiny_model_dir, tmp_path)
    meta = json.loads((m / METADATA).read_text())
    meta["thresholds"]["warning"] = 1e9
    (m / METADATA).write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="checksum"):
        KDSM.load(m)


def test_truncated_and_missing_files_are_clear_errors(tiny_model_dir, tmp_path):
    m = _copy(tiny_model_dir, tmp_path)
    (m / WEIGHTS).write_bytes((m / WEIGHTS).read_bytes()[:100])
    with pytest.raises(ArtifactError):
        KDSM.load(m)
    (m / METADATA).write_text("{not json")
    with pytest.raises(ArtifactError, match="JSON"):
        KDSM.load(m)
    with pytest.raises(ArtifactError, match="no model artifact"):
        KDSM.load(tmp_path / "nowhere")


def test_wrong_feature_count_is_refused(tiny_model_dir):
    det = KDSM.load(tiny_model_dir)
    with pytest.raises(ValueError, match="X has 5 features, but KDSM is expecting 6 features as input"):
        det.decision_function(np.zeros((2, 5)))


def test_no_pickle_on_the_load_path(tiny_model_dir, monkeypatch):
    import pickle

    def refuse(*a, **k):
        raise AssertionError("pickle used on the load path")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    assert KDSM.load(tiny_model_dir).n_features_in_ == 6


def test_save_refuses_to_replace_what_is_not_an_artifact(tiny_model_dir, tmp_path):
    det = KDSM.load(tiny_model_dir)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "keep.txt").write_text("precious")
    with pytest.raises(ArtifactError, match="not a model artifact"):
        det.save(notes)
    assert [p.name for p in notes.iterdir()] == ["keep.txt"] and (notes / "keep.txt").read_text() == "precious"
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ArtifactError, match="is a file"):
        det.save(a_file)
    assert a_file.read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "notes"]  # no temp directory left behind
    (tmp_path / "empty").mkdir()
    assert KDSM.load(det.save(tmp_path / "empty")).version_ == det.version_


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_a_saved_artifact_is_as_readable_as_a_directory_made_here(tiny_model_dir, tmp_path, umask):
    """The umask's mode, not mkdtemp's 0700 nor safetensors' 0600 for the weights: a streamer running as another
    user must be able to read the model."""
    old = os.umask(umask)
    try:
        (tmp_path / "plain").mkdir()
        (tmp_path / "plain.txt").write_text("")
        saved = KDSM.load(tiny_model_dir).save(tmp_path / "m")
    finally:
        os.umask(old)
    assert (saved.stat().st_mode & 0o777) == ((tmp_path / "plain").stat().st_mode & 0o777)
    for name in (WEIGHTS, METADATA):
        assert (saved / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


@pytest.mark.parametrize("exchange", [True, False], ids=["rename-exchange", "rename-aside"])
def test_save_over_an_artifact_deletes_the_old_one_only_once_the_new_one_is_in_place(tiny_model_dir, tmp_path,
                                                                                     monkeypatch, exchange):
    import offline_train.artifact as artifact

    det = KDSM.load(tiny_model_dir)
    target = det.save(tmp_path / "m")
    (target / "report").mkdir()
    (target / "report" / "report.json").write_text("{}")
    det.version_ = "the-new-one"
    swaps = []
    real_exchange, real_rmtree = getattr(artifact, "_exchange", None), shutil.rmtree
    monkeypatch.setattr(artifact, "_exchange", lambda a, b: swaps.append(exchange) or (exchange and real_exchange(a, b)),
                        raising=False)
    at_delete = []

    def rmtree(p, *a, **k):
        at_delete.append(json.loads((target / METADATA).read_text())["version"])
        return real_rmtree(p, *a, **k)

    monkeypatch.setattr(artifact.shutil, "rmtree", rmtree)
    det.save(target)
    assert at_delete == ["the-new-one"]  # one deletion, of the old directory, once the new one is in place
    assert swaps == [exchange]
    assert KDSM.load(target).version_ == "the-new-one" and not (target / "report").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def _resigned(src, dst, meta_edit=None, weights_edit=None):
    """A copy of the artifact at ``src`` with its metadata and/or weights edited, its checksum recomputed."""
    from offline_train.artifact import read_artifact, write_artifact

    tensors, meta = read_artifact(src)
    for edit, obj in ((meta_edit, meta), (weights_edit, tensors)):
        if edit:
            edit(obj)
    return write_artifact(dst, tensors, {k: v for k, v in meta.items() if k not in ("checksum", "format")})


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def edit(obj):
        for k in keys[:-1]:
            obj = obj[k]
        obj[keys[-1]] = value(obj[keys[-1]]) if callable(value) else value

    return edit


SHAPE_TAMPERING = {  # name: (metadata edit, weights edit, what the refusal says)
    "scaler mean of 1 feature": (_set("scaler", "mean_", [0.0]), None, "mean_ has shape"),
    "scaler std of 0": (_set("scaler", "std_", lambda v: [0.0] * len(v)), None, "std_ must be finite and above 0"),
    "scaler std infinite": (_set("scaler", "std_", lambda v: [float("inf")] * len(v)), None, "std_ must be finite"),
    "scaler discrete_ too long": (_set("scaler", "discrete_", lambda v: [*v, False]), None, "discrete_ has shape"),
    "scaler constant_ too short": (_set("scaler", "constant_", lambda v: v[:-1]), None, "constant_ has shape"),
    "kappas of 1 feature": (_set("kappas", [3.0]), None, "kappas of shape"),
    "sigmas of 0": (_set("sigmas", lambda v: [0.0] * len(v)), None, "sigmas must be finite and above 0"),
    "forest feature past d": (None, _set("forest.feature", lambda t: t.clone().fill_(99)), "feature outside 0..5"),
    "forest feature negative": (None, _set("forest.feature", lambda t: t.clone().fill_(-1)), "feature outside 0..5"),
    "k-NN reference of 5 features": (_set("knn", "d", 5), _set("knn.reference", lambda t: t[:, :5].contiguous()),
                                     "reference rows of 5 features for 6"),
    "calibration reversed": (None, _set("calibration_scores", lambda t: t.flip(0)), "sorted ascending"),
    "calibration NaN": (None, _set("calibration_scores", lambda t: t * float("nan")), "must be finite"),
    "calibration 2-D": (None, _set("calibration_scores", lambda t: t.reshape(1, -1)), "1-D"),
    "calibration empty": (_set("calibration", "n", 0), _set("calibration_scores", lambda t: t[:0]), "non-empty"),
    "calibration count": (_set("calibration", "n", 3), None, "the metadata says 3"),
    "network NaN": (None, _set("net.head.2.bias", lambda t: t * float("nan")), "non-finite network weights"),
    "blend spread of 0": (_set("blend", "forest_std", 0.0), None, "forest_std must be finite, spreads above 0"),
    "blend mean NaN": (_set("blend", "network_mean", float("nan")), None, "network_mean must be finite"),
    # Each of these loaded (checksum recomputed) and failed or misbehaved only when scoring:
    "thresholds empty": (_set("thresholds", {}), None, "the names must match"),
    "thresholds of other names": (_set("thresholds", lambda v: {"bogus": 1.0, "critical": v["critical"]}), None,
                                  "the names must match"),
    "thresholds out of order": (_set("thresholds", lambda v: {"warning": v["critical"] + 1, "critical": v["critical"]}),
                                None, "not ordered like their quantiles"),
    "thresholds negative": (_set("thresholds", lambda v: {"warning": -1e9, "critical": v["critical"]}), None,
                            "must be finite numbers >= 0"),
    "feature named twice": (lambda m: m.update(features=[m["features"][0], *m["features"][:-1]],
                                               schema_hash=schema_hash([m["features"][0], *m["features"][:-1]])),
                            None, "feature names must be unique"),
    "kappas NaN": (_set("kappas", lambda v: [float("nan")] * len(v)), None, "kappas must be finite"),
    "scaler discrete_ not true/false": (_set("scaler", "discrete_", lambda v: ["x"] * len(v)), None,
                                        "discrete_ must be a list of true/false"),
}


@pytest.mark.parametrize("case", SHAPE_TAMPERING, ids=str)
def test_metadata_and_weights_of_the_wrong_shape_are_refused_on_load(tiny_model_dir, tmp_path, case):
    meta_edit, weights_edit, says = SHAPE_TAMPERING[case]
    m = _resigned(tiny_model_dir, tmp_path / "m", meta_edit, weights_edit)  # checksum valid: only the checks catch it
    with pytest.raises(ArtifactError, match=says):
        KDSM.load(m, device="cpu")


def _write_metadata(content):
    def corrupt(m):
        if content == "a directory":
            (m / METADATA).unlink()
            (m / METADATA).mkdir()
        else:
            (m / METADATA).write_bytes(content)

    return corrupt


CORRUPT_METADATA = {  # name: (how the copy is spoilt, what the refusal says)
    "not UTF-8": (_write_metadata(b'{"a": "\xff"}'), "not valid JSON"),
    "a directory": (_write_metadata("a directory"), "cannot be read"),
    "nested 100000 deep": (_write_metadata(b"[" * 100_000 + b"]" * 100_000), "nested too deeply"),
    "d = Infinity": (lambda m: _resigned(m, m, _set("model_config", "d", float("inf"))), "do not fit together"),
    "forest levels = Infinity": (lambda m: _resigned(m, m, _set("forest", "levels", float("inf"))), "do not fit together"),
    "thresholds a list": (lambda m: _resigned(m, m, _set("thresholds", [1.0])), "do not fit together"),
}


@pytest.mark.parametrize("case", CORRUPT_METADATA, ids=str)
def test_corrupt_metadata_is_an_artifact_error_and_one_line_from_kdsm_score(tiny_model_dir, tmp_path, capsys, case):
    from offline_train.data import write_parquet
    from streamer.ops.cli import main

    spoil, says = CORRUPT_METADATA[case]
    m = _copy(tiny_model_dir, tmp_path)
    spoil(m)
    with pytest.raises(ArtifactError, match=says):
        KDSM.load(m, device="cpu")
    data = tmp_path / "rows.parquet"
    write_parquet(data, make_blobs(n=20, n_out=0, seed=1)[0], [f"f{j}" for j in range(6)])
    assert main(["score", "--model", str(m), "--data", str(data), "--out", str(tmp_path / "scored.parquet")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and says in err
    assert not (tmp_path / "scored.parquet").exists()
