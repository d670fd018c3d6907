"""``parley strings export`` and ``parley strings import``: a table out, a translated copy in, and a bad
table refused with every problem printed and nothing written."""

from __future__ import annotations

import csv
import io
import shutil

from runtime.asset.file import dumps_asset, load_asset
from runtime.cli import main
from runtime.resources import examples_dir


def _rows(path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"), newline="")))


def _write(path, rows: list[list[str]]) -> None:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    path.write_text(out.getvalue(), encoding="utf-8-sig")


def test_export_then_import_a_translation_into_a_copy(tmp_path, capsys) -> None:
    asset = shutil.copy(examples_dir() / "intent_router.json", tmp_path / "router.json")
    original = (tmp_path / "router.json").read_text(encoding="utf-8")
    table = tmp_path / "router.csv"
    assert main(["strings", "export", str(asset), "-o", str(table)]) == 0
    assert f"Wrote {table}: 6 texts of {asset}" in capsys.readouterr().out
    rows = _rows(table)
    assert rows[0] == ["id", "source", "translation", "context"]
    for row in rows[1:]:
        if row[0].endswith(".system_prompt"):
            row[2] = "Antworte freundlich."
    _write(table, rows)
    out = tmp_path / "router.de.json"
    assert main(["strings", "import", str(asset), str(table), "-o", str(out), "--language", "de"]) == 0
    said = capsys.readouterr().out
    assert f"Wrote {out}:" in said and "texts translated" in said
    german = load_asset(out)
    assert german.language == "de"
    assert {n.system_prompt for n in german.nodes if n.type_name == "Generate"} == {"Antworte freundlich."}
    assert (tmp_path / "router.json").read_text(encoding="utf-8") == original  # the asset is untouched


def test_an_unchanged_table_gives_the_same_asset(tmp_path) -> None:
    asset = examples_dir() / "quest_giver.json"
    table, out = tmp_path / "quest.csv", tmp_path / "same.json"
    assert main(["strings", "export", str(asset), "-o", str(table)]) == 0
    assert main(["strings", "import", str(asset), str(table), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == dumps_asset(load_asset(asset))


def test_a_bad_table_is_refused_naming_rows_and_nothing_is_written(tmp_path, capsys) -> None:
    asset = examples_dir() / "chat.json"
    table, out = tmp_path / "chat.csv", tmp_path / "chat.de.json"
    assert main(["strings", "export", str(asset), "-o", str(table)]) == 0
    rows = _rows(table)
    assert [r[0] for r in rows[1:]] == ["reply.system_prompt", "reply.template"]
    rows[1][2] = "Du bist Mira."
    rows.append(["reply.sytem_prompt", "x", "y", ""])
    rows.append(list(rows[1]))
    _write(table, rows)
    capsys.readouterr()
    assert main(["strings", "import", str(asset), str(table), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{table}:row 4, column A (id): error: no text of the asset has the id 'reply.sytem_prompt'" in err
    assert f"{table}:row 5, column A (id): error: the id 'reply.system_prompt' is also in row 2" in err
    assert err.rstrip().endswith("Nothing was written.")
    assert not out.exists()


def test_a_missing_asset_or_table_is_a_clear_error(tmp_path, capsys) -> None:
    assert main(["strings", "export", str(tmp_path / "nope.json"), "-o", str(tmp_path / "t.csv")]) == 1
    assert "nope.json" in capsys.readouterr().err
    assert main(["strings", "import", str(examples_dir() / "chat.json"), str(tmp_path), "-o",
                 str(tmp_path / "x.json")]) == 1
    assert "not a file but a folder" in capsys.readouterr().err
    assert not (tmp_path / "t.csv").exists() and not (tmp_path / "x.json").exists()
