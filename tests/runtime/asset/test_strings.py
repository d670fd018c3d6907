"""The string table: every authored text of an asset out as CSV, and its translation back into a copy;
bad tables are refused whole, naming the row and column, and change nothing."""

from __future__ import annotations

import csv
import io

import pytest

from runtime.asset.file import dumps_asset, load_asset
from runtime.asset.model import Asset, Comment, new_node
from runtime.asset.strings import (
    COLUMNS,
    StringTableError,
    authored_texts,
    parse_string_table,
    read_string_table,
    save_string_table,
    string_table,
    translate,
)
from runtime.resources import examples_dir


def npc() -> Asset:
    return Asset(
        name="Mira", start_node="classify",
        nodes=[
            new_node("ClassifyIntent", "classify", system_prompt="Classify the line.", intents=[
                {"name": "buy", "description": "wants to buy something", "exit": "reply"},
                {"name": "leave", "description": "says goodbye", "exit": ""},
            ], fallback_exit="reply"),
            new_node("GenerateAndSpeak", "reply", title="Answer", system_prompt="You are Mira.\nBe brief.",
                     template="Knowledge: {{#knowledge}}{{text}} {{/knowledge}}", default_exit="guard"),
            new_node("Guard", "guard", input="reply", policies=[
                {"name": "secret", "description": "tells the password", "patterns": ["swordfish"],
                 "reply": "I keep my secrets."},
            ]),
            new_node("Retrieve", "facts", entries=[{"text": "The inn is east."}, {"text": "Rooms cost 5 silver."}]),
        ],
        comments=[Comment(id="note_1", kind="note", text="Mira is shy."),
                  Comment(id="box", kind="backdrop", title="Shop")],
    )


def table(rows: list[list[str]], header: tuple[str, ...] | list[str] = COLUMNS) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows([list(header), *rows])
    return out.getvalue().encode("utf-8")


def filled(asset: Asset, translations: dict[str, str]) -> bytes:
    """The exported table of ``asset`` with ``translations`` (id -> text) filled in, as a spreadsheet saves it."""
    rows = list(csv.reader(io.StringIO(string_table(asset).removeprefix("\ufeff"), newline="")))
    for row in rows[1:]:
        row[2] = translations.get(row[0], "")
    return table(rows[1:], rows[0])


def refused(asset: Asset, data: bytes, **kwargs) -> list[str]:
    """The problems (as printed) a table is refused for; the asset is unchanged."""
    before = dumps_asset(asset)
    with pytest.raises(StringTableError) as caught:
        translate(asset, parse_string_table(data, "de.csv"), "de.csv", **kwargs)
    assert dumps_asset(asset) == before
    return [str(p) for p in caught.value.problems]


def test_every_authored_text_has_a_stable_readable_id() -> None:
    texts = {t.id: t.text for t in authored_texts(npc())}
    assert texts == {
        "classify.system_prompt": "Classify the line.",
        "classify.intents.buy.description": "wants to buy something",
        "classify.intents.leave.description": "says goodbye",
        "reply.system_prompt": "You are Mira.\nBe brief.",
        "reply.template": "Knowledge: {{#knowledge}}{{text}} {{/knowledge}}",
        "guard.policies.secret.description": "tells the password",
        "guard.policies.secret.reply": "I keep my secrets.",
        "guard.system_prompt": texts["guard.system_prompt"],  # the shipped default
        "facts.entries.0.text": "The inn is east.",
        "facts.entries.1.text": "Rooms cost 5 silver.",
        "comments.note_1.title": "", "comments.note_1.text": "Mira is shy.",
        "comments.box.title": "Shop", "comments.box.text": "",
    }


def test_the_table_is_csv_with_a_bom_a_header_and_no_empty_texts() -> None:
    text = string_table(npc())
    assert text.startswith("\ufeffid,source,translation,context\r\n")
    rows = list(csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline="")))
    ids = [r[0] for r in rows[1:]]
    assert "comments.box.text" not in ids and "reply.template" in ids
    assert all(r[2] == "" for r in rows[1:])
    reply = next(r for r in rows if r[0] == "guard.policies.secret.reply")
    assert "hears word for word" in reply[3]
    template = next(r for r in rows if r[0] == "reply.template")
    assert "keep every {{tag}}" in template[3] and "GenerateAndSpeak node 'Answer' (reply)" in template[3]


@pytest.mark.parametrize("name", sorted(p.name for p in examples_dir().glob("*.json")))
def test_export_then_import_unchanged_gives_the_same_asset(name, tmp_path) -> None:
    asset = load_asset(examples_dir() / name)
    save_string_table(asset, tmp_path / "strings.csv")
    translation = translate(asset, read_string_table(tmp_path / "strings.csv"))
    assert dumps_asset(translation.asset) == dumps_asset(asset)
    assert translation.translated == []
    # a translator who copies the source into every translation changes nothing either
    copied = filled(asset, {t.id: t.text for t in authored_texts(asset)})
    assert dumps_asset(translate(asset, parse_string_table(copied)).asset) == dumps_asset(asset)


def test_a_translated_import_writes_every_kind_of_text_into_a_copy() -> None:
    asset = npc()
    before = dumps_asset(asset)
    german = {
        "classify.intents.buy.description": "will etwas kaufen",
        "reply.system_prompt": "Du bist Mira.\r\nFasse dich kurz.",  # a spreadsheet's line break
        "reply.template": "Wissen: {{#knowledge}}{{text}} {{/knowledge}}",
        "guard.policies.secret.reply": "Meine Geheimnisse behalte ich.",
        "facts.entries.1.text": "Zimmer kosten 5 Silber. 🪙",
        "comments.note_1.text": "Mira ist schüchtern.",
    }
    translation = translate(asset, parse_string_table(filled(asset, german)), language="de")
    copy = translation.asset
    assert dumps_asset(asset) == before  # the asset itself never changes
    assert copy.language == "de"
    assert copy.node("classify").intents[0].description == "will etwas kaufen"
    assert copy.node("classify").intents[1].description == "says goodbye"  # empty translation: kept
    assert copy.node("reply").system_prompt == "Du bist Mira.\nFasse dich kurz."
    assert copy.node("reply").template.startswith("Wissen:")
    assert copy.node("guard").policies[0].reply == "Meine Geheimnisse behalte ich."
    assert copy.node("guard").policies[0].patterns == ["swordfish"]
    assert copy.node("facts").entries[1].text.endswith("🪙")
    assert copy.comments[0].text == "Mira ist schüchtern."
    assert sorted(translation.translated) == sorted(german)
    assert "classify.intents.leave.description" in translation.untranslated
    # the copy loads back as it was written
    assert dumps_asset(Asset.model_validate_json(dumps_asset(copy))) == dumps_asset(copy)


def test_a_table_with_its_columns_in_another_order_and_a_column_of_its_own() -> None:
    asset = npc()
    data = table([["Fasse dich kurz", "reply.system_prompt", "You are Mira.\nBe brief.", "ok"]],
                 ["Translation", "ID", "Source", "Reviewer"])
    assert translate(asset, parse_string_table(data)).asset.node("reply").system_prompt == "Fasse dich kurz"


def test_an_unknown_id_is_refused_naming_row_and_column_with_a_suggestion() -> None:
    data = table([["reply.system_prompt", "You are Mira.\nBe brief.", "Du bist Mira.", ""],
                  ["reply.sytem_prompt", "You are Mira.\nBe brief.", "Du bist Mira.", ""]])
    [problem] = refused(npc(), data)
    assert problem.startswith("de.csv:row 3, column A (id): error: no text of the asset has the id 'reply.sytem_prompt'")
    assert "did you mean 'reply.system_prompt'?" in problem


def test_a_duplicate_id_is_refused_naming_both_rows() -> None:
    data = table([["reply.system_prompt", "You are Mira.\nBe brief.", "Eins", ""],
                  ["guard.policies.secret.reply", "I keep my secrets.", "Nein.", ""],
                  ["reply.system_prompt", "You are Mira.\nBe brief.", "Zwei", ""]])
    [problem] = refused(npc(), data)
    assert problem.startswith("de.csv:row 4, column A (id): error: the id 'reply.system_prompt' is also in row 2")


def test_a_row_without_an_id_is_refused() -> None:
    [problem] = refused(npc(), table([["  ", "Classify the line.", "Klassifiziere.", ""]]))
    assert problem.startswith("de.csv:row 2, column A (id): error: no id")


def test_a_stale_source_is_refused_saying_what_changed() -> None:
    [problem] = refused(npc(), table([["classify.system_prompt", "Classify the lines!", "Klassifiziere.", ""]]))
    assert problem.startswith("de.csv:row 2, column B (source): error: the source is not the asset's text of "
                              "classify.system_prompt any more")
    assert "Export the table again" in problem


def test_a_translated_template_that_is_not_mustache_is_refused() -> None:
    template = "Knowledge: {{#knowledge}}{{text}} {{/knowledge}}"
    [problem] = refused(npc(), table([["reply.template", template, "Wissen: {{#knowledge}}{{text}}", ""]]))
    assert problem.startswith("de.csv:row 2, column C (translation): error: the translated template cannot be used")


@pytest.mark.parametrize("rows, where, says", [
    ([["reply.system_prompt", "You are Mira."]], "row 2, column C (translation)", "the row ends after column B"),
    ([["reply.system_prompt", "x", "y", "context", "stray"]], "row 2, column E", "text under no header"),
    ([["reply.system_prompt", 'a "quoted', "b", ""]], "row 2", "not CSV a reader can parse"),
])
def test_malformed_rows_are_refused(rows, where, says) -> None:
    data = table([]) + b"".join(
        (",".join(c if c != 'a "quoted' else '"a "quoted"x' for c in r) + "\r\n").encode() for r in rows)
    with pytest.raises(StringTableError) as caught:
        parse_string_table(data, "de.csv")
    [problem] = caught.value.problems
    assert problem.field == where and says in problem.message, str(problem)


def test_a_header_without_the_needed_columns_and_an_empty_table_are_refused() -> None:
    with pytest.raises(StringTableError) as caught:
        parse_string_table(table([["reply.system_prompt", "x"]], ["id", "text"]), "de.csv")
    assert str(caught.value.problems[0]).startswith("de.csv:row 1: error: the header (the first row) has no "
                                                    "'source' and no 'translation' column")
    with pytest.raises(StringTableError) as caught:
        parse_string_table(b"\xef\xbb\xbf\r\n", "de.csv")
    assert "the table is empty" in str(caught.value)


def test_a_lone_surrogate_is_refused_naming_its_row_and_column() -> None:
    # U+D800 written as UTF-8 would write it (ED A0 80): no UTF-8 reader takes it as text
    data = table([["reply.system_prompt", "You are Mira.\nBe brief.", "Du bist MIRA", ""]]).replace(b"MIRA", b"Mi\xed\xa0\x80ra")
    with pytest.raises(StringTableError) as caught:
        parse_string_table(data, "de.csv")
    [problem] = caught.value.problems
    assert str(problem).startswith("de.csv:row 2, column C (translation): error: the cell holds a lone surrogate "
                                   "(U+D800 at character 10)")


def test_bytes_that_are_not_utf8_are_refused_naming_row_and_column() -> None:
    data = table([["reply.system_prompt", "You are Mira.\nBe brief.", "Tu es MIRA", ""]]).replace(b"MIRA", b"\xe9t\xe9")
    with pytest.raises(StringTableError) as caught:
        parse_string_table(data, "fr.csv")
    [problem] = caught.value.problems
    assert problem.field == "row 2, column C (translation)"
    assert "not UTF-8 (0xE9 at byte 6 of the cell)" in problem.message and "CSV UTF-8" in problem.message


def test_a_bad_language_tag_is_refused() -> None:
    [problem] = refused(npc(), table([]), language="de_DE")
    assert "'de_DE' is not a BCP 47 language tag (write 'de-DE')" in problem


def test_every_bad_row_is_reported_at_once() -> None:
    data = table([["nope", "", "x", ""], ["classify.system_prompt", "old", "x", ""], ["", "", "x", ""]])
    problems = refused(npc(), data)
    assert [p.split(": error")[0] for p in problems] == [
        "de.csv:row 2, column A (id)", "de.csv:row 3, column B (source)", "de.csv:row 4, column A (id)"]


def test_a_folder_is_refused_unread(tmp_path) -> None:
    with pytest.raises(StringTableError) as caught:
        read_string_table(tmp_path)
    assert "not a file but a folder" in str(caught.value)


def test_a_table_saved_with_semicolons_by_a_spreadsheet_reads_the_same() -> None:
    data = "\ufeffid;source;translation;context\r\nreply.system_prompt;\"You are Mira.\nBe brief.\";\"Du bist Mira; kurz.\";\r\n"
    [row] = parse_string_table(data.encode("utf-8"))
    assert (row.id, row.translation) == ("reply.system_prompt", "Du bist Mira; kurz.")
    assert translate(npc(), [row]).asset.node("reply").system_prompt == "Du bist Mira; kurz."
