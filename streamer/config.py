"""Settings of the whole product: the offline sections plus the online ones.

Loaded from YAML with env overrides ``KDSM_<SECTION>__<KEY>`` (see
``offline_train.config.load_settings``).

>>> s = Settings()
>>> s.sigma.base
0.5
"""

from __future__ import annotations

from offline_train.config import TrainSettings


class Settings(TrainSettings):
    """Every section; online sections are added by the streamer modules' configs."""
