"""The loop's own objects, without a broker: what building them does to the process and the pending batch's shape."""

import gc
import sys
import weakref
from concurrent.futures import Future

import pytest
import torch

from offline_train.config import load_settings
from streamer.config import Settings
from streamer.pipeline.app import Pending, StreamApp, latency_samples, settle_heap
from streamer.pipeline.provider import StaticModelProvider
from streamer.pipeline.scorer import Scorer


def test_building_a_scorer_or_an_app_leaves_torch_threads_alone(tiny_model_dir):
    before = torch.get_num_threads()
    other = 1 if before != 1 else 2
    s = load_settings(Settings, stream={"threads": other})
    Scorer(top_features=3)
    StreamApp(s, StaticModelProvider(str(tiny_model_dir), "cpu"))
    assert torch.get_num_threads() == before


def test_configure_process_applies_stream_threads():
    from streamer.service import configure_process

    before = torch.get_num_threads()
    other = 1 if before != 1 else 2
    try:
        configure_process(load_settings(Settings, stream={"threads": other}))
        assert torch.get_num_threads() == other
    finally:
        torch.set_num_threads(before)


def test_configure_process_sets_the_switch_interval():
    from streamer.service import configure_process

    before = sys.getswitchinterval()
    try:
        configure_process(load_settings(Settings, stream={"switch_interval_ms": 2.5}))
        assert sys.getswitchinterval() == pytest.approx(0.0025)
        configure_process(load_settings(Settings))
        assert sys.getswitchinterval() == pytest.approx(0.0005)  # the default, a tenth of Python's
    finally:
        sys.setswitchinterval(before)


def test_pending_batch_is_a_typed_record():
    fields = set(Pending.__dataclass_fields__)
    assert fields == {"records", "model", "thresholds", "decoded", "scores", "decode_s"}
    p = Pending(records=None, model=None, thresholds={"warning": 1.0}, decoded=None, scores=Future(), decode_s=0.0)
    assert p.thresholds["warning"] == 1.0



class _Cyclic:
    """Stands for a model that refers to itself (a torch module with hooks may): only the collector frees it."""

    def __init__(self):
        self.me = self


def test_taking_a_model_freezes_the_heap_and_the_next_one_lets_a_swapped_out_model_go(tiny_model_dir):
    app = StreamApp(load_settings(Settings), StaticModelProvider(str(tiny_model_dir), "cpu"))
    old = _Cyclic()
    gone = weakref.ref(old)
    try:
        gc.unfreeze()
        app._use_model(app.provider.current())  # the loop's first model
        assert gc.get_freeze_count() > 0  # what was alive then is out of the collector's sight
        del old
        gc.collect()
        assert gone() is not None  # frozen, a cycle is not collected: why settle_heap unfreezes first
        settle_heap()  # what _use_model does when a new version arrives
        assert gone() is None
    finally:
        gc.unfreeze()  # the rest of the test session keeps the collector as it found it


def test_every_batch_gives_the_e2e_histogram_min_of_its_size_and_32_samples_evenly_spaced():
    """Before the fix ``rb.timestamps_ms[::len // 32]`` gave 32 to 63 samples a batch (63 at 63 events)."""
    for n in (1, 2, 31, 32, 33, 63, 64, 95, 2000):
        rows = latency_samples(n)
        assert len(rows) == min(n, 32) and len(set(rows.tolist())) == len(rows)
        assert rows[0] == 0 and rows[-1] == n - 1
