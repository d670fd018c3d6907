"""The SessionView is all the docks see: a followed session takes the view's state's place and Detach
brings the window's own back exactly; and a dock built on a bare view (no local conversation, no
follower) shows a turn fed to the view. (That no dock imports either source is an import-linter
contract: tests/runtime/test_layering.py runs it.)"""

from __future__ import annotations

import copy
from types import SimpleNamespace

from editor.session.record import InspectedTurn
from editor.session.view import SessionView
from runtime.asset.model import Asset
from runtime.diagnostics import NodeDiagnostics, TurnDiagnostics
from runtime.dialogue.history import DialogHistory, Reply, SavedDialog, Turn
from runtime.dialogue.tree import AgentState, ConversationTree


def dialog(*lines: str) -> SavedDialog:
    """One branch with a turn per line (node "reply" answers each)."""
    tree = ConversationTree()
    parent = None
    for number, line in enumerate(lines):
        parent = tree.add(parent, Turn(line, [Reply("reply", f"to {line}")]), AgentState((), {"reply": number}))
    tree.select(parent)
    return SavedDialog(DialogHistory(tree.turns()), {"reply": len(lines)}, tree=tree)


def record(saved: SavedDialog, turn: int) -> InspectedTurn:
    assert saved.tree is not None
    player = saved.history.turns[turn].player
    node = NodeDiagnostics(node="reply", type="Reply", exit="", output=f"to {player}")
    return InspectedTurn(TurnDiagnostics(turn=turn, player=player, path=["reply"], nodes=[node]), Asset(),
                         turn_id=saved.tree.path()[turn])


def bare_view() -> SessionView:
    """A view with no source behind it: actions that say nothing runs."""
    return SessionView(SimpleNamespace(closed=False, busy=False))  # type: ignore[arg-type]


def test_following_puts_the_state_aside_and_bringing_it_back_restores_it_exactly(qtbot):
    view = bare_view()
    own = dialog("Hello", "Where is the market?")
    view.mark_backend(own.tree.path()[0], "this computer")
    view.show_history(own)
    view.finish_turn(record(own, 1))
    state, before = view.state, copy.deepcopy(view.state)
    assert view.selected_turn == own.tree.path()[1]

    view.put_aside()
    assert (view.saved.history.turns, view.records, view.turn_backends, view.selected_turn) == ([], {}, {}, -1)
    followed = dialog("Open the gate")
    view.mark_backend(followed.tree.path()[0], "server http://127.0.0.1:8765")
    view.keep_record(record(followed, 0))
    view.show_history(followed, prune=False)
    view.finish_turn(view.records[followed.tree.path()[0]])
    assert view.aside is state and view.aside == before, "the followed session never touches the state aside"

    told: list[tuple[str, object]] = []
    view.history_changed.connect(lambda saved: told.append(("history", saved)))
    view.turn_selected.connect(lambda turn: told.append(("selected", turn)))
    view.bring_back()
    assert view.state is state and view.state == before and view.aside is None
    assert told == [("history", own), ("selected", own.tree.path()[1])], "the docks are told, in that order"


def test_a_dock_shows_a_turn_fed_to_the_view_with_no_source_behind_it(qtbot):
    from editor.docks.raw_json.dock import RawJsonDock
    from editor.docks.turn_inspector.dock import TurnInspectorDock

    view = bare_view()
    inspector, raw = TurnInspectorDock(view), RawJsonDock(view)
    qtbot.addWidget(inspector)
    qtbot.addWidget(raw)
    saved = dialog("Open the gate", "Please?")
    last = record(saved, 1)
    view.keep_record(record(saved, 0))
    view.show_history(saved, prune=False)
    view.finish_turn(last)
    assert inspector.turn_picker.count() == 2
    assert inspector.turn_picker.currentData() == last.turn_id, "the turn the view selected"
    assert raw.data is not None and raw.data["player"] == "Please?"

