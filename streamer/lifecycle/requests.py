"""Retrain requests: the Redis stream ``<prefix>retrain:requests`` that asks the watcher for a retrain.

``kdsm retrain --request`` (cron, an operator) appends one here, the drift
detector appends one per drift event, and ``kdsm retrain --watch``
(``streamer.lifecycle.retrain.watch``) consumes the stream with a consumer
group and runs one retrain per burst. Writing a request needs Redis only: this
module imports no model code, so the command answers in about a second.
"""

from __future__ import annotations

import socket
import time

from .control import expect_types
from .registry import ModelRegistry, RegistryError


def request_retrain(registry: ModelRegistry, reason: str = "manual", by: str | None = None) -> str:
    """Append a retrain request; returns its stream id. A request key of another Redis type is a ``RegistryError``."""
    with expect_types(registry.r, RegistryError, {registry.keys.requests: "stream"}):
        return registry.r.xadd(registry.keys.requests, {"reason": reason, "by": by or socket.gethostname(),
                                                       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                               maxlen=10000, approximate=True)
