"""Token budget arithmetic: the spec's worked example and the trimming rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.asset.model import TOKENS_PER_MESSAGE
from runtime.backends.base import ChatMessage
from runtime.prompting.budget import PromptBudget, message_tokens, messages_tokens, trim_to_budget


def test_worked_example_numbers():
    budget = PromptBudget(context_size=4096, max_tokens=512)
    assert budget.limit == 3584
    assert budget.trim_target == 2688


def test_message_cost_is_tokens_plus_eight():
    assert TOKENS_PER_MESSAGE == 8
    assert message_tokens(10) == 18
    messages = [ChatMessage("system", "a b c"), ChatMessage("user", ""), ChatMessage("assistant", "d")]
    assert messages_tokens(messages, lambda t: len(t.split())) == 3 + 0 + 1 + 3 * 8


@pytest.mark.parametrize("context, max_tokens", [(0, 1), (100, 0), (100, 100), (100, 150)])
def test_bad_budgets_are_refused(context, max_tokens):
    with pytest.raises(ValueError):
        PromptBudget(context, max_tokens)


def test_no_trim_at_exactly_the_budget():
    budget = PromptBudget(4096, 512)
    trim = trim_to_budget(budget, 584, [1000, 1000, 1000])  # 3584 exactly
    assert not trim.triggered and trim.window_start_after == 0 and trim.prompt_tokens == 3584


def test_one_token_over_trims_down_to_75_percent():
    budget = PromptBudget(4096, 512)
    trim = trim_to_budget(budget, 585, [1000, 1000, 1000])  # 3585
    assert trim.triggered
    assert trim.window_start_after == 1 and trim.dropped_turns == 1
    assert trim.prompt_tokens == 2585
    assert trim.prompt_tokens <= budget.trim_target


def test_trim_keeps_dropping_until_the_target_not_just_the_budget():
    budget = PromptBudget(4096, 512)
    costs = [300] * 12  # 3600 + fixed 100 = 3700
    trim = trim_to_budget(budget, 100, costs)
    # 3700 -> 3400 (fits the budget) -> ... -> 2800 -> 2500 <= 2688
    assert trim.window_start_after == 4
    assert trim.prompt_tokens == 2500


def test_window_start_is_respected_and_turns_before_it_never_counted():
    budget = PromptBudget(1000, 100)
    trim = trim_to_budget(budget, 100, [5000, 5000, 100, 100], window_start=2)
    assert not trim.triggered and trim.window_start_after == 2 and trim.prompt_tokens == 300


def test_fixed_part_alone_too_big_sends_no_history_and_warns():
    budget = PromptBudget(1000, 200)
    trim = trim_to_budget(budget, 900, [10, 10, 10])
    assert trim.triggered and trim.window_start_after == 3 and trim.dropped_turns == 3
    assert not trim.fits
    assert "alone need 900 tokens" in trim.warning and "budget of 800" in trim.warning


def test_fixed_part_above_target_but_within_budget_is_no_warning():
    budget = PromptBudget(1000, 200)  # limit 800, target 600
    trim = trim_to_budget(budget, 700, [200])
    assert trim.triggered and trim.window_start_after == 1 and trim.fits and trim.warning == ""


def test_turns_the_node_sends_nothing_of_are_not_counted_as_dropped():
    budget = PromptBudget(1000, 100)
    trim = trim_to_budget(budget, 100, [0, 0, 500, 500])
    assert trim.triggered and trim.window_start_after == 3 and trim.dropped_turns == 1


@given(
    context=st.integers(2, 10_000),
    max_fraction=st.floats(0.01, 0.99),
    fixed=st.integers(0, 12_000),
    costs=st.lists(st.integers(0, 2_000), max_size=40),
    start=st.integers(0, 45),
)
def test_trim_properties(context, max_fraction, fixed, costs, start):
    max_tokens = min(context - 1, max(1, int(context * max_fraction)))
    budget = PromptBudget(context, max_tokens)
    trim = trim_to_budget(budget, fixed, costs, start)
    begin = min(start, len(costs))
    assert trim.window_start_after >= begin  # never moves back
    assert trim.prompt_tokens == fixed + sum(costs[trim.window_start_after:])
    untrimmed = fixed + sum(costs[begin:])
    assert trim.triggered == (untrimmed > budget.limit)
    if not trim.triggered:
        assert trim.window_start_after == begin
    else:
        # Either at or below 75 %, or every turn is gone.
        assert trim.prompt_tokens <= budget.trim_target or trim.window_start_after == len(costs)
        # Minimal: keeping the last dropped turn would have left it above the target.
        if trim.window_start_after > begin:
            last = trim.window_start_after - 1
            assert trim.prompt_tokens + costs[last] > budget.trim_target or costs[last] == 0
    assert (trim.warning != "") == (fixed > budget.limit)


def test_budget_for_a_node_uses_its_context_or_the_models():
    from runtime.asset.model import new_node

    node = new_node("Generate", "npc", context_size=4096, max_tokens=512)
    assert PromptBudget.for_node(node, 2048).limit == 3584
    node = new_node("Generate", "npc", context_size=0, max_tokens=96)
    assert PromptBudget.for_node(node, 2048).limit == 2048 - 96
    with pytest.raises(ValueError, match="less than the context size"):
        PromptBudget.for_node(new_node("Generate", "npc", max_tokens=600), 512)
