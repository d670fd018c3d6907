"""Mustache highlighting for system prompts and templates."""

from __future__ import annotations

import re

from PySide6.QtGui import QColor, QFont, QSyntaxHighlighter, QTextCharFormat, QTextDocument

_TAG = re.compile(r"\{\{\{?\s*([#^/!>&]?)\s*([^}]*?)\s*\}?\}\}")
_OPEN_WITHOUT_CLOSE = re.compile(r"\{\{(?![^{}]*\}\})")


def _format(colour: str, bold: bool = False, italic: bool = False) -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setForeground(QColor(colour))
    if bold:
        fmt.setFontWeight(QFont.Weight.Bold)
    fmt.setFontItalic(italic)
    return fmt


class MustacheHighlighter(QSyntaxHighlighter):
    """Colours ``{{variables}}``, ``{{#sections}}``/``{{/sections}}`` and comments, and
    marks a ``{{`` that is never closed in red, so a broken template shows while typing."""

    VARIABLE = _format("#4fc1ff")
    SECTION = _format("#c586c0", bold=True)
    COMMENT = _format("#6a9955", italic=True)
    BROKEN = _format("#f14c4c", bold=True)

    def __init__(self, document: QTextDocument) -> None:
        super().__init__(document)

    def highlightBlock(self, text: str) -> None:
        for match in _TAG.finditer(text):
            sigil = match.group(1)
            fmt = self.COMMENT if sigil == "!" else self.SECTION if sigil in "#^/" and sigil else self.VARIABLE
            self.setFormat(match.start(), match.end() - match.start(), fmt)
        for match in _OPEN_WITHOUT_CLOSE.finditer(text):
            self.setFormat(match.start(), 2, self.BROKEN)


def mustache_tags(text: str) -> list[str]:
    """The tag names used in ``text`` (``vars.time_of_day``, ``#knowledge``...)."""
    return [m.group(1) + m.group(2) for m in _TAG.finditer(text)]
