"""The A/B harness of 2026-11-30 (run at c2555db, before ``stream.switch_interval_ms`` existed).

Sets the interpreter's switch interval, then runs the ``kdsm`` command line:

    KDSM_STREAM__THREADS=1 python sw.py 0.0005 bench stream --out OUT.json

Since 845226d ``kdsm bench stream`` sets the interval itself from ``stream.switch_interval_ms`` (which would
override this), so the two arms are now ``KDSM_STREAM__SWITCH_INTERVAL_MS=5`` and the default (0.5).
"""
import sys

sys.setswitchinterval(float(sys.argv.pop(1)))
from streamer.ops.cli import main  # noqa: E402

sys.argv[0] = "kdsm"
sys.exit(main())
