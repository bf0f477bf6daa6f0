"""An artifact's metadata sizes (forest trees/levels, k-NN rows, network width/depth) are checked against its weights
before anything of that size is built.

The checksum is a plain SHA-256 anyone can recompute, so these tests re-sign the edited metadata as
``offline_train.artifact`` verifies it: only the size checks stand between the edit and the allocation. Before they
existed, ``forest.levels`` 22 built 8 GB of zeros (25 s) before ``load_state_dict`` refused the artifact, and a little
more killed the process. The guards below fail a test at once wherever a part is built at a tampered size, so a
regression fails fast instead of allocating.
"""

import inspect
import json
import shutil

import numpy as np
import pytest
from conftest import make_blobs

from offline_train.artifact import METADATA, WEIGHTS, ArtifactError, _checksum
from offline_train.config import ModelConfig, OptimConfig
from offline_train.detector import KDSM
from offline_train.isolation import IsolationScorer
from offline_train.model import ScoreNet
from offline_train.neighbours import NeighbourScorer


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """A small artifact with every part (network, forest, k-NN reference), trained in a second or two."""
    X, _ = make_blobs(n=300, seed=1)
    det = KDSM(model=ModelConfig(width=16, depth=2), train=OptimConfig(steps=30, seed=0, threads=1)).fit(X)
    return det.save(tmp_path_factory.mktemp("model") / "small")


def _resigned(src, dst, section: str, key: str, value):
    """A copy of the artifact at ``src`` with ``metadata.json``'s ``section.key`` set to ``value`` and the checksum
    recomputed the way ``read_artifact`` verifies it."""
    shutil.copytree(src, dst)
    meta = json.loads((dst / METADATA).read_text())
    if section:
        meta[section][key] = value
    meta["checksum"] = _checksum(dst / WEIGHTS, meta)
    (dst / METADATA).write_text(json.dumps(meta))
    return dst


@pytest.fixture
def no_oversize_parts(small_model, monkeypatch):
    """Fail (AssertionError, which ``KDSM.load`` does not turn into an ArtifactError) wherever a forest, a k-NN
    reference or a network is built larger than the real artifact's."""
    meta = json.loads((small_model / METADATA).read_text())
    limits = {IsolationScorer: {"trees": meta["forest"]["trees"], "levels": meta["forest"]["levels"]},
              NeighbourScorer: {"rows": meta["knn"]["rows"]},
              ScoreNet: {"width": meta["model_config"]["width"], "depth": meta["model_config"]["depth"]}}
    for cls, bounds in limits.items():
        init = cls.__init__
        signature = inspect.signature(init)

        def guarded(self, *args, _init=init, _signature=signature, _bounds=bounds, _cls=cls, **kwargs):
            bound = _signature.bind(self, *args, **kwargs).arguments
            for name, limit in _bounds.items():
                assert bound[name] <= limit, f"{_cls.__name__} built with {name}={bound[name]} from tampered metadata"
            _init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", guarded)
    return meta


def test_a_re_signed_copy_without_edits_loads(small_model, tmp_path, no_oversize_parts):
    """The re-signing and the guards leave a good artifact loading and scoring as before."""
    m = _resigned(small_model, tmp_path / "m", None, None, None)
    rows = np.vstack(make_blobs(n=50, n_out=5, seed=3))
    a, b = KDSM.load(small_model, device="cpu"), KDSM.load(m, device="cpu")
    np.testing.assert_array_equal(a.decision_function(rows), b.decision_function(rows))


TAMPERED = {  # name: (section, key, value or function of the real one, the field the refusal names)
    "forest levels 22 (8 GB before)": ("forest", "levels", 22, "forest.levels"),
    "forest levels one more": ("forest", "levels", lambda v: v + 1, "forest.levels"),
    "forest levels 10**6": ("forest", "levels", 10**6, "forest.levels"),
    "forest levels a string": ("forest", "levels", lambda v: str(v), "forest.levels"),
    "forest trees 10**6": ("forest", "trees", 10**6, "forest.trees"),
    "k-NN rows 10**7": ("knn", "rows", 10**7, "knn.rows"),
    "network width 4096": ("model_config", "width", 4096, "model_config.width"),
    "network depth 100": ("model_config", "depth", 100, "model_config.depth"),
    "network depth one less": ("model_config", "depth", lambda v: v - 1, "model_config.depth"),
}


@pytest.mark.parametrize("case", TAMPERED, ids=str)
def test_metadata_sizes_that_disagree_with_the_weights_are_refused_before_building(small_model, tmp_path,
                                                                                   no_oversize_parts, case):
    section, key, value, field = TAMPERED[case]
    real = no_oversize_parts[section][key]
    value = value(real) if callable(value) else value
    m = _resigned(small_model, tmp_path / "m", section, key, value)
    with pytest.raises(ArtifactError) as refused:
        KDSM.load(m, device="cpu")
    message = str(refused.value)
    assert message.startswith(f"{m}: artifact metadata and weights do not fit together: ")
    assert field in message and "\n" not in message, message  # one line naming the field


def test_the_parts_check_their_sizes_before_building(no_oversize_parts, small_model):
    """``from_state`` itself, as the registry's load path calls it through ``KDSM.load``: the forest's and the k-NN
    part's sizes against their tensors."""
    from offline_train.artifact import read_artifact

    tensors, meta = read_artifact(small_model)
    forest = {k[7:]: v for k, v in tensors.items() if k.startswith("forest.")}
    with pytest.raises(RuntimeError, match=r"forest\.levels = 30 give forest\.feature the shape"):
        IsolationScorer.from_state(forest, {**meta["forest"], "levels": 30})
    with pytest.raises(ValueError, match=r"forest\.levels = 33 is outside 0\.\.32"):
        IsolationScorer.from_state(forest, {**meta["forest"], "levels": 33})
    knn = {k[4:]: v for k, v in tensors.items() if k.startswith("knn.")}
    with pytest.raises(RuntimeError, match=r"knn\.rows = 100000 and knn\.d = 6 give knn\.reference the shape"):
        NeighbourScorer.from_state(knn, {**meta["knn"], "rows": 100_000})
    with pytest.raises(RuntimeError, match=r"the weights hold no knn\.reference_sq"):
        NeighbourScorer.from_state({"reference": knn["reference"]}, meta["knn"])
