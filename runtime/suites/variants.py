"""Comparing two variants of an asset: the suite's asset is A, another asset file is B. The same
cases run on both with the same seeds and repeats, so each conversation of A has its twin on B.

- Each case's pass rate on A and B, and the paired difference B - A of the conversations' pass
  rates with its 95 % interval. Both arms' outcomes are stacked and the interval is the
  cluster-robust one with each conversation a cluster (its A and B runs are one pair), from
  statsmodels: the paired interval, as a maintained library computes it.
- McNemar's exact test on the per-conversation outcomes (passed on one arm and not the other).
- Differing turns: a turn where some node's prompt or output, the reply or the path differ.
  Replays are exact (fixed seeds), so an unchanged variant differs in none.
- The first divergence of each case: its run, turn, node and the first token (of the prompt when
  the prompts differ, else of the output) where A and B part, with both prompts as the model saw them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class TurnDivergence:
    """Where a conversation on A and its twin on B first part."""

    case: str  # suite::case
    run: int  # from 0 (the repeat)
    turn: int  # from 1
    node: str  # the first node, in the order it ran, whose prompt or output differs ("" : the path differs first)
    token_index: int  # the first token (from 0) that differs, in ``part``
    text_a: str  # the node's output on A (or the turn's reply, when no node's differs)
    text_b: str
    prompt_a: str  # the node's prompt as the model saw it, one "role: content" a message
    prompt_b: str
    part: str = "output"  # where the token is: "prompt" or "output"


@dataclass
class CaseComparison:
    case: str  # suite::case
    runs: int
    passed_a: int
    passed_b: int
    differing_turns: int
    first_divergence: TurnDivergence | None = None

    @property
    def pass_rate_a(self) -> float:
        return self.passed_a / self.runs if self.runs else 0.0

    @property
    def pass_rate_b(self) -> float:
        return self.passed_b / self.runs if self.runs else 0.0


@dataclass
class VariantReport:
    asset_a: str
    asset_b: str
    cases: list[CaseComparison]
    conversations: int  # paired conversations (on each arm)
    differing_turns: int
    pass_rate_a: float
    pass_rate_b: float
    difference: float  # B - A
    ci_low: float  # 95 %, clustered by conversation; nan with fewer than 2 conversations
    ci_high: float
    discordant: tuple[int, int]  # (passed on A only, passed on B only)
    mcnemar_p: float  # exact McNemar on the per-conversation outcomes
    seconds: float = 0.0
    outcomes: list[tuple[str, int, bool, bool]] = field(default_factory=list)  # (case, run, passed A, passed B)

    @property
    def significant(self) -> bool:
        return self.mcnemar_p < 0.05

    def to_json(self) -> dict[str, Any]:
        def number(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 6)

        data = asdict(self)
        for key in ("pass_rate_a", "pass_rate_b", "difference", "ci_low", "ci_high", "mcnemar_p"):
            data[key] = number(data[key])
        data["discordant"] = {"a_only": self.discordant[0], "b_only": self.discordant[1]}
        data["significant"] = self.significant
        data["seconds"] = round(self.seconds, 3)
        data["outcomes"] = [{"case": c, "run": r, "passed_a": a, "passed_b": b} for c, r, a, b in self.outcomes]
        for case, comparison in zip(data["cases"], self.cases):
            case["pass_rate_a"] = round(comparison.pass_rate_a, 6)
            case["pass_rate_b"] = round(comparison.pass_rate_b, 6)
        return data


# --- statistics -----------------------------------------------------------------------------------


def paired_difference(a: list[bool], b: list[bool]) -> tuple[float, float, float]:
    """The difference of pass rates B - A over paired conversations (``a[i]`` and ``b[i]`` are one
    conversation on each arm) and its 95 % interval: both arms' outcomes stacked, regressed on
    "is B", with standard errors clustered by conversation (statsmodels' cluster-robust covariance,
    t with conversations - 1 degrees of freedom). With fewer than 2 conversations the interval is nan."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes: {len(a)} on A but {len(b)} on B")
    n = len(a)
    if n == 0:
        return math.nan, math.nan, math.nan
    difference = (sum(b) - sum(a)) / n
    if n < 2:
        return difference, math.nan, math.nan
    diffs = [int(y) - int(x) for x, y in zip(a, b)]
    if all(d == diffs[0] for d in diffs):  # no spread: the interval is the point (statsmodels would divide 0 by 0)
        return difference, difference, difference
    import numpy as np
    import statsmodels.api as sm

    y = np.array([*map(float, a), *map(float, b)])
    x = sm.add_constant(np.array([0.0] * n + [1.0] * n))
    groups = np.array(list(range(n)) * 2)
    fit = sm.OLS(y, x).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    low, high = fit.conf_int(alpha=0.05)[1]
    return difference, float(low), float(high)


def mcnemar_exact(a: list[bool], b: list[bool]) -> tuple[tuple[int, int], float]:
    """McNemar's exact test on paired outcomes: ((passed on A only, passed on B only), two-sided p),
    from statsmodels. No discordant pair: p is 1."""
    a_only = sum(x and not y for x, y in zip(a, b))
    b_only = sum(y and not x for x, y in zip(a, b))
    if a_only + b_only == 0:
        return (0, 0), 1.0
    from statsmodels.stats.contingency_tables import mcnemar

    both = sum(x and y for x, y in zip(a, b))
    neither = len(a) - both - a_only - b_only
    result = mcnemar([[both, a_only], [b_only, neither]], exact=True)
    return (a_only, b_only), float(result.pvalue)
