"""The Tests dock's Red team button on a gullible scripted model: the same numbers as parley test
--red-team (per family rate and interval, benign lines flagged, guard p50/p95) for the guarded NPC
and for it bypassed, and a successful attack opened in the Turn Inspector."""

from __future__ import annotations

import html

import pytest

from editor.docks.turn_inspector.dock import TurnInspectorDock
from runtime.asset.file import save_asset
from tests.editor.docks.tests.listing import open_listed
from tests.runtime.suites.redteam_npc import SECRET, gullible_backend, npc

SUITE = f"""asset: npc.json
red_team:
  families: [narration, secret_leak, break_character]
  attempts: 8
  secrets: [{SECRET}]
"""


def _open(window, qtbot, tmp_path, bypassed: bool):
    save_asset(npc(bypassed=bypassed), tmp_path / "npc.json")
    (tmp_path / "npc.suite.yaml").write_text(SUITE, encoding="utf-8")
    window.suite_run.make_backend = gullible_backend
    window.workspace.switch("Test")
    return open_listed(qtbot, window, tmp_path / "npc.json")


def _red_team(dock, qtbot):
    played = []
    dock.red_team.attempted.connect(played.append)
    with qtbot.waitSignal(dock.red_team.finished, timeout=60_000) as finished:
        assert dock.run_red_team()
        assert "Red team: attacking npc.json with the settings of npc.suite.yaml" in dock.red_team_panel.summary.text()
    report = finished.args[1]
    assert played == report.attempts, "each attack's turn was reported as it ended, on the UI thread"
    return report


@pytest.mark.parametrize("bypassed", [False, True])
def test_a_red_team_run_shows_its_numbers_and_opens_an_attack(window, qtbot, tmp_path, bypassed):
    dock = _open(window, qtbot, tmp_path, bypassed)
    report = _red_team(dock, qtbot)
    panel = dock.red_team_panel
    assert panel.isVisibleTo(dock) and panel.report is report
    rows = panel.rows()
    assert rows[0] == ["Attack families (3)"]
    assert [r[0] for r in rows[1:4]] == ["narration", "secret_leak", "break_character"]
    for row, family in zip(rows[1:4], report.families):
        assert row[1] == f"{family.success.successes}/8" and row[2].endswith("%") and " \u2013 " in row[3]
    assert rows[4] == ["Game events (1)"] and rows[5][0] == "quest_complete"
    summary = html.unescape(panel.summary.text())
    assert "Guard latency p50 / p95: " in summary
    if not bypassed:
        assert all(f.success.successes == 0 for f in report.families)
        assert "Benign lines flagged: " in summary and f"/{report.benign.attempts}" in summary
        assert any(r[0].startswith("Benign lines flagged (") for r in rows)
        assert panel.attack_rows() == []
        window.resize(1366, 768)
        dock.resize(900, 640)
        dock.grab().save(str(tmp_path.parent / "redteam_dock.png"))
        return
    window.resize(1366, 768)
    dock.resize(900, 640)
    dock.grab().save(str(tmp_path.parent / "redteam_dock_bypassed.png"))
    assert "above 1.0 %" in summary and "secret_leak" in dock.status.text()
    attacks = panel.attack_rows()
    assert attacks and attacks == report.successes
    leak = next(a for a in attacks if a.family == "secret_leak")
    inspector = window.dock(TurnInspectorDock)
    with qtbot.waitSignal(dock.turn_opened) as opened:
        row = next(panel.attacks.topLevelItem(i) for i in range(panel.attacks.topLevelItemCount())
                   if panel.attacks.topLevelItem(i).data(0, 0x0100) is leak)
        panel.attacks.itemClicked.emit(row, 0)
    assert opened.args[1] == f"Red team: secret_leak #{leak.index + 1}"
    assert inspector.record is opened.args[0] and inspector.record.diagnostics.player == leak.line
    assert f"secret:{SECRET}" in html.unescape(inspector.note_label.text())
