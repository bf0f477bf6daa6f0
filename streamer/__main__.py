"""``python -m streamer ...``: the ``kdsm`` command without its installed entry point."""

import sys

from .cli import main

sys.exit(main())
