"""What CPython's collector costs kdsm bench stream's two stages (diagnosis; docs/streaming.md, "The collector").

One local Tansu, one topic of 200,000 6-feature events, three rounds of consume-only then end to end
(``--scorer none``'s loop), as ``kdsm bench stream`` runs them. A ``gc.callbacks`` hook counts the collections of
each generation during each end-to-end run and adds up their seconds. With ``--freeze`` the heap is settled
(``streamer.pipeline.app.settle_heap``: collect, then ``gc.freeze``) before the rounds, as the bench and the
streamer now do; without it, not (the streamer as it was). Run from the repository root:

    python3 docs/results/stream-gc/gc_pauses.py            # the collector as it was
    python3 docs/results/stream-gc/gc_pauses.py --freeze   # the heap settled

Without ``--freeze`` the streamer's own settling is switched off (the streamer as it was); with it, the full
collection of that settling (when each end-to-end run takes its model, before its first commit) is left out of the
counts, so they show the collections the loop meets.
"""
import gc
import sys
import time
from collections import Counter

from backlog import EVENTS, backlog, settings, start_broker  # this folder's shared setup

from streamer.dev.bench_fixtures import consume_only
from streamer.dev.bench_stream import _end_to_end
from streamer.pipeline import app as app_module
from streamer.pipeline.scorer import ConstantScorer


def main() -> None:
    freeze = "--freeze" in sys.argv[1:]
    s = settings()
    broker = start_broker(s)
    count, seconds, started = Counter(), Counter(), [0.0]

    def hook(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            count[info["generation"]] += 1
            seconds[info["generation"]] += time.perf_counter() - started[0]

    settle = app_module.settle_heap

    def settle_unseen():  # the settling's own full collection (when the app takes its model) is not counted
        gc.callbacks.remove(hook)
        try:
            settle()
        finally:
            gc.callbacks.append(hook)

    # The streamer as it was settles nothing; settled, its own settling (before its first commit) goes uncounted.
    app_module.settle_heap = settle_unseen if freeze else (lambda: None)
    try:
        model, topic = backlog(s, "gc")
        if freeze:
            settle()
        print(f"heap {'settled (collect, gc.freeze)' if freeze else 'as it was'}; {len(gc.get_objects()):,} tracked "
              f"objects, {gc.get_freeze_count():,} frozen")
        gc.callbacks.append(hook)
        for r in range(3):
            c = consume_only(s.kafka, topic, EVENTS, s.stream.max_batch)
            count.clear()
            seconds.clear()
            e, _ = _end_to_end(s, model, topic, f"gc-e2e-{r}-{time.time_ns()}", EVENTS, ConstantScorer(0.01, 5))
            per_gen = ", ".join(f"gen {g}: {count[g]} in {seconds[g] * 1000:.1f} ms" for g in sorted(count))
            print(f"round {r + 1}: consume-only {c:,.0f} msg/s, end to end {e:,.0f} events/s, ratio {e / c:.2f}; "
                  f"collections during the end-to-end run: {per_gen}")
    finally:
        gc.callbacks.remove(hook) if hook in gc.callbacks else None
        broker.stop()


if __name__ == "__main__":
    main()
