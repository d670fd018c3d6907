"""The Turn Inspector's text about one node on one turn: its figures (tokens, time, window, summary,
retrieval, warnings) and its prompt part by part, as HTML."""

from __future__ import annotations

import html

from runtime.diagnostics import GuardRecord, NodeDiagnostics
from runtime.prompting.budget import TRIM_TARGET_PERCENT
from runtime.prompting.prompt import PART_LABELS, PromptPart

PART_COLOURS = {
    "system": "#568cc8",
    "summary": "#aa78d2",
    "history": "#c8a050",
    "template": "#4fb3b3",
    "current": "#5ab46e",
    "this_turn": "#8fbf5a",
    "input": "#5ab46e",
    "output": "#e8e8e8",
}
STYLE = """
.head { font-size: small; font-weight: bold; }
.msg { white-space: pre-wrap; }
.warn { color: #e5c07b; }
.add { color: #8fd18f; background: #1f3a24; }
.del { color: #ff9a9a; background: #3a1f1f; }
.ctx { color: #9a9a9a; }
.first { color: #1e1e1e; background: #e5c07b; font-weight: bold; }
"""


def html_text(text: str) -> str:
    """``text`` escaped for HTML, its line breaks kept."""
    return html.escape(text).replace("\n", "<br/>")


def turns_range(first: int, last: int) -> str:
    """Turns as people count them (from 1); ``first`` and ``last`` count from 0."""
    return f"turn {first + 1}" if first == last else f"turns {first + 1}\u2013{last + 1}"


def trim_text(diag: NodeDiagnostics, summary_through: int = -1) -> str:
    """Which turns were folded into the summary, which were already out of the node's window, and which
    this turn trimmed. ``summary_through`` is the last turn the prompt's summary covers (-1: no summary)."""
    trim = diag.trim
    if trim is None:
        return ""
    lines = []
    if summary_through >= 0:
        lines.append(f"In the summary (not replayed): {turns_range(0, summary_through)}.")
    gone_until = trim.window_start_before - 1
    if gone_until > summary_through:
        lines.append(f"Already out of the window: {turns_range(summary_through + 1, gone_until)}.")
    first = max(trim.window_start_before, summary_through + 1)
    if trim.window_start_after > first:
        lines.append(
            f"<b>Trimmed on this turn: {turns_range(first, trim.window_start_after - 1)}</b> "
            f"({trim.dropped_turns} turn{'s' if trim.dropped_turns != 1 else ''} with content): the prompt passed "
            f"its budget, so the oldest turns were dropped down to {TRIM_TARGET_PERCENT} % of it.")
    elif trim.triggered:
        lines.append("The prompt passed its budget, but no history was left to drop.")
    else:
        lines.append("No trim on this turn.")
    lines.append(f"History entries sent: {trim.history_entries}.")
    return " ".join(lines)


def stats_html(diag: NodeDiagnostics, parts: list[PromptPart], summary_through: int) -> str:
    """A node's figures on a turn: tokens, time, its window and trims, its summary, what it retrieved and
    its warnings. ``parts``: its prompt's parts (empty when not recorded); ``summary_through`` as for
    ``trim_text``."""
    t, tm = diag.tokens, diag.timings
    rows = []
    if diag.bypassed:
        port = {"default_exit": "next", "fallback_exit": "fallback"}.get(diag.exit, diag.exit.removeprefix("intent:"))
        rows.append(f"<span class='warn'><b>Bypassed</b>: not run; the turn passed along its "
                    f"{html.escape(port or 'next')} exit (Ctrl+B on the canvas runs it again)</span>")
    if t.budget is not None:
        rows.append(f"<b>Tokens</b> prompt {t.prompt} (counted {t.counted} of a budget of {t.budget}) \u00b7 "
                    f"reused {t.reused} \u00b7 evaluated {t.evaluated} \u00b7 generated {t.generated}"
                    + (" \u00b7 <span class='warn'>cold cache</span>" if t.cold else ""))
        kinds = {p.kind for p in parts}
        if "template" in kinds and "history" in kinds and t.evaluated:
            rows.append("<span style='color:gray'>Why the previous turn was read again: it comes back in history "
                        "as the player's plain line, without the template that framed it last turn (as the "
                        "spec says), so the cache matches only up to that turn.</span>")
    rows.append(f"<b>Time</b> {tm.total_ms:.0f} ms (reading the prompt {tm.prompt_ms:.0f} ms, "
                f"generating {tm.generate_ms:.0f} ms) \u00b7 exit {html.escape(diag.exit or '-')} \u2192 "
                f"{html.escape(diag.next_node or 'END')}")
    if diag.trim is not None:
        rows.append(f"<b>Window</b> {trim_text(diag, summary_through)}")
    if diag.summary is not None:
        s = diag.summary
        rows.append(f"<b>Summary</b> folded {s.folded_turns} turns, now covering turns 0\u2013{s.covered_through} "
                    f"({s.summary_chars} characters; {s.unsummarized_tokens} tokens were not yet summarized)")
    if diag.guard is not None:
        rows.append(guard_html(diag.guard))
    if diag.retrieved:
        found = ", ".join(f"{html.escape(r.id)} ({r.score:.2f})" for r in diag.retrieved)
        rows.append(f"<b>Retrieved</b> {found}")
    for warning in diag.warnings:
        rows.append(f"<span style='color:#e5c07b'>\u26a0 {html.escape(warning)}</span>")
    return "<br/>".join(rows)


GUARD_TEXT_CHARS = 300  # of the checked text shown; the prompt view below holds a model check's whole input


def guard_html(record: GuardRecord) -> str:
    """What a Guard checked, which check fired and why (or that the text passed), each check's time and
    the guard's, and the reply it withdrew."""
    what = "the reply held back" if record.checked == "reply" else "the line"
    text = record.text if len(record.text) <= GUARD_TEXT_CHARS else record.text[:GUARD_TEXT_CHARS - 1] + "\u2026"
    rows = [f"<b>Guard</b> checked {what}: <span class='msg'>\u201c{html_text(text)}\u201d</span>"]
    if record.policy:
        fired = next((c.check for c in record.checks if c.policy == record.policy), "")
        rows.append(f"<span class='del'><b>Broke {html.escape(record.policy)}</b></span>"
                    + (f" (found by {html.escape(fired)})" if fired else "")
                    + (f": {html.escape(record.why)}" if record.why else ""))
    else:
        rows.append("<span class='add'><b>Passed</b></span>: no policy broken")
    checks = " \u00b7 ".join(
        f"{html.escape(c.check)} {c.ms:.1f} ms" + (f" \u2192 {html.escape(c.policy)}" if c.policy else " passed")
        for c in record.checks) or "no check ran"
    rows.append(f"<b>Checks</b> {checks} \u00b7 total {record.ms:.1f} ms")
    if record.withdrew:
        rows.append(f"<span class='warn'><b>Withdrew</b> the reply of {html.escape(record.withdrew)}: "
                    "the player never saw it, and later turns do not replay it</span>")
    return "<br/>".join(rows)


def prompt_html(diag: NodeDiagnostics, parts: list[PromptPart] | None) -> str:
    """A node's prompt exactly as the model saw it, part by part in its colour, then its output."""
    if parts is None:
        parts = [PromptPart("input", m.role, m.content, i) for i, m in enumerate(diag.input.prompt)]
    blocks = []
    for part in parts:
        colour = PART_COLOURS.get(part.kind, "#cccccc")
        label = PART_LABELS.get(part.kind, "Input")
        if part.turn is not None:
            label += f" \u00b7 turn {part.turn + 1}"
        tokens = f" \u00b7 {part.tokens} tokens" if part.tokens else ""
        blocks.append(
            f"<table width='100%' cellspacing='0' cellpadding='4' style='border-left: 4px solid {colour};"
            f" margin-bottom: 6px;'><tr><td>"
            f"<span class='head' style='color:{colour}'>{part.role.upper()} \u00b7 {label}{tokens}</span><br/>"
            f"<span class='msg'>{html_text(part.text)}</span></td></tr></table>")
    blocks.append(
        f"<table width='100%' cellspacing='0' cellpadding='4' style='background:#2b2b2e;'><tr><td>"
        f"<span class='head'>OUTPUT \u00b7 {diag.tokens.generated} tokens</span><br/>"
        f"<span class='msg'>{html_text(diag.output) or '<i>(empty)</i>'}</span></td></tr></table>")
    return "".join(blocks)
