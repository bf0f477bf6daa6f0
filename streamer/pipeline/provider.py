"""Model providers: where the streamer gets the model that scores the next batch.

The consumer loop calls ``provider.current()`` between batches, never in the
middle of one, so every alert carries the version that scored it. A provider
may return a different ``KDSM`` from one call to the next (a registry-backed
provider hot-swaps versions this way); ``StaticModelProvider`` always returns
the one artifact it loaded.

>>> from offline_train.detector import KDSM
>>> hasattr(StaticModelProvider, "current")
True
"""

from __future__ import annotations

from pathlib import Path

from offline_train import storage
from offline_train.detector import KDSM


class StaticModelProvider:
    """Loads one artifact once (verified by ``KDSM.load``), a local directory or an ``s3://`` one, and serves it for
    the whole run."""

    def __init__(self, path: str | Path, device: str = "auto"):
        self.path = storage.as_location(path)
        self.model = KDSM.load(self.path, device=device)

    def current(self) -> KDSM:
        return self.model
