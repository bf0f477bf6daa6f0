"""The kurtosis sigma rule (DESIGN 3.2) on constructed data."""

import numpy as np
import pytest
from scipy.stats import norm, truncnorm

from offline_train.scaler import Scaler
from offline_train.sigmas import (
    DEGENERATE_KAPPA,
    KurtosisSigmas,
    kurtosis_from_counts,
    rearranged_positions,
    sigma_from_kappa,
)

N = 40_000


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(42)


def test_gaussian_column_kappa_near_3_without_trim(rng):
    est = KurtosisSigmas(trim=0.0).fit(rng.normal(size=(N, 1)))
    assert abs(est.kappas_[0] - 3.0) < 0.15
    assert abs(est.sigmas_[0] - 0.5) < 0.03


def test_default_trim_gives_truncated_normal_kurtosis(rng):
    # 2% trimmed per tail = a normal truncated at its 2%/98% quantiles.
    a = norm.ppf(0.98)
    expected = float(truncnorm(-a, a).stats(moments="k")) + 3.0
    est = KurtosisSigmas().fit(rng.normal(size=(N, 1)))
    assert abs(est.kappas_[0] - expected) < 0.05


@pytest.mark.parametrize("trim", [0.0, 0.02])
def test_heavier_tails_get_larger_sigma(rng, trim):
    X = np.column_stack([rng.uniform(size=N), rng.normal(size=N), rng.laplace(size=N), rng.standard_t(3, size=N)])
    s = KurtosisSigmas(trim=trim).fit(X).sigmas_
    assert s[0] < s[1] < s[2]
    assert s[3] > s[1]


def test_mirrored_column_same_kappa(rng):
    x = rng.gamma(2.0, size=N)
    est = KurtosisSigmas().fit(np.column_stack([x, -x]))
    assert est.kappas_[0] == pytest.approx(est.kappas_[1], abs=1e-9)


def test_skew_does_not_change_kappa_much_versus_symmetric_rearrangement(rng):
    # Rearrangement removes skew: an exponential column is not judged by its skewness.
    est = KurtosisSigmas().fit(rng.exponential(size=(N, 1)))
    assert np.isfinite(est.kappas_[0])


def test_binary_ternary_constant_columns_get_discrete_kappa(rng):
    X = np.column_stack([rng.integers(0, 2, N), rng.integers(-1, 2, N), np.full(N, 7.0), rng.normal(size=N)])
    est = KurtosisSigmas().fit(X.astype(float))
    assert est.kappas_[:3].tolist() == [1.8, 1.8, 1.8]
    assert est.sigmas_[:3] == pytest.approx([0.5 * (1 + 0.33 * (1.8 - 3))] * 3)
    assert est.kappas_[3] != 1.8


def test_exact_formula_on_a_constructed_histogram():
    counts = np.array([1, 4, 10, 4, 1], dtype=float)
    pos = rearranged_positions(counts)
    assert pos.tolist() == [2, 1, 0, -1, -2]  # fullest 0, then +1, -1, +2, -2 (ties: lower bin first)
    vals = np.repeat(pos, counts.astype(int)).astype(float)
    m = vals.mean()
    expected = ((vals - m) ** 4).mean() / ((vals - m) ** 2).mean() ** 2
    assert kurtosis_from_counts(counts, pos) == pytest.approx(expected)


def test_clipping_both_ranges():
    kappas = np.array([-10.0, 3.0, 50.0])
    assert sigma_from_kappa(kappas, 0.5, 0.33, (0.1, 3.0)).tolist() == [0.1, 0.5, 3.0]
    assert sigma_from_kappa(kappas, 0.5, 0.33, (0.1, 2.0)).tolist() == [0.1, 0.5, 2.0]


def test_global_mode_is_plain_dsm(rng):
    est = KurtosisSigmas(mode="global", base=0.7).fit(rng.laplace(size=(1000, 3)))
    assert est.sigmas_.tolist() == [0.7, 0.7, 0.7]


def test_streaming_over_batches_equals_in_memory(rng):
    X = np.column_stack([rng.laplace(size=5003), rng.normal(size=5003), rng.integers(0, 2, 5003)]).astype(float)
    scaler_mem = Scaler.fit(X)
    mem = KurtosisSigmas().fit(X, scaler_mem)
    chunks = np.array_split(X, 17)
    scaler_stream = Scaler.fit_batches(chunks, X.shape[1])
    np.testing.assert_allclose(scaler_stream.mean_, scaler_mem.mean_, rtol=1e-12)
    np.testing.assert_allclose(scaler_stream.std_, scaler_mem.std_, rtol=1e-12)
    stream = KurtosisSigmas().fit_batches(lambda: iter(chunks), scaler_stream)
    np.testing.assert_allclose(stream.kappas_, mem.kappas_, rtol=1e-9)
    np.testing.assert_allclose(stream.sigmas_, mem.sigmas_, rtol=1e-9)


def _sorted_rank_trim_kappa(z: np.ndarray, trim: float = 0.02, bins: int = 200) -> float:
    """The rule done the direct way: sort, keep ranks [cut, n - cut), np.histogram over the kept range."""
    n = len(z)
    cut = int(n * trim)
    kept = np.sort(z)[cut : n - cut]
    counts, _ = np.histogram(kept, bins=bins)
    return kurtosis_from_counts(counts, rearranged_positions(counts))


@pytest.mark.parametrize("make", [
    lambda r: r.laplace(size=20011),
    lambda r: r.poisson(3.0, size=20011).astype(float),  # ties at both cuts
    lambda r: np.round(r.lognormal(size=20011), 1),
])
def test_streaming_trim_equals_sorting_the_column(rng, make):
    x = make(rng)
    scaler = Scaler.fit(x[:, None])
    exact = _sorted_rank_trim_kappa(scaler.transform(x[:, None])[:, 0])
    chunks = np.array_split(x[:, None], 13)
    est = KurtosisSigmas().fit_batches(lambda: iter(chunks), scaler)
    assert est.kappas_[0] == pytest.approx(exact, rel=1e-12)


def test_ties_at_a_cut_are_kept_in_part_not_dropped(rng):
    # 30% of the rows share the minimum: trimming 2% must keep the other 28% of them.
    x = np.concatenate([np.zeros(3000), rng.normal(5.0, 1.0, 7000)])
    z = Scaler.fit(x[:, None]).transform(x[:, None])[:, 0]
    est = KurtosisSigmas().fit(x[:, None])
    assert est.kappas_[0] == pytest.approx(_sorted_rank_trim_kappa(z), rel=1e-12)
    # Dropping the whole tied mass would leave a near-Gaussian column instead.
    kept_by_value = z[(z > z.min()) & (z <= np.sort(z)[-int(len(z) * 0.02) - 1])]
    counts, _ = np.histogram(kept_by_value, bins=200)
    assert abs(est.kappas_[0] - kurtosis_from_counts(counts, rearranged_positions(counts))) > 0.5


def test_spike_column_gets_the_largest_sigma(rng):
    # 98.5% zeros: every kept value is 0 although the column is not constant.
    x = np.where(rng.random(N) < 0.985, 0.0, rng.integers(1, 17, N).astype(float))
    est = KurtosisSigmas().fit(np.column_stack([x, rng.normal(size=N)]))
    assert est.kappas_[0] == DEGENERATE_KAPPA
    assert est.sigmas_[0] == 3.0
    assert KurtosisSigmas(clip=(0.1, 2.0)).fit(x[:, None]).sigmas_[0] == 2.0
