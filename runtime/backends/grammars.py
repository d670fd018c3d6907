"""Output constraints as llama.cpp grammars (GBNF), shared by the embedded backend and the
llama.cpp server backend, which both take GBNF."""

from __future__ import annotations

from collections.abc import Sequence

from runtime.problems import BackendError


def _gbnf_literal(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def choices_grammar(choices: Sequence[str]) -> str:
    """A GBNF grammar whose only sentences are the given strings."""
    if not choices:
        raise BackendError("a constrained choice needs at least one allowed value")
    return "root ::= " + " | ".join(_gbnf_literal(c) for c in dict.fromkeys(choices))
