"""Comparing variants: the statistics against hand-checked numbers and against scipy/statsmodels
directly, a planted drop found, a no-op variant showing nothing, and the first divergence."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats

from runtime.suites.variants import (
    CaseComparison,
    TurnDivergence,
    VariantReport,
    mcnemar_exact,
    paired_difference,
)

# Ten paired conversations: d = B - A is 0 0 0 0 -1 -1 -1 0 0 1.
A = [True] * 8 + [False] * 2
B = [True, True, True, True, False, False, False, True, False, True]


def test_paired_difference_by_hand():
    difference, low, high = paired_difference(A, B)
    assert difference == pytest.approx(-0.2)
    # By hand: sum (d - mean)^2 = 4 - 10 * 0.04 = 3.6; the cluster-robust (CRV1) variance of the
    # coefficient is 3.6 / 10^2 times Stata's correction G/(G-1) * (N-1)/(N-K) = 10/9 * 19/18.
    se = math.sqrt(3.6 / 100 * 10 / 9 * 19 / 18)
    assert se == pytest.approx(0.205480, abs=1e-6)
    t = 2.262157  # t(0.975, 9 degrees of freedom), from a table
    assert low == pytest.approx(-0.2 - t * se, abs=1e-5)
    assert high == pytest.approx(-0.2 + t * se, abs=1e-5)
    # The same as the paired t interval, widened by sqrt((2N - 1) / (2N - 2)) from stacking both arms.
    d = np.array(B, float) - np.array(A, float)
    paired = stats.ttest_rel(np.array(B, float), np.array(A, float)).confidence_interval(0.95)
    widen = math.sqrt(19 / 18)
    assert low == pytest.approx(d.mean() - (d.mean() - paired.low) * widen, abs=1e-9)
    assert high == pytest.approx(d.mean() + (paired.high - d.mean()) * widen, abs=1e-9)


def test_paired_difference_is_statsmodels_clustered_by_conversation():
    rng = np.random.default_rng(7)
    a = list(rng.random(60) < 0.7)
    b = [x if rng.random() < 0.8 else not x for x in a]
    difference, low, high = paired_difference(a, b)
    y = np.array([*a, *b], float)
    fit = sm.OLS(y, sm.add_constant(np.r_[np.zeros(60), np.ones(60)])).fit(
        cov_type="cluster", cov_kwds={"groups": np.r_[np.arange(60), np.arange(60)]}, use_t=True)
    assert difference == pytest.approx(fit.params[1])
    assert (low, high) == pytest.approx(tuple(fit.conf_int(0.05)[1]))


def test_paired_difference_edges():
    assert paired_difference([True] * 5, [True] * 5) == (0.0, 0.0, 0.0)
    d, low, high = paired_difference([True], [False])
    assert d == -1.0 and math.isnan(low) and math.isnan(high)
    with pytest.raises(ValueError, match="paired outcomes"):
        paired_difference([True], [True, False])


def test_mcnemar_exact_by_hand_and_against_scipy():
    (a_only, b_only), p = mcnemar_exact(A, B)
    assert (a_only, b_only) == (3, 1)
    # By hand: two-sided exact binomial on 1 of 4 discordant pairs: 2 * (1 + 4) / 16 = 0.625.
    assert p == pytest.approx(0.625)
    assert p == pytest.approx(stats.binomtest(b_only, a_only + b_only, 0.5).pvalue)
    assert mcnemar_exact([True] * 4, [True] * 4) == ((0, 0), 1.0)
    # 20 of 200 conversations lost, none won: p = 2 * 0.5^20
    (a_only, b_only), p = mcnemar_exact([True] * 200, [i % 10 != 0 for i in range(200)])
    assert (a_only, b_only) == (20, 0) and p == pytest.approx(2 * 0.5**20)


def test_report_to_json():
    div = TurnDivergence("s::c", 0, 2, "reply", 3, "a b c d", "a b c e", "system: x", "system: x")
    report = VariantReport("a.json", "b.json", [CaseComparison("s::c", 10, 8, 6, 1, div)], 10, 1, 0.8, 0.6,
                           -0.2, -0.66, 0.26, (3, 1), 0.625, outcomes=[("s::c", 0, True, False)])
    data = report.to_json()
    assert data["discordant"] == {"a_only": 3, "b_only": 1}
    assert data["cases"][0]["first_divergence"]["token_index"] == 3
    assert data["cases"][0]["pass_rate_b"] == 0.6
    assert data["outcomes"] == [{"case": "s::c", "run": 0, "passed_a": True, "passed_b": False}]
    assert not data["significant"]
    nan = VariantReport("a", "b", [], 1, 0, 1.0, 0.0, -1.0, math.nan, math.nan, (1, 0), 1.0).to_json()
    assert nan["ci_low"] is None
