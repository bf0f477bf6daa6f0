"""Structured logs: one JSON object per line on stderr.

Log calls pass a dict (``log.info({"event": "batch", "n": 10})``); plain
strings become ``{"msg": ...}``.

>>> import logging
>>> rec = logging.LogRecord("kdsm", logging.INFO, __file__, 1, {"event": "x", "n": 1}, None, None)
>>> sorted(json.loads(JsonFormatter().format(rec)))
['event', 'level', 'logger', 'n', 'ts']
"""

from __future__ import annotations

import json
import logging
import sys
import time


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
                "level": record.levelname.lower(), "logger": record.name}
        if isinstance(record.msg, dict):
            base.update(record.msg)
        else:
            base["msg"] = record.getMessage()
        if record.exc_info:
            base["exc"] = self.formatException(record.exc_info)
        return json.dumps(base, default=str)


def setup_logging(level: str = "INFO", stream=None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("kdsm")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    # kafka-python logs each failed connection attempt (dozens while a broker is down); the streamer reports
    # what matters itself (kdsm events, one error line), so its library logs show only at DEBUG.
    lib = logging.getLogger("kafka")
    lib.handlers[:] = [handler]
    lib.setLevel(logging.DEBUG if level.upper() == "DEBUG" else logging.CRITICAL)
    lib.propagate = False
