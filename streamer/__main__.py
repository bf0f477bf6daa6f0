"""``python -m streamer ...``: the ``kdsm`` command without its installed entry point."""

import sys

from streamer.ops.cli import main

sys.exit(main())
