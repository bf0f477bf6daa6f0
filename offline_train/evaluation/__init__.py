"""ADBench evaluation of K-DSM against DSM and PyOD baselines (DESIGN 4).

``protocol`` makes the splits, ``metrics`` scores them, ``methods`` fits the
detectors, ``runner`` runs the grid into a resumable CSV, ``report`` turns
the CSV into markdown tables and a plot, ``cli`` is ``kdsm bench adbench``.
"""
