"""The training sample (``data.UniformSample``): uniform over the whole stream, seeded, in bounded memory."""

import numpy as np
import pytest

from offline_train.data import ParquetSource, UniformSample, bounded_sample, write_parquet

CHI2_9_P001 = 27.88  # the 0.999 quantile of chi-square with 9 degrees of freedom


def stream(n: int, batch: int):
    """Rows 0..n-1 (column 0 is the row's index) in batches, with labels."""
    for start in range(0, n, batch):
        idx = np.arange(start, min(start + batch, n), dtype=np.float64)
        yield np.column_stack([idx, -idx]), idx % 2


def decile_chi2(rows: np.ndarray, n: int) -> float:
    counts = np.bincount((rows * 10 // n).astype(int), minlength=10)
    expected = len(rows) / 10
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_row_of_a_long_stream_is_kept_with_equal_probability(seed):
    """The buffer was thinned each time it doubled, so early rows were thinned again and again: of 100k rows the
    first decile kept a few rows, the last hundreds. Now the per-decile counts pass a chi-square test."""
    n, k = 100_000, 1000
    X, y = bounded_sample(stream(n, 1000), k, seed)
    assert X.shape == (k, 2) and len(y) == k
    assert decile_chi2(X[:, 0], n) < CHI2_9_P001
    assert np.all(np.diff(X[:, 0]) > 0)  # stored order, no row twice
    np.testing.assert_array_equal(y, X[:, 0] % 2)  # labels stay with their rows
    np.testing.assert_array_equal(X[:, 1], -X[:, 0])


def test_the_same_seed_gives_the_same_sample_whatever_the_batches():
    a, _ = bounded_sample(stream(20_000, 1000), 500, 3)
    b, _ = bounded_sample(stream(20_000, 777), 500, 3)
    c, _ = bounded_sample(stream(20_000, 1000), 500, 4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_memory_stays_at_a_quarter_over_max_rows():
    sample, most = UniformSample(1000, 0), 0
    for X, y in stream(100_000, 250):
        sample.add(X, y)
        most = max(most, sample.held)
    assert most <= 1000 + 250
    assert len(sample.result()[0]) == 1000


@pytest.mark.parametrize("batch", [1, 37, 256, 5000])
def test_the_sample_is_the_rows_of_smallest_key_whatever_the_cuts(batch, monkeypatch):
    """The candidates were cut back to max_rows each time one batch had come in (O(max_rows) a batch: 2M rows in
    256-row batches took 24 s); they are cut when a quarter over, so a row costs the same whatever the batch size.
    The sample is the same set in the same order: the max_rows rows of smallest key, as they came."""
    from offline_train import sampling

    n, k, seed = 30_000, 1000, 5
    cuts = 0
    shrink = sampling.UniformSample._shrink

    def counted(self):
        nonlocal cuts
        cuts += self._held > self.max_rows
        shrink(self)

    monkeypatch.setattr(sampling.UniformSample, "_shrink", counted)
    X, y = bounded_sample(stream(n, batch), k, seed)
    expected = np.sort(np.argsort(sampling.row_keys(0, n, seed))[:k])
    np.testing.assert_array_equal(X[:, 0], expected)
    np.testing.assert_array_equal(y, expected % 2)
    assert cuts <= 4 * np.log(n / k) + 5  # a quarter of max_rows accepted between cuts (k ln(n/k) accepted in all)


def test_at_or_under_max_rows_every_row_is_kept_as_it_came():
    batches = list(stream(3000, 700))
    for k in (3000, 5000, None):
        X, y = bounded_sample(iter(batches), k, 9)
        np.testing.assert_array_equal(X, np.concatenate([b[0] for b in batches]))
        np.testing.assert_array_equal(y, np.concatenate([b[1] for b in batches]))
    assert bounded_sample(iter([]), 10)[0].shape == (0, 0)
    assert bounded_sample(iter([(np.zeros((0, 4)), None)]), 10)[0].shape == (0, 4)


def test_the_parquet_training_sample_is_uniform(tmp_path):
    n = 40_000
    idx = np.arange(n, dtype=np.float64)
    path = write_parquet(tmp_path / "d.parquet", np.column_stack([idx, idx % 7]), ["a", "b"])
    X, _ = ParquetSource(path, batch_rows=500).load(max_rows=800, seed=0)
    assert len(X) == 800 and decile_chi2(X[:, 0], n) < CHI2_9_P001


def test_a_profile_sample_holds_only_the_values_up_to_the_cap_and_4_bytes_more_a_value_past_it():
    """Each value carried an 8-byte key and an unused 8-byte index (a numeric column's profile: 10.5 MiB against
    3.55 MiB before the uniform sampler). Up to the cap only the values are held; past it, a 4-byte position each."""

    def held_bytes(s):
        return sum(a.nbytes for a in [*s._xs, *s._pos])

    s = UniformSample(1000, 0)
    for start in range(0, 1000, 300):
        s.add(np.ones(min(300, 1000 - start)))
    assert held_bytes(s) == 8 * 1000 and s.result()[0].shape == (1000,)
    most = 0
    for _ in range(200):
        s.add(np.ones(300))
        most = max(most, held_bytes(s))
    assert most <= 1250 * (8 + 4)


def test_a_numeric_median_is_exact_up_to_400k_values_as_before_the_uniform_sampler():
    """The median sample kept every value up to 2 x 200k before it thinned; the cap is 400k so such columns keep
    the exact median."""
    import pyarrow as pa

    from offline_train.config import FeatureSpec
    from offline_train.features import _SAMPLE, FittedFeatures, profile

    assert _SAMPLE == 400_000
    v = np.random.default_rng(0).lognormal(size=300_001)
    spec = [FeatureSpec(name="a", type="numeric")]
    batches = pa.table({"a": v}).to_batches(max_chunksize=65_536)
    ff = FittedFeatures.fit(spec, profile(batches, spec))
    assert ff.to_dict()["features"][0]["fill"] == float(np.median(v))
