"""Two turns of one node side by side: the output, then the prompt part by part in two aligned
columns (the other turn left, this one right), words removed marked on the left and words added on
the right, runs of equal parts folded, and the first prompt part that differs marked and anchored
(``FIRST_DIFFERENCE``) so the view scrolls to it."""

from __future__ import annotations

import difflib
import html
import re
from dataclasses import dataclass

from runtime.diagnostics import NodeDiagnostics
from runtime.prompting.prompt import PART_LABELS, PromptPart

FIRST_DIFFERENCE = "first-difference"  # the anchor of the first prompt part that differs
FIRST_MARK = "\u25b6 first difference"
MOSTLY_DIFFERENT = 0.4  # below this share of words in common, two texts are marked as replaced whole


@dataclass(frozen=True)
class Row:
    """One prompt part as the columns show it."""

    label: str  # "SYSTEM \u00b7 System prompt", "USER \u00b7 History \u00b7 turn 2"
    text: str

    @property
    def key(self) -> str:
        return f"{self.label}\0{self.text}"


def _e(text: str) -> str:
    return html.escape(text).replace("\n", "<br/>")


def rows_of(diag: NodeDiagnostics, parts: list[PromptPart] | None) -> list[Row]:
    """A node's prompt as rows: its recorded parts (where each came from), else its messages."""
    if parts is None:
        return [Row(m.role.upper(), m.content) for m in diag.input.prompt]
    out = []
    for part in parts:
        label = f"{part.role.upper()} \u00b7 {PART_LABELS.get(part.kind, 'Input')}"
        if part.turn is not None:
            label += f" \u00b7 turn {part.turn + 1}"
        out.append(Row(label, part.text))
    return out


_WORDS = re.compile(r"\s+|[^\s\w]|\w+")


def marked_pair(old: str, new: str) -> tuple[str, str]:
    """``old`` with the words gone marked, and ``new`` with the words added marked, as HTML."""
    a, b = _WORDS.findall(old), _WORDS.findall(new)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    words = difflib.SequenceMatcher(None, [t for t in a if not t.isspace()], [t for t in b if not t.isspace()],
                                    autojunk=False)  # the spaces between words would make any two texts alike
    if words.ratio() < MOSTLY_DIFFERENT:
        # Two different texts: a word or a comma in common would only chop them into confetti
        return (f"<span class='del'>{_e(old)}</span>" if old else "",
                f"<span class='add'>{_e(new)}</span>" if new else "")
    left, right = [], []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            left.append(_e("".join(a[i1:i2])))
            right.append(_e("".join(b[j1:j2])))
            continue
        if i2 > i1:
            left.append(f"<span class='del'>{_e(''.join(a[i1:i2]))}</span>")
        if j2 > j1:
            right.append(f"<span class='add'>{_e(''.join(b[j1:j2]))}</span>")
    return "".join(left), "".join(right)


def _cell(head: str, body: str) -> str:
    head = f"<span class='head'>{head}</span><br/>" if head else ""
    return f"<td width='50%' valign='top'>{head}<span class='msg'>{body}</span></td>"


def _folded(count: int, rows: list[Row]) -> str:
    names = ", ".join(dict.fromkeys(r.label.split(" \u00b7 ", 1)[-1] for r in rows))
    return (f"<tr><td colspan='2' class='ctx'>\u2026 {count} part{'s' if count != 1 else ''} the same "
            f"({_e(names)}) \u2026</td></tr>")


def _paired(old: list[Row], new: list[Row]) -> list[tuple[Row | None, Row | None]]:
    """The parts of a changed run side by side: parts of one kind (their labels) facing each other,
    the others alone on their side (a turn's line that became history faces nothing)."""
    out: list[tuple[Row | None, Row | None]] = []
    labels = difflib.SequenceMatcher(None, [r.label for r in old], [r.label for r in new], autojunk=False)
    for op, i1, i2, j1, j2 in labels.get_opcodes():
        if op == "equal":
            out += list(zip(old[i1:i2], new[j1:j2]))
        else:
            out += [(r, None) for r in old[i1:i2]] + [(None, r) for r in new[j1:j2]]
    return out


def first_difference(old: list[Row], new: list[Row]) -> int:
    """The index in ``new`` of the first part that differs from ``old`` (-1: the prompts are the same)."""
    for op, _i1, _i2, j1, _j2 in difflib.SequenceMatcher(None, [r.key for r in old], [r.key for r in new],
                                                          autojunk=False).get_opcodes():
        if op != "equal":
            return j1
    return -1


def side_by_side_html(old_head: str, new_head: str, old_output: str, new_output: str,
                      old_rows: list[Row], new_rows: list[Row]) -> str:
    """The two turns in two aligned columns: the output, then the prompt part by part."""
    # A grid (border 1, no spacing): the two columns' cells line up and read as pairs, in a light or dark theme
    out = [("<table width='100%' border='1' cellspacing='0' cellpadding='4' style='border-color: #5a5a5a;"
           " border-style: solid;'>"),
           f"<tr><th width='50%' align='left'>{_e(old_head)}</th><th width='50%' align='left'>{_e(new_head)}</th></tr>",
           "<tr><td colspan='2' class='head'>OUTPUT</td></tr>"]
    if old_output == new_output:
        out.append(f"<tr><td colspan='2' class='ctx'>The same: <span class='msg'>{_e(new_output) or '<i>(empty)</i>'}"
                   "</span></td></tr>")
    else:
        left, right = marked_pair(old_output, new_output)
        out.append(f"<tr>{_cell('', left or '<i>(empty)</i>')}{_cell('', right or '<i>(empty)</i>')}</tr>")
    out.append("<tr><td colspan='2' class='head'>PROMPT</td></tr>")
    marked = False
    opcodes = difflib.SequenceMatcher(None, [r.key for r in old_rows], [r.key for r in new_rows],
                                      autojunk=False).get_opcodes()
    for op, i1, i2, j1, j2 in opcodes:
        if op == "equal":
            out.append(_folded(i2 - i1, new_rows[j1:j2]))
            continue
        for before, after in _paired(old_rows[i1:i2], new_rows[j1:j2]):
            mark = ""
            if not marked:  # on this turn's side, unless the part is gone from it
                marked = True
                mark = f"<a name='{FIRST_DIFFERENCE}'></a><span class='first'>&nbsp;{FIRST_MARK}&nbsp;</span> "
            absent = "<span class='ctx'>(not in this prompt)</span>"
            if before is not None and after is not None:
                left, right = marked_pair(before.text, after.text)
                cells = (_cell(_e(before.label) + " \u00b7 changed", left)
                         + _cell(mark + _e(after.label) + " \u00b7 changed", right))
            elif after is not None:
                cells = (_cell(absent, "")
                         + _cell(mark + _e(after.label) + " \u00b7 added", f"<span class='add'>{_e(after.text)}</span>"))
            else:
                assert before is not None
                cells = (_cell(mark + _e(before.label) + " \u00b7 removed", f"<span class='del'>{_e(before.text)}</span>")
                         + _cell(absent, ""))
            out.append(f"<tr>{cells}</tr>")
    if not marked:
        out.append("<tr><td colspan='2' class='ctx'>The prompts are the same.</td></tr>")
    out.append("</table>")
    return "".join(out)
