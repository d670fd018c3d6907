"""Token budget arithmetic: the one place it is written.

The runtime's prompt building, the editor's Turn Inspector and the VRAM estimator
all call these functions, so the numbers they show agree.

- A node's prompt budget is its context size minus ``max_tokens`` (the room kept for the answer).
- A message costs its tokens by the model's own tokenizer plus ``TOKENS_PER_MESSAGE`` (8)
  for the role headers and end-of-turn markers the chat template wraps around it.
- When a prompt passes the budget, the oldest whole turns are dropped until it is at
  or below 75 % of the budget (hysteresis: one trim buys several cheap turns before
  the next re-read of the KV cache).
- A node's window start only moves forward: a dropped turn never comes back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.backends.base import ChatMessage

TRIM_TARGET_PERCENT = 75
TOKENS_PER_MESSAGE = 8  # role headers and end-of-turn markers, as the spec counts them

TokenCounter = Callable[[str], int]


@dataclass(frozen=True)
class PromptBudget:
    """A node's window: ``context_size`` tokens, ``max_tokens`` of them kept for the answer."""

    context_size: int
    max_tokens: int

    def __post_init__(self) -> None:
        if self.context_size < 1:
            raise ValueError(f"context size must be at least 1 (got {self.context_size})")
        if not 1 <= self.max_tokens < self.context_size:
            raise ValueError(
                f"max_tokens ({self.max_tokens}) must be at least 1 and less than the context size ({self.context_size})"
            )

    @classmethod
    def for_node(cls, node: Any, model_context: int) -> PromptBudget:
        """A generating node's budget: its Context Size (0: the model's ``model_context``) and Max Tokens."""
        return cls(node.context_size or model_context, node.max_tokens)

    @property
    def limit(self) -> int:
        """Tokens the prompt may use: above this, trimming starts."""
        return self.context_size - self.max_tokens

    @property
    def trim_target(self) -> int:
        """Trimming stops once the prompt is at or below this (75 % of the limit)."""
        return self.limit * TRIM_TARGET_PERCENT // 100


def message_tokens(content_tokens: int) -> int:
    """What one message costs in the budget, given its content's token count."""
    return content_tokens + TOKENS_PER_MESSAGE


def messages_tokens(messages: Iterable[ChatMessage], count: TokenCounter) -> int:
    """What a list of messages costs in the budget: each one's content by ``count``, plus its overhead."""
    return sum(message_tokens(count(m.content)) for m in messages)


@dataclass(frozen=True)
class Trim:
    """What fitting one node's prompt to its budget did."""

    window_start_before: int  # first history turn the node could still send before this prompt
    window_start_after: int  # first history turn it sends (and the new, never smaller, window start)
    dropped_turns: int  # turns with content that this trim removed from the prompt
    triggered: bool  # the prompt passed the budget, so trimming ran
    prompt_tokens: int  # the prompt's cost after trimming (fixed part plus the history sent)
    fixed_tokens: int  # system message plus current turn: never dropped
    limit: int
    target: int

    @property
    def fits(self) -> bool:
        return self.prompt_tokens <= self.limit

    @property
    def warning(self) -> str:
        """Set when the system message and current turn alone don't fit: the model then sees no history."""
        if self.fixed_tokens <= self.limit:
            return ""
        return (
            f"the system message and the current turn alone need {self.fixed_tokens} tokens, over the prompt "
            f"budget of {self.limit}; the model sees no history. Shorten the system prompt or template, "
            "lower max_tokens or raise context_size."
        )


def trim_to_budget(
    budget: PromptBudget, fixed_tokens: int, turn_tokens: Sequence[int], window_start: int = 0
) -> Trim:
    """Fit a prompt to ``budget`` by dropping whole turns from the front.

    ``fixed_tokens`` is the cost of what is never dropped (system message and current
    turn); ``turn_tokens[i]`` is what history turn ``i`` costs in this node's prompt
    (0 when the node sends nothing of it). Turns before ``window_start`` are already
    gone. If the prompt passes ``budget.limit``, turns are dropped oldest first until it
    is at or below ``budget.trim_target``, or no history is left.
    """
    start = max(0, min(window_start, len(turn_tokens)))
    total = fixed_tokens + sum(turn_tokens[start:])
    triggered = total > budget.limit
    after = start
    dropped = 0
    if triggered:
        while total > budget.trim_target and after < len(turn_tokens):
            if turn_tokens[after]:
                dropped += 1
            total -= turn_tokens[after]
            after += 1
    return Trim(
        window_start_before=window_start,
        window_start_after=after,
        dropped_turns=dropped,
        triggered=triggered,
        prompt_tokens=total,
        fixed_tokens=fixed_tokens,
        limit=budget.limit,
        target=budget.trim_target,
    )
