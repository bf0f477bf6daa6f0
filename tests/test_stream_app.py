"""The loop's own objects, without a broker: what building them does to the process and the pending batch's shape."""

import gc
import logging
import sys
import weakref
from concurrent.futures import Future

import pytest
import torch

from offline_train.config import load_settings
from streamer.config import Settings
from streamer.pipeline.app import Pending, StreamApp, latency_samples, settle_heap
from streamer.pipeline.metrics import MetricsServer
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


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.events = []

    def emit(self, record):
        self.events.append(record.msg)


class _FullDisk:
    def on_committed(self, batch):
        pass

    def close(self):
        raise OSError(28, "No space left on device")


class _Sink:
    closed = False

    def on_committed(self, batch):
        pass

    def close(self):
        self.closed = True


@pytest.mark.parametrize("loop_raises", [False, True], ids=["loop-returns", "loop-raises"])
def test_a_part_that_fails_to_close_masks_neither_the_outcome_nor_the_other_closes(tiny_model_dir, monkeypatch,
                                                                                  loop_raises):
    """A sink whose close raised (an archive on a full disk) replaced the run's outcome with its OSError: run_stream
    raised it instead of returning the counts (or over the loop's own error), the next sink was never closed and the
    metrics server never stopped. Each part is closed on its own now; a failure is logged (close_failed)."""
    from streamer.dev.local_services import free_port
    from streamer.service import run_stream

    def run(self, max_events=None):
        if loop_raises:
            raise RuntimeError("the loop's own error")
        return {"events": 0}

    monkeypatch.setattr(StreamApp, "run", run)  # the loop itself is the integration tests'
    s = load_settings(Settings, metrics={"port": 0}, redis={"url": f"redis://127.0.0.1:{free_port()}/0"})
    records, log = _Records(), logging.getLogger("kdsm")
    log.addHandler(records)
    stopped = []
    real_stop = MetricsServer.stop
    monkeypatch.setattr(MetricsServer, "stop", lambda self: (stopped.append(self), real_stop(self)))
    after = _Sink()
    try:
        if loop_raises:
            with pytest.raises(RuntimeError, match="the loop's own error"):
                run_stream(s, provider=StaticModelProvider(str(tiny_model_dir), "cpu"), sinks=[_FullDisk(), after])
        else:
            assert run_stream(s, provider=StaticModelProvider(str(tiny_model_dir), "cpu"),
                              sinks=[_FullDisk(), after]) == {"events": 0}
    finally:
        log.removeHandler(records)
    assert after.closed and len(stopped) == 1
    failed = [e for e in records.events if isinstance(e, dict) and e.get("event") == "close_failed"]
    assert len(failed) == 1 and failed[0]["part"] == "_FullDisk" and "No space left" in failed[0]["error"], failed
