"""Rolling summaries: what a Summarize node does when it runs.

- It folds when the turns not yet summarized reach ``trigger_tokens`` (counted the way
  prompts count them: tokens plus 8 per message) or ``trigger_turns``.
- The latest ``keep_recent_turns`` turns are never folded (the turn that is running
  counts as the latest: Summarize runs after its reply).
- It folds the largest chronological prefix of the pending turns whose fold prompt
  (previous summary plus transcript) fits its context beside ``max_summary_tokens``.
- The new summary is cut at ``max_summary_tokens`` as a hard stop and replaces the old
  one in every generating node's system message; their history starts after
  ``covered_through``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from runtime.asset import Summarize
from runtime.backends.base import ChatMessage, GenerationRequest, GenerationResult
from runtime.budget import TokenCounter, message_tokens
from runtime.history import Reply, Summary, Turn
from runtime.prompt import replayed_groups
from runtime.templates import render_template

WORDS_PER_TOKEN = 0.75  # English averages about three words to four tokens


def turn_tokens(turn: Turn, count: TokenCounter) -> int:
    """What a past turn costs in a prompt that replays it whole."""
    return sum(message_tokens(count(m.content)) for group in replayed_groups(turn) for m in group)


def transcript(turns: list[Turn]) -> str:
    """Turns as the summarizer reads them: only what later prompts would replay."""
    lines: list[str] = []
    for turn in turns:
        lines.append(f"Player: {turn.player}")
        for entry in turn.entries:
            if not entry.replay:
                continue
            if isinstance(entry, Reply):
                lines.append(f"Character: {entry.text}")
            else:
                arguments = json.dumps(entry.arguments, ensure_ascii=False)
                lines.append(f"(The character used the tool {entry.tool} with {arguments}; it returned: {entry.result})")
    return "\n".join(lines)


def cut_to_tokens(text: str, max_tokens: int, count: TokenCounter) -> str:
    """``text`` cut so it counts at most ``max_tokens`` tokens (mid-sentence if need be)."""
    if count(text) <= max_tokens:
        return text
    words = text.split(" ")
    low, high = 0, len(words)  # the longest word prefix that fits: binary search
    while low < high:
        mid = (low + high + 1) // 2
        if count(" ".join(words[:mid])) <= max_tokens:
            low = mid
        else:
            high = mid - 1
    return " ".join(words[:low])


@dataclass
class Fold:
    """What one Summarize run did (``summary`` is None when it did not fold)."""

    summary: Summary | None
    unsummarized_tokens: int
    unsummarized_turns: int
    triggered: bool
    messages: list[ChatMessage] = field(default_factory=list)
    result: GenerationResult | None = None
    warnings: list[str] = field(default_factory=list)
    reason: str = ""  # why nothing was folded


def fold_messages(node: Summarize, previous: Summary | None, turns: list[Turn], source: str = "") -> list[ChatMessage]:
    values = {
        "previous_summary": previous.text if previous else "",
        "transcript": transcript(turns),
        "max_words": max(1, int(node.max_summary_tokens * WORDS_PER_TOKEN)),
    }
    user = render_template(node.template, values, node.id, "template", source)
    messages = [ChatMessage("system", node.system_prompt)] if node.system_prompt.strip() else []
    return messages + [ChatMessage("user", user)]


def run_summarize(
    node: Summarize,
    turns: list[Turn],
    previous: Summary | None,
    context_size: int,
    count: TokenCounter,
    generate: Callable[[GenerationRequest], GenerationResult],
    source: str = "",
) -> Fold:
    """Fold pending turns if the trigger is reached. ``turns`` includes the running turn."""
    first = previous.covered_through + 1 if previous else 0
    unsummarized = turns[first:]
    tokens = sum(turn_tokens(t, count) for t in unsummarized)
    triggered = bool(
        (node.trigger_tokens and tokens >= node.trigger_tokens)
        or (node.trigger_turns and len(unsummarized) >= node.trigger_turns)
    )
    fold = Fold(None, tokens, len(unsummarized), triggered)
    if not triggered:
        fold.reason = "below the trigger"
        return fold
    pending = unsummarized[: max(0, len(unsummarized) - node.keep_recent_turns)]
    if not pending:
        fold.reason = f"every unsummarized turn is among the {node.keep_recent_turns} kept verbatim"
        return fold

    room = context_size - node.max_summary_tokens

    def fits(k: int) -> bool:
        messages = fold_messages(node, previous, pending[:k], source)
        return sum(message_tokens(count(m.content)) for m in messages) <= room

    low, high = 0, len(pending)  # the largest prefix that fits: binary search (longer never fits better)
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    if low == 0:
        fold.reason = "no pending turn fits"
        fold.warnings.append(
            f"cannot fold: even one pending turn beside the previous summary does not fit the summarizer's "
            f"context of {context_size} tokens with {node.max_summary_tokens} kept for the summary. "
            "Raise context_size or lower max_summary_tokens."
        )
        return fold
    if low < len(pending):
        fold.warnings.append(f"folded {low} of {len(pending)} pending turns; the rest fold next time")

    fold.messages = fold_messages(node, previous, pending[:low], source)
    request = GenerationRequest(
        fold.messages, max_tokens=node.max_summary_tokens, temperature=node.temperature, top_p=node.top_p,
        seed=node.seed,
    )
    fold.result = generate(request)
    if fold.result.cancelled:
        return fold
    text = cut_to_tokens(fold.result.text.strip(), node.max_summary_tokens, count)
    if not text:
        fold.reason = "the model wrote an empty summary"
        fold.warnings.append("the model wrote an empty summary; the previous one is kept")
        return fold
    fold.summary = Summary(text, covered_through=first + low - 1, folded_turns=low, node=node.id)
    return fold
