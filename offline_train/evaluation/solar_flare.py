"""A real labelled data set with categorical fields, shipped offline: Solar Flare (UCI) from river's wheel.

``river.datasets.SolarFlare`` reads a CSV bundled inside the river package
(no download): 1066 active regions of the Sun, each with three categorical
fields (modified Zurich class, largest spot size, spot distribution) and
seven small integer codes, and as targets the number of C-, M- and X-class
flares the region produced in the next 24 hours.

Labels by a documented rule: **anomaly = the region produced at least one
M- or X-class flare** (the strong flares, 38 of 1066 rows, 3.6 %). The
flare counts are outcomes, so none is a feature. The three flare-history
codes are grouped into a nested object ``history`` (values unchanged) so the
data also exercises nested fields. ``offline_train/bundled/solar_flare.parquet``
is ``build_table()`` written out (tests/test_bench_features.py rebuilds it
and compares).

>>> t = build_table()
>>> t.num_rows, int(sum(t.column("label").to_pylist())), t.schema.field("zurich_class").type
(1066, 38, DataType(string))
"""

from __future__ import annotations

import pyarrow as pa

from ..config import FeatureSpec

CATEGORICAL = {"zurich-class": "zurich_class", "largest-spot-size": "spot_size", "spot-distribution": "spot_distribution"}
CODES = {"activity": "activity", "evolution": "evolution", "area": "area", "largest-spot-area": "largest_spot_area"}
HISTORY = {"previous-24h-flare-activity": "previous_24h", "hist-complex": "complex",
           "hist-complex-this-pass": "complex_this_pass"}

# The spec the bench and configs/demo-mixed.yaml use: the three categorical fields one-hot, the codes numeric.
SPEC = [FeatureSpec(name=n, type="categorical") for n in CATEGORICAL.values()] + \
       [FeatureSpec(name=n, type="numeric") for n in CODES.values()] + \
       [FeatureSpec(name=f"history.{n}", path=f"history.{n}", type="numeric") for n in HISTORY.values()]


def build_table() -> pa.Table:
    """The data set as an Arrow table: id, the features (history nested), label (1 = an M- or X-class flare)."""
    from river.datasets import SolarFlare

    rows = list(SolarFlare())
    cols: dict = {"id": list(range(len(rows)))}
    for src, dst in {**CATEGORICAL, **CODES}.items():
        cols[dst] = [x[src] for x, _ in rows]
    cols["history"] = [{dst: x[src] for src, dst in HISTORY.items()} for x, _ in rows]
    cols["label"] = [int(y["m-class-flares"] + y["x-class-flares"] > 0) for _, y in rows]
    return pa.table(cols)
