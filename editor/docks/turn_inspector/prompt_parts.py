"""A node's prompt told apart: system prompt, summary, replayed history, rendered template, current turn.

The diagnostics hold the messages exactly as the model received them; this reads
their structure back the way ``runtime.prompt.build_prompt`` laid them out (system
message, then ``trim.history_entries`` history entries, then the current turn). No
Qt here, so the worker thread can call it with the model's tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runtime.asset import GeneratingNode
from runtime.diagnostics import NodeDiagnostics, PromptMessage, TurnDiagnostics
from runtime.prompt import SUMMARY_HEADING, slot_text

# text, whole_message -> its cost in the budget (whole_message adds the per-message overhead)
PartCost = Callable[[str, bool], int]

PART_LABELS = {
    "system": "System prompt",
    "summary": "Summary",
    "history": "Replayed history",
    "template": "Rendered template",
    "current": "Current turn",
    "this_turn": "This turn, from an earlier node",
    "output": "Output",
}


@dataclass(frozen=True)
class PromptPart:
    """One message (or the summary inside the system message) of a node's prompt, told apart by where it came from.

    ``kind`` is one of: ``system``, ``summary``, ``history``, ``template``, ``current``, ``this_turn``
    (what earlier nodes added this turn), ``output``.
    """

    kind: str
    role: str
    text: str
    message: int  # index of the message in the prompt
    turn: int | None = None  # for history: the turn it replays
    tokens: int = 0  # its cost in the budget (tokens plus the per-message overhead on the message's first part)



def _no_cost(_text: str, _whole: bool) -> int:
    return 0


def split_prompt(diag: NodeDiagnostics, node: GeneratingNode, turn: TurnDiagnostics,
                 cost: PartCost = _no_cost) -> list[PromptPart]:
    """The node's prompt as ``PromptPart``s, in order (summary and template split out of their messages)."""
    messages = diag.input.prompt
    parts: list[PromptPart] = []
    i = 0
    if messages and messages[0].role == "system":
        text = messages[0].content
        heading = f"\n\n{SUMMARY_HEADING}\n"
        if heading in text or text.startswith(f"{SUMMARY_HEADING}\n"):
            cut = text.find(heading) if heading in text else 0
            own, summary = text[:cut], text[cut:].lstrip("\n")
            parts.append(PromptPart("system", "system", own, 0, tokens=cost(own, True)))
            parts.append(PromptPart("summary", "system", summary, 0, tokens=cost(summary, False)))
        else:
            parts.append(PromptPart("system", "system", text, 0, tokens=cost(text, True)))
        i = 1

    # History: trim.history_entries entries; a tool call and its result are one entry.
    entries = diag.trim.history_entries if diag.trim else 0
    history: list[tuple[int, PromptMessage]] = []
    while entries > 0 and i < len(messages):
        history.append((i, messages[i]))
        pair = messages[i].role == "assistant" and messages[i].name and i + 1 < len(messages) \
            and messages[i + 1].role == "tool"
        if pair:
            history.append((i + 1, messages[i + 1]))
            i += 1
        i += 1
        entries -= 1
    # Turn numbers, counted back from the turn before this one: each player line starts a turn.
    numbered: list[tuple[int, PromptMessage, int]] = []
    number = turn.turn - 1
    for index, message in reversed(history):
        numbered.append((index, message, number))
        if message.role == "user":
            number -= 1
    for index, message, number in reversed(numbered):
        parts.append(PromptPart("history", message.role, message.content, index, turn=number,
                                tokens=cost(message.content, True)))

    # The current turn: the line with the rendered template, then what earlier nodes added.
    if i < len(messages):
        message = messages[i]
        line = _line_for(node, turn)
        template, said = _split_template(message.content, line, node.placement) if node.template else ("", message.content)
        overhead = cost("", True)
        if template:
            first, second = (template, said) if node.placement == "before" else (said, template)
            kinds = ("template", "current") if node.placement == "before" else ("current", "template")
            joined_cost = cost(message.content, False)
            first_cost = cost(first, False)
            parts.append(PromptPart(kinds[0], "user", first, i, tokens=first_cost + overhead))
            parts.append(PromptPart(kinds[1], "user", second, i, tokens=max(joined_cost - first_cost, 0)))
        else:
            parts.append(PromptPart("current", message.role, message.content, i, tokens=cost(message.content, True)))
        for j in range(i + 1, len(messages)):
            m = messages[j]
            parts.append(PromptPart("this_turn", m.role, m.content, j, tokens=cost(m.content, True)))
    return parts


def _line_for(node: GeneratingNode, turn: TurnDiagnostics) -> str | None:
    """The line the node answered: the player's, or the slot its ``input`` names (when we can tell)."""
    if not node.input:
        return turn.player
    for earlier in turn.nodes:
        if earlier.node == node.input:
            return slot_text(earlier.output)
    return None


def _split_template(content: str, line: str | None, placement: str) -> tuple[str, str]:
    """(rendered template, the line) out of the current turn's user message; ('', content) if unsure."""
    if line is None or content == line:
        return "", content
    if placement == "before" and content.endswith("\n\n" + line):
        return content[: -len(line) - 2], line
    if placement != "before" and content.startswith(line + "\n\n"):
        return content[len(line) + 2:], line
    return "", content


def budget_segments(parts: list[PromptPart]) -> dict[str, int]:
    """Tokens per budget segment: system, summary, history, current turn (template and this turn's entries included)."""
    segments = {"system": 0, "summary": 0, "history": 0, "current": 0}
    for part in parts:
        key = part.kind if part.kind in segments else "current"
        segments[key] += part.tokens
    return segments
