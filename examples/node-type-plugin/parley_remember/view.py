"""How the editor shows a Remember node (imported by the editor only)."""

from __future__ import annotations

from editor.node_types import NodeView


def _summary(node, _asset) -> list[str]:
    value = node.value if len(node.value) <= 24 else node.value[:23] + "\u2026"
    lines = [f"{node.variable} \u2190 {value}"]
    if node.only_if_matches:
        lines.append(f"if the line matches /{node.only_if_matches}/")
    return lines


VIEW = NodeView(
    "Remember", "Remember", "Memory",
    "Keeps a line in an agent variable, so later turns can read it as {{vars.NAME}}.",
    _summary, colour=(150, 120, 40), groups=("General", "Memory", "Exits", "Layout"),
)
