"""What a k-NN third part would cost the scorer per row (issue 11, the twenty-fifth pass's candidate; diagnosis only).

Times the search the candidate would add to the hot path: batches of 2,000 standardised rows against a reference set
of 2,048 kept training rows, the 10th-nearest distance by torch (``cdist`` then ``topk``), one torch thread, the
median and best of 15 rounds after 3 warm-up rounds. Prints one line per feature count and writes them to OUT.

    python3 docs/results/part_choice/knn_cost.py OUT.txt
"""
import sys
import time
from pathlib import Path

import torch

BATCH, REFERENCE, K, ROUNDS = 2000, 2048, 10, 15


def per_row_us(d: int) -> tuple[float, float]:
    gen = torch.Generator().manual_seed(0)
    x, ref = torch.randn(BATCH, d, generator=gen), torch.randn(REFERENCE, d, generator=gen)

    return timed(lambda: torch.cdist(x, ref).topk(K, dim=1, largest=False).values[:, -1])


def timed(search, rows: int = BATCH, rounds: int = ROUNDS) -> tuple[float, float]:
    """Median and best microseconds a row of ``search()`` over ``rows`` rows, after 3 warm-up rounds."""
    for _ in range(3):
        search()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        search()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[rounds // 2] / rows * 1e6, times[0] / rows * 1e6


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} OUT.txt")
    torch.set_num_threads(1)
    lines = [f"{d} features: {m:.1f} us a row (median of {ROUNDS}), best {b:.1f} us; batch {BATCH}, reference {REFERENCE},"
             f" k {K}, one torch thread" for d in (6, 21) for m, b in [per_row_us(d)]]
    print("\n".join(lines))
    try:
        Path(sys.argv[1]).write_text("\n".join(lines) + "\n")
    except OSError as e:
        raise SystemExit(f"{sys.argv[0]}: cannot write {sys.argv[1]}: {e.strerror or e}") from None
