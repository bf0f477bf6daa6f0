"""The published methods by name: K-DSM and DSM, each with or without the EMA teacher (the seed paper's four).

``kdsm train --method NAME`` and the bench's methods of the same name train exactly these. Each keeps the
settings' network, budget and calibration and takes the paper's choices: its sigma rule (per-feature kurtosis, or
one global sigma), the EMA-teacher filter on or off, none of the default's defences against contaminated history (no
warm start on the isolation forest's core, no refinement rounds) and the network's score alone (no forest, no k-NN
part). ``kdsm`` is the method for history known to be clean (``configs/clean-history.yaml`` trains the same).

>>> from offline_train.config import TrainSettings
>>> s = published_sections("kdsm", TrainSettings())
>>> s["sigma"].mode, s["ema"].enabled, s["refine"].enabled, s["score"].isolation_forest, s["score"].knn
('kurtosis', False, False, False, False)
>>> published_sections("dsm-ema", TrainSettings())["sigma"].mode
'global'
>>> METHOD_NAMES
('default', 'kdsm', 'dsm', 'kdsm-ema', 'dsm-ema')
"""

from __future__ import annotations

# name -> (sigma mode, EMA teacher on)
PUBLISHED: dict[str, tuple[str, bool]] = {
    "kdsm": ("kurtosis", False),
    "dsm": ("global", False),
    "kdsm-ema": ("kurtosis", True),
    "dsm-ema": ("global", True),
}
# ``default``: the settings as given (the contaminated-history default, refinement and three-part score included)
METHOD_NAMES = ("default", *PUBLISHED)


def published_sections(name: str, settings) -> dict:
    """The config sections (by section name) that make ``settings`` train published method ``name``."""
    mode, ema = PUBLISHED[name]
    return {"sigma": settings.sigma.model_copy(update={"mode": mode}),
            "ema": settings.ema.model_copy(update={"enabled": ema}),
            "refine": settings.refine.model_copy(update={"enabled": False}),
            "score": settings.score.model_copy(update={"isolation_forest": False, "knn": False})}
