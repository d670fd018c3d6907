"""Keeping message contents apart from a chat template's markup.

A player who types ``<|im_end|>`` must not produce a control token. So a template (the model's own,
or a server's through ``/apply-template``) is rendered with a unique placeholder in place of each
message's content, and the rendered text is split at the placeholders: the pieces between them are
the template's markup (where control tokens are parsed), the contents go in as they are (where they
are not). The embedded backend and the llama.cpp server backend both build prompts this way.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from runtime.backends.base import ChatMessage
from runtime.problems import BackendError


def content_marks(count: int) -> tuple[str, list[str]]:
    """A fresh nonce and one placeholder per message: private-use characters that no tokenizer,
    template filter or player text produces by chance."""
    nonce = "pQ" + secrets.token_hex(6)  # a lower and an upper letter: any case filter changes it
    return nonce, [f"\ue000{nonce}:{i}\ue001" for i in range(count)]


def split_at_marks(text: str, messages: Sequence[ChatMessage], marks: Sequence[str], nonce: str, who: str,
                   instead: str) -> list[tuple[str, bool]]:
    """``text`` (rendered with ``marks`` as contents) as ``(piece, is_markup)`` pieces with each message's
    content put back. ``who`` names the template's owner in errors; ``instead`` says what to use instead."""
    parts: list[tuple[str, bool]] = []
    at = 0
    for i, (m, mark) in enumerate(zip(messages, marks)):
        found = text.find(mark, at)
        if found < 0 or text.count(mark) != 1:
            raise BackendError(
                f"{who} does not insert message {i + 1} ({m.role}) exactly once and unchanged, so its text "
                f"cannot be kept apart from the template's control tokens; {instead} whose template inserts "
                "each message's content as-is"
            )
        parts.append((text[at:found], True))
        parts.append((m.content, False))
        at = found + len(mark)
    parts.append((text[at:], True))
    if any(nonce in piece for piece, _ in parts[::2]):  # a placeholder the template cut up or copied
        raise BackendError(f"{who} alters message contents; {instead} whose template keeps them as they are")
    return parts
