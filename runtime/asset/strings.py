"""The string table: every authored text of an asset as a CSV file for translators and voice
actors, and their translation written back into a copy of the asset (docs/localisation.md).

**Why CSV.** Translators' tools (memoQ, Trados, Crowdin, Phrase, Lokalise) all import a CSV with
an id, a source and a target column, and so does every spreadsheet, which is what a voice-recording
script and a studio's own pipeline are kept in; XLIFF is for CAT tools alone. The file is UTF-8
with a byte order mark (so Excel reads it as UTF-8), RFC 4180 quoting, and the columns
``id, source, translation, context``; a table read back may have its columns in any order, columns of
its own, and semicolons or tabs between cells.

**What is in it.** The texts a model reads or a player hears, and the designer's notes:

- a node's prose fields (those marked ``multiline``: system prompts and templates);
- in a node's records (intents, attributes, tools, policies, knowledge entries) the fields named
  ``RECORD_TEXT_FIELDS``: descriptions, a guard policy's canned ``reply``, a knowledge entry's ``text``;
- a comment's (a note's or a backdrop's) ``title`` and ``text``.

Each text has an id: ``NODE.FIELD`` (``greet.system_prompt``), ``NODE.LIST.NAME.FIELD`` for a record
with a name (``classify.intents.buy.description``; its index when the records have no names), and
``comments.COMMENT.FIELD``. Ids never change while the asset's node ids and record names stay.
Empty texts are not written.

**Import.** ``translate`` gives a copy of the asset with each row's translation in place of its
text; the asset itself never changes. A row with an empty translation keeps the source text. Every
row is checked before anything is written, and any error refuses the whole table, naming its row and
column as a spreadsheet shows them (the header is row 1): an id no text has, an id twice, a row
without its id, source or translation cell, text under no header, a source that is not the
asset's text any more (it changed since the export, or a spreadsheet changed it), a translated
template that is not Mustache, a lone surrogate or bytes that are not UTF-8, and CSV a reader cannot
parse.
"""

from __future__ import annotations

import csv
import difflib
import io
import os
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from runtime.asset.file import problems_from_validation
from runtime.asset.model import Asset, NodeBase
from runtime.files.reading import MAX_INPUT_BYTES, input_file_problem
from runtime.files.writing import atomic_write_text
from runtime.names import without_surrogates
from runtime.problems import InputError, Problem
from runtime.prompting.language import language_tag_problem
from runtime.prompting.templates import TemplateError, check_template

COLUMNS = ("id", "source", "translation", "context")
REQUIRED_COLUMNS = ("id", "source", "translation")
# The text fields of a node's records (intents, attributes, tools, policies, knowledge entries).
RECORD_TEXT_FIELDS = ("description", "reply", "text")
COMMENT_TEXT_FIELDS = ("title", "text")
COMMENTS = "comments"  # the ids of comments' texts start with this
# What a translator is told a text is for (the context column), by field; other fields say their help text.
WHAT_IT_IS = {
    "system_prompt": "Instructions the model reads before it answers (a character's voice and rules).",
    "template": "Framing the model reads around the player's line. A Mustache template: keep every {{tag}} as it is.",
    "description": "Read by the model: what this one means.",
    "reply": "A line the player hears word for word (voice it).",
    "text": "A fact the model reads and may repeat.",
}
COMMENT_NOTE = "A designer's note on the canvas: never shown to the player or the model."
MAX_TABLE_BYTES = MAX_INPUT_BYTES
MAX_REPORTED_PROBLEMS = 20
BOM = "\ufeff"
DELIMITERS = (",", ";", "\t")  # a comma as written; Excel in a locale whose decimal mark is a comma saves ";"

__all__ = [
    "COLUMNS", "AuthoredText", "StringTableError", "TableRow", "Translation", "authored_texts", "parse_string_table",
    "read_string_table", "save_string_table", "string_table", "translate",
]


class StringTableError(InputError):
    """A string table that cannot be imported; each problem names its row and column."""


@dataclass(frozen=True)
class AuthoredText:
    """One text of an asset: its table id, the text, what a translator is told about it, and where it
    is (``path`` below the node or comment: ``("system_prompt",)``, ``("intents", 2, "description")``)."""

    id: str
    text: str
    context: str
    owner: Literal["node", "comment"]
    owner_id: str
    path: tuple[str | int, ...]
    mustache: bool = False


@dataclass(frozen=True)
class TableRow:
    """One row of an imported table, numbered as a spreadsheet shows it (the header is row 1)."""

    row: int
    id: str
    source: str
    translation: str
    columns: tuple[int, int, int] = (0, 1, 2)  # where the id, source and translation cells are (0 is A)


@dataclass(frozen=True)
class Translation:
    """What ``translate`` made: the translated copy, and the ids of its texts that kept the source text."""

    asset: Asset
    translated: list[str]
    untranslated: list[str]


# --- the texts of an asset ---------------------------------------------------------------------


def _extra(info: Any) -> dict[str, Any]:
    return info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}


def _record_model(annotation: Any) -> type[BaseModel] | None:
    """The record model of a ``list[Record]`` field, or None."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0]
    return None


def _record_keys(records: list[BaseModel]) -> list[str]:
    """How ids name a list's records: by name when every record has a different one, else by index."""
    names = [getattr(r, "name", None) for r in records]
    if all(isinstance(n, str) and n for n in names) and len(set(names)) == len(names):
        return [str(n) for n in names]
    return [str(i) for i in range(len(records))]


def _node_texts(node: NodeBase) -> Iterator[AuthoredText]:
    where = f"{node.type_name} node {node.display_title!r}" + (f" ({node.id})" if node.title else "")
    for name, info in type(node).model_fields.items():
        value = getattr(node, name)
        if info.annotation is str and _extra(info).get("multiline"):
            mustache = bool(_extra(info).get("mustache"))
            yield AuthoredText(f"{node.id}.{name}", value, _context(where, name, WHAT_IT_IS.get(name, info.description)),
                               "node", node.id, (name,), mustache)
            continue
        record = _record_model(info.annotation)
        if record is None or not value:
            continue
        fields = [f for f in RECORD_TEXT_FIELDS if f in record.model_fields and record.model_fields[f].annotation is str]
        for index, (key, item) in enumerate(zip(_record_keys(value), value, strict=True)):
            for field in fields:
                label = f"{_singular(name)} {key}: {field}"
                what = WHAT_IT_IS.get(field, record.model_fields[field].description)
                yield AuthoredText(f"{node.id}.{name}.{key}.{field}", getattr(item, field), _context(where, label, what),
                                   "node", node.id, (name, index, field))


def _singular(name: str) -> str:
    """A list field's record, in words: intents -> intent, policies -> policy."""
    return name[:-3] + "y" if name.endswith("ies") else name.removesuffix("s")


def _context(where: str, field: str, what: str | None) -> str:
    return f"{where}, {field.replace('_', ' ')}." + (f" {what.strip()}" if what else "")


def authored_texts(asset: Asset) -> list[AuthoredText]:
    """Every authored text of ``asset``, empty ones included, in the order the table lists them:
    the nodes in file order, each field in its model's order, then the comments."""
    texts = [text for node in asset.nodes for text in _node_texts(node)]
    for comment in asset.comments:
        where = f"{comment.kind} {comment.title!r}" if comment.title else comment.kind
        for field in COMMENT_TEXT_FIELDS:
            texts.append(AuthoredText(f"{COMMENTS}.{comment.id}.{field}", getattr(comment, field),
                                      _context(f"Canvas {where} ({comment.id})", field, COMMENT_NOTE),
                                      "comment", comment.id, (field,)))
    return texts


# --- export ------------------------------------------------------------------------------------


def string_table(asset: Asset) -> str:
    """The CSV text of ``asset``'s string table: a byte order mark, the header, then a row per
    text that is not empty, its translation empty. Lone surrogates are written as U+FFFD."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    for text in authored_texts(asset):
        if text.text.strip():
            writer.writerow([text.id, without_surrogates(text.text), "", text.context])
    return BOM + out.getvalue()


def save_string_table(asset: Asset, path: str | os.PathLike[str]) -> int:
    """Write ``asset``'s string table to ``path`` (atomically); the number of texts written."""
    atomic_write_text(path, string_table(asset))
    return sum(1 for text in authored_texts(asset) if text.text.strip())


# --- reading a table ---------------------------------------------------------------------------


def _letter(index: int) -> str:
    """A spreadsheet's column letter for a 0-based column: A, B, ... Z, AA."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def _place(row: int, column: int | None = None, name: str = "") -> str:
    if column is None:
        return f"row {row}"
    return f"row {row}, column {_letter(column)}" + (f" ({name})" if name else "")


def _bad_text(cell: str) -> str:
    """Why a cell (decoded with ``surrogateescape``) is not text, or ''."""
    if cell.isascii() or not any("\ud800" <= c <= "\udfff" for c in cell):
        return ""
    raw = cell.encode("utf-8", "surrogateescape")
    try:
        decoded = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        return (f"holds bytes that are not UTF-8 (0x{raw[exc.start]:02X} at byte {exc.start} of the cell): "
                "save the table as UTF-8 (in Excel: CSV UTF-8)")
    at = next(i for i, c in enumerate(decoded) if "\ud800" <= c <= "\udfff")
    return (f"holds a lone surrogate (U+{ord(decoded[at]):04X} at character {at}), which is not text; "
            "write the character it was meant to be")


def parse_string_table(data: bytes, source: str = "<strings>") -> list[TableRow]:
    """The rows of a string table's bytes, or ``StringTableError`` naming each bad row and column:
    CSV that cannot be parsed, a header without the id, source and translation columns, a row whose
    cells stop before them or hold text under no header, and cells that are not text."""
    text = data.removeprefix(BOM.encode()).decode("utf-8", "surrogateescape")
    csv.field_size_limit(max(csv.field_size_limit(), MAX_TABLE_BYTES))  # a system prompt may be long
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=_delimiter(text), strict=True)
    problems: list[Problem] = []
    rows: list[TableRow] = []
    header: dict[str, int] | None = None
    width = 0

    def problem(message: str, row: int, column: int | None = None, name: str = "") -> None:
        problems.append(Problem("error", message, source, field=_place(row, column, name)))

    number = 0
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            problem(f"not CSV a reader can parse (line {reader.line_num} of the file): {exc}. Nothing was read "
                    "after it", number + 1)
            break
        number += 1
        names = header or {}
        for index, cell in enumerate(cells):
            bad = _bad_text(cell)
            if bad:
                shown = next((n for n, i in names.items() if i == index), "")
                problem(f"the cell {bad}", number, index, shown)
        if not any(cell.strip() for cell in cells):
            continue  # a blank row
        if header is None:
            header, width = _read_header(cells, number, problem), len(cells)
            if header is None:
                break
            continue
        needed = max(header[c] for c in REQUIRED_COLUMNS)
        if len(cells) <= needed:
            missing = [c for c in REQUIRED_COLUMNS if header[c] >= len(cells)]
            problem(f"the row ends after column {_letter(len(cells) - 1)}: it has no "
                    f"{' and no '.join(missing)} cell ({', '.join(_letter(header[c]) for c in missing)})",
                    number, len(cells), missing[0])
            continue
        stray = next((i for i in range(width, len(cells)) if cells[i].strip()), None)
        if stray is not None:
            problem(f"text under no header ({without_surrogates(_short(cells[stray]))}): the header has "
                    f"{width} column{'s' if width != 1 else ''}; move it into a column with a header or remove it",
                    number, stray)
            continue
        rows.append(TableRow(number, cells[header["id"]].strip(), cells[header["source"]],
                             cells[header["translation"]], tuple(header[c] for c in REQUIRED_COLUMNS)))
    if header is None and not problems:
        problem(f"the table is empty: its first row is the header {', '.join(COLUMNS)}", 1)
    if problems:
        raise StringTableError(_capped(problems))
    return rows


def _delimiter(text: str) -> str:
    """The cells' separator: a comma, or the semicolon or tab a spreadsheet in some locales saves with,
    whichever splits the header into the needed columns."""
    first = text.lstrip("\r\n").split("\n", 1)[0]
    for delimiter in DELIMITERS:
        if set(REQUIRED_COLUMNS) <= {cell.strip().strip('"').lower() for cell in first.split(delimiter)}:
            return delimiter
    return DELIMITERS[0]


def _read_header(cells: list[str], number: int, problem: Any) -> dict[str, int] | None:
    """Column name -> index (names as written, any case, any order; other columns are kept out of
    the import), or None after reporting what is wrong."""
    header: dict[str, int] = {}
    for index, cell in enumerate(cells):
        name = cell.strip().lower()
        if name in header and name in COLUMNS:
            problem(f"the header names {name!r} twice (columns {_letter(header[name])} and {_letter(index)})",
                    number, index, name)
            return None
        header.setdefault(name, index)
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        problem(f"the header (the first row) has no {' and no '.join(repr(m) for m in missing)} column: it needs "
                f"{', '.join(REQUIRED_COLUMNS)}, as `parley strings export` writes them", number)
        return None
    return header


def read_string_table(path: str | os.PathLike[str]) -> list[TableRow]:
    """``parse_string_table`` of the file at ``path``; only a regular file of at most
    ``MAX_TABLE_BYTES`` is read."""
    refused = input_file_problem(path, MAX_TABLE_BYTES)
    if refused:
        raise StringTableError([Problem("error", refused, str(path))])
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_TABLE_BYTES + 1)
    except (OSError, ValueError) as exc:
        message = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise StringTableError([Problem("error", f"cannot read the file: {message}", str(path))]) from None
    if len(data) > MAX_TABLE_BYTES:
        raise StringTableError([Problem("error", f"the file is over {MAX_TABLE_BYTES // 2**20} MB; it is not read",
                                        str(path))])
    return parse_string_table(data, str(path))


# --- import ------------------------------------------------------------------------------------


def _lines(text: str) -> str:
    """Text with every line break as ``\\n`` (a spreadsheet may write a cell's breaks as CR LF)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _short(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def translate(asset: Asset, rows: list[TableRow], source: str = "<strings>", language: str | None = None
              ) -> Translation:
    """A copy of ``asset`` with each row's translation in place of the text its id names (an empty
    translation keeps the text), and its ``language`` set when given. ``asset`` is not changed.
    Raises ``StringTableError`` naming every bad row and column; then nothing is translated."""
    texts = {text.id: text for text in authored_texts(asset)}
    problems: list[Problem] = []

    def problem(message: str, row: TableRow, name: str) -> None:
        column = row.columns[REQUIRED_COLUMNS.index(name)]
        problems.append(Problem("error", message, source, field=_place(row.row, column, name)))

    if language is not None and language_tag_problem(language):
        problems.append(Problem("error", language_tag_problem(language), source, field="language"))
    seen: dict[str, int] = {}
    chosen: dict[str, tuple[TableRow, str]] = {}
    for row in rows:
        if not row.id:
            problem("no id: every row names the text it translates in its id column, as exported", row, "id")
            continue
        if row.id in seen:
            problem(f"the id {_short(row.id)} is also in row {seen[row.id]}: each text is translated once", row, "id")
            continue
        seen[row.id] = row.row
        text = texts.get(row.id)
        if text is None:
            close = difflib.get_close_matches(row.id, list(texts), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problem(f"no text of the asset has the id {_short(row.id)}{hint}; the ids are the ones "
                    "`parley strings export` wrote, kept as they are", row, "id")
            continue
        if _lines(row.source) != _lines(without_surrogates(text.text)):
            problem(f"the source is not the asset's text of {text.id} any more: it reads {_short(row.source)}, the "
                    f"asset {_short(text.text)}. Was the asset changed since the export, or the cell by a "
                    "spreadsheet? Export the table again and carry the translations over", row, "source")
            continue
        translation = row.translation if "\r" in text.text else _lines(row.translation)
        if not translation:
            continue
        if text.mustache:
            try:
                check_template(translation, text.owner_id, text.path[-1] if text.path else "", source)
            except TemplateError as exc:
                problem(f"the translated template cannot be used: {exc.problems[0].message}", row, "translation")
                continue
        chosen[row.id] = (row, translation)
    if not problems:
        try:
            translated = _with_texts(asset, {i: t for i, (_row, t) in chosen.items()}, texts)
        except _Refused as exc:
            row = chosen[exc.text_id][0]
            problem(f"the asset refuses the translation: {exc.message}", row, "translation")
        else:
            if language is not None:
                translated = translated.model_copy(update={"language": language})
            kept = [t.id for t in texts.values() if t.text.strip() and t.id not in chosen]
            return Translation(translated, list(chosen), kept)
    raise StringTableError(_capped(problems))


class _Refused(Exception):
    def __init__(self, text_id: str, message: str) -> None:
        super().__init__(message)
        self.text_id = text_id
        self.message = message


def _with_texts(asset: Asset, new: dict[str, str], texts: dict[str, AuthoredText]) -> Asset:
    """A copy of ``asset`` with the texts ``new`` names (id -> text), each changed node or comment
    validated whole; raises ``_Refused`` naming the first text a model refuses."""
    asset = asset.model_copy(deep=True)  # the copy shares nothing with the asset it came from
    by_owner: dict[tuple[str, str], list[str]] = {}
    for text_id in new:
        text = texts[text_id]
        by_owner.setdefault((text.owner, text.owner_id), []).append(text_id)
    nodes = list(asset.nodes)
    comments = list(asset.comments)
    for (owner, owner_id), ids in by_owner.items():
        items: list[Any] = nodes if owner == "node" else comments
        index = next(i for i, item in enumerate(items) if item.id == owner_id)
        raw = items[index].model_dump()
        for text_id in ids:
            *steps, last = texts[text_id].path
            holder: Any = raw
            for step in steps:
                holder = holder[step]
            holder[last] = new[text_id]
        try:
            items[index] = type(items[index]).model_validate(raw)
        except ValidationError as exc:
            problem = problems_from_validation(exc, {"nodes": [raw]} if owner == "node" else {}, "")[0]
            raise _Refused(ids[0], f"{problem.field}: {problem.message}" if problem.field else problem.message) from None
    return asset.model_copy(update={"nodes": nodes, "comments": comments})


def _capped(problems: list[Problem]) -> list[Problem]:
    if len(problems) <= MAX_REPORTED_PROBLEMS:
        return problems
    more = len(problems) - MAX_REPORTED_PROBLEMS
    return [*problems[:MAX_REPORTED_PROBLEMS], Problem("error", f"and {more} more problem{'s' if more != 1 else ''}",
                                                       problems[0].file)]
