"""Rolling summaries: what a Summarize node does when it runs.

- It folds when the turns not yet summarized reach ``trigger_tokens`` (counted the way
  prompts count them: tokens plus 8 per message) or ``trigger_turns``.
- The latest ``keep_recent_turns`` turns are never folded (the turn that is running
  counts as the latest: Summarize runs after its reply).
- It folds the largest chronological prefix of the pending turns whose fold prompt
  (previous summary plus transcript) fits its context beside ``max_summary_tokens``.
- When even the first pending turn does not fit, it folds that turn alone, shortened:
  each long message keeps its first and last words around a "[... N words omitted ...]"
  marker, as many as fit by the backend's own token counts. If the previous summary leaves
  too little room, it is shortened the same way. Folding never stalls: a turn too long to
  summarize whole is still summarized before trimming drops it from the generating nodes.
- The new summary is cut at ``max_summary_tokens`` as a hard stop and replaces the old
  one in every generating node's system message; their history starts after
  ``covered_through``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from runtime.backends.base import ChatMessage, GenerationRequest, GenerationResult
from runtime.dialogue.history import Entry, Reply, Summary, Turn
from runtime.prompting.budget import TokenCounter, messages_tokens
from runtime.prompting.prompt import replayed_groups
from runtime.prompting.templates import render_template

if TYPE_CHECKING:  # pragma: no cover
    from runtime.nodes.summarize.node import Summarize

WORDS_PER_TOKEN = 0.75  # English averages about three words to four tokens
# A shortened message keeps at least this many of its words (its start and end). Fewer would
# tell the summarizer nothing; a fold prompt that cannot hold even that is a configuration error.
MIN_KEPT_WORDS = 8
MARKER_WORDS = 5  # "[... N words omitted ...]"


def turn_tokens(turn: Turn, count: TokenCounter) -> int:
    """What a past turn costs in a prompt that replays it whole."""
    return sum(messages_tokens(group, count) for group in replayed_groups(turn))


class TurnCosts:
    """``turn_tokens`` of past turns, remembered between runs of one Summarize node (one tokenizer):
    each turn is counted once, not again on every turn while it waits to be folded. Keep one for
    the agent's life (``run.cache()``). A turn is known by identity: history turns are never
    changed in place (an edited turn is a new ``Turn``)."""

    def __init__(self) -> None:
        # id(turn) -> (the turn, kept so its id is not reused; its entries list; their number; cost)
        self._known: dict[int, tuple[Turn, list[Entry], int, int]] = {}

    def total(self, turns: list[Turn], count: TokenCounter) -> int:
        """The cost of ``turns``; only these are remembered for the next call (the others were folded)."""
        known, self._known = self._known, {}
        total = 0
        for turn in turns:
            found = known.get(id(turn))
            if found is None or found[0] is not turn or found[1] is not turn.entries or found[2] != len(turn.entries):
                found = (turn, turn.entries, len(turn.entries), turn_tokens(turn, count))
            self._known[id(turn)] = found
            total += found[3]
        return total


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


def _largest(fits: Callable[[int], bool], low: int, high: int) -> int:
    """The largest ``n`` in ``low..high`` for which ``fits(n)`` holds (``fits`` grows false as ``n``
    grows); ``low - 1`` when not even ``low`` fits. The answer always fits.

    Probes go up from ``low`` in doubling steps, then halve the last step: ``fits(n)`` costs about
    ``n`` (a transcript of ``n`` turns, a text of ``n`` words), so the search costs about the answer,
    however large ``high`` is (a history of 100,000 turns pending, of which 20 fit)."""
    if not fits(low):
        return low - 1
    step = 1
    while low < high:
        probe = min(low + step, high)
        if not fits(probe):
            high = probe - 1
            break
        low, step = probe, step * 2
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def cut_to_tokens(text: str, max_tokens: int, count: TokenCounter) -> str:
    """``text`` cut so it counts at most ``max_tokens`` tokens (mid-sentence if need be)."""
    if count(text) <= max_tokens:
        return text
    words = text.split(" ")
    kept = _largest(lambda n: count(" ".join(words[:n])) <= max_tokens, 0, len(words))
    return " ".join(words[: max(kept, 0)])


def shorten_words(text: str, keep: int) -> tuple[str, int]:
    """``text`` with only its first and last words, ``keep`` in all, around a marker saying how
    many were left out; and that number. Text barely longer than ``keep`` stays whole: the
    marker would cost what it saves."""
    words = text.split()
    if len(words) <= keep + MARKER_WORDS:
        return text, 0
    head, tail = (keep + 1) // 2, keep // 2
    omitted = len(words) - keep
    kept = words[:head] + [f"[... {omitted} words omitted ...]"] + words[len(words) - tail:]
    return " ".join(kept), omitted


def shorten_turn(turn: Turn, keep: int) -> tuple[Turn, int]:
    """``turn`` as the summarizer reads it with every replayed message shortened to ``keep`` words
    (a tool's result; its arguments stay whole); and the number of words left out."""
    player, omitted = shorten_words(turn.player, keep)
    entries: list[Entry] = []
    for entry in turn.entries:
        if not entry.replay:
            entries.append(entry)
        elif isinstance(entry, Reply):
            text, n = shorten_words(entry.text, keep)
            entries.append(replace(entry, text=text))
            omitted += n
        else:
            result, n = shorten_words(entry.result, keep)
            entries.append(replace(entry, result=result))
            omitted += n
    return Turn(player, entries), omitted


def _longest_message(turn: Turn) -> int:
    texts = [turn.player] + [
        e.text if isinstance(e, Reply) else e.result for e in turn.entries if e.replay
    ]
    return max(len(t.split()) for t in texts)


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
    shortened_turn: int | None = None  # a turn too long to fold whole, folded shortened
    omitted_words: int = 0  # words left out of that turn
    summary_omitted_words: int = 0  # words left out of the previous summary to make room


def fold_messages(node: Summarize, previous: Summary | None, turns: list[Turn], source: str = "") -> list[ChatMessage]:
    """The fold request: the node's system prompt, then its template with the previous summary and transcript."""
    values = {
        "previous_summary": previous.text if previous else "",
        "transcript": transcript(turns),
        "max_words": max(1, int(node.max_summary_tokens * WORDS_PER_TOKEN)),
    }
    user = render_template(node.template, values, node.id, "template", source)
    messages = [ChatMessage("system", node.system_prompt)] if node.system_prompt.strip() else []
    return messages + [ChatMessage("user", user)]


def fold_turns(
    node: Summarize,
    turns: list[Turn],
    previous: Summary | None,
    context_size: int,
    count: TokenCounter,
    generate: Callable[[GenerationRequest], GenerationResult],
    source: str = "",
    costs: TurnCosts | None = None,
) -> Fold:
    """Fold pending turns if the trigger is reached. ``turns`` includes the running turn. With
    ``costs`` (kept between the node's runs), turns already counted are not counted again."""
    first = previous.covered_through + 1 if previous else 0
    unsummarized = turns[first:]
    tokens = (costs or TurnCosts()).total(unsummarized, count)
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

    def cost(summary: Summary | None, folded: list[Turn]) -> int:
        return messages_tokens(fold_messages(node, summary, folded, source), count)

    # The largest prefix that fits (a longer prefix never costs less).
    k = _largest(lambda n: cost(previous, pending[:n]) <= room, 1, len(pending))
    folded_turns = pending[:k]
    summary_seen = previous
    if k == 0:
        shortened = _shortened_fold(previous, pending[0], lambda s, t: cost(s, [t]) <= room)
        if shortened is None:
            fold.reason = "the fold prompt does not fit even with the turn shortened"
            fold.warnings.append(
                f"cannot fold turn {first}: the summarizer's context of {context_size} tokens leaves {room} for "
                f"the prompt beside max_summary_tokens ({node.max_summary_tokens}), and even with each message "
                f"and the previous summary shortened to {MIN_KEPT_WORDS} words it does not fit (the system prompt "
                f"and template alone take {cost(None, [])}). Shorten the Summarize node's system prompt or "
                "template, raise its context_size or lower max_summary_tokens."
            )
            return fold
        summary_seen, turn_seen, fold.omitted_words, fold.summary_omitted_words = shortened
        folded_turns, k = [turn_seen], 1
        parts = []
        if fold.omitted_words:
            fold.shortened_turn = first
            parts.append(f"its longest messages lost {fold.omitted_words} words from their middle")
        if fold.summary_omitted_words:
            parts.append(f"the previous summary lost {fold.summary_omitted_words} words from its middle")
        fold.warnings.append(
            f"turn {first} does not fit the fold prompt whole: the prompt would need {cost(previous, pending[:1])} "
            f"tokens, but the summarizer's context of {context_size} tokens leaves "
            f"{room} beside max_summary_tokens ({node.max_summary_tokens}). Folded it shortened ({'; '.join(parts)}). "
            "To fold such turns whole, raise the Summarize node's context_size or lower max_summary_tokens."
        )
    if k < len(pending):
        fold.warnings.append(f"folded {k} of {len(pending)} pending turns; the rest fold next time")

    fold.messages = fold_messages(node, summary_seen, folded_turns, source)
    request = GenerationRequest(
        fold.messages, max_tokens=node.max_summary_tokens, temperature=node.temperature, top_p=node.top_p,
        min_p=node.min_p, repeat_penalty=node.repeat_penalty, seed=node.seed,
    )
    fold.result = generate(request)
    if fold.result.cancelled:
        return fold
    text = cut_to_tokens(fold.result.text.strip(), node.max_summary_tokens, count)
    if not text:
        fold.reason = "the model wrote an empty summary"
        fold.warnings.append("the model wrote an empty summary; the previous one is kept")
        return fold
    fold.summary = Summary(text, covered_through=first + k - 1, folded_turns=k, node=node.id)
    return fold


def _shortened_fold(
    previous: Summary | None, turn: Turn, fits: Callable[[Summary | None, Turn], bool]
) -> tuple[Summary | None, Turn, int, int] | None:
    """The previous summary and ``turn`` shortened so that ``fits`` them: the turn first (its messages
    keep as many words as fit, at least ``MIN_KEPT_WORDS``), then, if the previous summary still
    leaves no room, the summary too, and then the turn grows back into what is left. Returns the
    summary and turn to send and the words left out of each; None when nothing within reason fits."""
    longest = _longest_message(turn)

    def summary_cut(keep: int | None) -> tuple[Summary | None, int]:
        if previous is None or keep is None:
            return previous, 0
        text, omitted = shorten_words(previous.text, keep)
        return replace(previous, text=text), omitted

    def turn_fits(keep: int, summary_keep: int | None) -> bool:
        return fits(summary_cut(summary_keep)[0], shorten_turn(turn, keep)[0])

    summary_keep: int | None = None  # None: the previous summary goes whole
    keep = _largest(lambda n: turn_fits(n, None), MIN_KEPT_WORDS, max(longest, MIN_KEPT_WORDS))
    if keep < MIN_KEPT_WORDS:
        if previous is None:
            return None
        summary_words = len(previous.text.split())
        summary_keep = _largest(
            lambda n: turn_fits(MIN_KEPT_WORDS, n), MIN_KEPT_WORDS, max(summary_words, MIN_KEPT_WORDS)
        )
        if summary_keep < MIN_KEPT_WORDS:
            return None
        keep = _largest(lambda n: turn_fits(n, summary_keep), MIN_KEPT_WORDS, max(longest, MIN_KEPT_WORDS))
    summary, summary_omitted = summary_cut(summary_keep)
    shortened, omitted = shorten_turn(turn, keep)
    return summary, shortened, omitted, summary_omitted
