from __future__ import annotations

import numpy as np
import pytest

from puppeteer.evaluation.stats import mcnemar_exact, paired_bootstrap, wilson_interval
from puppeteer.evaluation.stats import wilson_interval as eval_wilson


def _pairs(both: int, only_a: int, only_b: int, neither: int) -> tuple[list[bool], list[bool]]:
    a = [True] * both + [True] * only_a + [False] * only_b + [False] * neither
    b = [True] * both + [False] * only_a + [True] * only_b + [False] * neither
    return a, b


def test_mcnemar_exact_on_a_hand_made_table() -> None:
    # discordant pairs 2 vs 8: two-sided p = 2 * P(X <= 2 | n=10, p=1/2) = 2 * (1 + 10 + 45) / 1024
    r = mcnemar_exact(*_pairs(both=30, only_a=2, only_b=8, neither=10))
    assert (r.n, r.both, r.only_a, r.only_b, r.neither) == (50, 30, 2, 8, 10)
    assert r.p_value == pytest.approx(112 / 1024, abs=1e-12)
    assert r.diff == pytest.approx((8 - 2) / 50)


def test_mcnemar_ignores_concordant_pairs_and_is_one_without_discordance() -> None:
    assert mcnemar_exact(*_pairs(40, 0, 0, 60)).p_value == 1.0
    # 0 vs 6 discordant: p = 2 / 2**6
    assert mcnemar_exact(*_pairs(0, 0, 6, 0)).p_value == pytest.approx(2 / 64)
    with pytest.raises(ValueError):
        mcnemar_exact([True], [True, False])


def test_paired_bootstrap_matches_the_normal_interval_of_a_known_mean() -> None:
    # differences 0 and 1, 200 each: mean 0.5, standard error 0.5 / sqrt(400) = 0.025
    a = np.zeros(400)
    b = np.array([0.0, 1.0] * 200)
    d = paired_bootstrap(a, b, n_resamples=20_000)
    assert d.diff == pytest.approx(0.5)
    assert d.ci_low == pytest.approx(0.5 - 1.96 * 0.025, abs=0.006)
    assert d.ci_high == pytest.approx(0.5 + 1.96 * 0.025, abs=0.006)


def test_paired_bootstrap_uses_pairs_not_marginals() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(100.0, 30.0, 300)  # large spread between items ...
    b = a + 1.0 + rng.normal(0.0, 0.1, 300)  # ... but B is A plus one, item by item
    d = paired_bootstrap(a, b)
    assert d.ci_low > 0.98 and d.ci_high < 1.02


def test_paired_bootstrap_constant_difference_is_exact() -> None:
    d = paired_bootstrap([1.0, 2.0, 3.0], [2.0, 3.0, 4.0])
    assert (d.diff, d.ci_low, d.ci_high) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize(("k", "n"), [(7, 10), (1, 50), (49, 50), (250, 500)])
def test_wilson_matches_the_closed_form(k: int, n: int) -> None:
    z = 1.959963984540054
    p = k / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(center - half, abs=1e-9) and hi == pytest.approx(center + half, abs=1e-9)
    assert eval_wilson is wilson_interval  # one implementation; evaluation re-exports it


def test_wilson_other_levels_and_edges() -> None:
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    narrow, wide = wilson_interval(30, 100, z=1.0), wilson_interval(30, 100, z=2.576)
    assert wide[0] < narrow[0] < 0.3 < narrow[1] < wide[1]
