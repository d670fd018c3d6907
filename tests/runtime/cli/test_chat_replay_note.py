"""``parley chat --from-turn N`` replaying a history: a "CHANGED" reply says so plainly when the backend
promises exact replays, and adds that it is not a sure sign when the backend does not."""

from __future__ import annotations

import json

import pytest

from runtime.backends.base import Backend
from runtime.backends.scripted import ScriptedBackend
from runtime.cli import chat as chat_cli
from runtime.cli import main


class Drifting(ScriptedBackend):
    """Scripted replies that change every call, from a backend that promises (or not) exact replays."""

    exact = True
    calls = 0  # over every backend made: a replay in the next chat gets other replies

    def __init__(self) -> None:
        super().__init__(reply=self._next)

    def _next(self, _prompt, _request) -> str:
        Drifting.calls += 1
        return f"reply {Drifting.calls}"

    def reproducibility(self):
        return super().reproducibility() if self.exact else Backend.reproducibility(self)


class Loose(Drifting):
    exact = False
    label = "a test server"


@pytest.mark.parametrize("backend", [Drifting, Loose])
def test_a_changed_reply_says_when_it_may_be_numerics(tmp_path, capsys, monkeypatch, backend):
    asset = tmp_path / "a.json"
    asset.write_text(json.dumps({"name": "a", "default_model": "m.gguf", "start_node": "r",
                                 "nodes": [{"id": "r", "type": "GenerateAndSpeak"}]}), encoding="utf-8")
    script = tmp_path / "s.txt"
    script.write_text("one\ntwo\n", encoding="utf-8")
    history = tmp_path / "h.json"
    monkeypatch.setattr(chat_cli, "make_backend", lambda _args: backend())
    assert main(["chat", str(asset), "--script", str(script), "--history-out", str(history)]) == 0
    capsys.readouterr()
    assert main(["chat", str(asset), "--history-in", str(history), "--from-turn", "1"]) == 0
    out = capsys.readouterr().out
    if backend is Loose:
        assert ("[turn 1: reply CHANGED (not a sure sign: a test server does not say whether it repeats itself: a "
                "replayed reply may change with the same graph and seed)]") in out
    else:
        assert "[turn 1: reply CHANGED]" in out and "not a sure sign" not in out
