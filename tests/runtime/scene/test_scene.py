"""Scenes on the deterministic backend: who hears what (earshot, whispers, joining and leaving), the
director's rules, rounds taken back whole, and scene files' errors. Every NPC's prompts are checked
against what it heard: a line it did not hear never reaches them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.problems import BackendError
from runtime.resources import examples_dir
from runtime.scene.model import SceneError, load_scene
from runtime.scene.scene import PAUSE, Scene, SceneLine

TAVERN = examples_dir() / "scenes" / "tavern.scene.json"


def _scene(tmp_path: Path, backend=None, **changes) -> Scene:
    """The tavern scene, changed (``director``'s keys merge), in a folder beside copies of the examples."""
    raw = json.loads(TAVERN.read_text(encoding="utf-8"))
    director = changes.pop("director", {})
    raw.update(changes)
    raw["director"].update(director)
    folder = tmp_path / "examples"
    if not folder.exists():
        shutil.copytree(examples_dir(), folder)
    path = folder / "scenes" / "test.scene.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return Scene.open(path, backend or ScriptedBackend())


def _prompts(scene: Scene, npc: str) -> list[str]:
    """Every user message any node of ``npc`` was given, over its whole conversation."""
    texts = []
    for turn in scene.rounds:
        for spoken in turn.turns:
            if spoken.npc != npc or spoken.result.diagnostics is None:
                continue
            for node in spoken.result.diagnostics.nodes:
                texts += [m.content for m in node.input.prompt if m.role == "user"]
    return texts


def _assert_no_leaks(scene: Scene) -> None:
    """No NPC's prompt holds a line it did not hear (checked on every line of the scene)."""
    for npc, member in scene.members.items():
        prompts = "\n".join(_prompts(scene, npc))
        for line in scene.transcript:
            said = f"{line.name}: {line.text}"
            if line.speaker != npc and line not in member.heard:
                assert said not in prompts, f"{npc} never heard {said!r}, but its prompt holds it"


def test_each_npc_answers_what_it_heard_attributed_to_its_speakers(tmp_path: Path) -> None:
    scene = _scene(tmp_path)
    round_ = scene.say("Good evening, all!")
    assert round_.speakers == ["mira", "tomas"]
    assert round_.turns[0].heard == "Traveller: Good evening, all!"
    mira_said = round_.turns[0].result.reply
    assert round_.turns[1].heard == f"Traveller: Good evening, all!\nMira: {mira_said}"
    # the bard's prompt: his system prompt, then the others' words as one user message; never Mira's as his own
    roles = [m.role for m in round_.turns[1].result.diagnostics.nodes[-1].input.prompt]
    assert roles == ["system", "user"]
    assert [line.speaker for line in scene.transcript] == ["player", "mira", "tomas"]
    _assert_no_leaks(scene)


def test_the_player_can_address_one_npc_by_name_or_by_to(tmp_path: Path) -> None:
    scene = _scene(tmp_path)
    assert scene.say("Tomas, a song please!").turns[0].npc == "tomas"
    assert scene.say("Tomas, a song please!").turns[0].rule == "addressed"
    assert scene.say("Another round.", to="mira").turns[0].npc == "mira"
    about = scene.say("I hear that Tomas sings badly.")
    assert (about.turns[0].npc, about.turns[0].rule) == ("tomas", "about")


def _saying(words: str):
    """Replies ``words`` (constrained requests as the scripted backend answers them): no NPC repeats a line."""
    def reply(key, request):
        return default_reply(key, request) if request.choices or request.json_schema else words
    return reply


def test_a_whisper_is_heard_by_one_npc_only(tmp_path: Path) -> None:
    scene = _scene(tmp_path, ScriptedBackend(_saying("Hush.")), director={"max_npc_lines": 1})
    scene.say("The bard owes me money.", to="mira", whisper=True)
    secret = scene.transcript[0]
    assert secret.heard_by == ("mira",)
    scene.say("Play something, Tomas.")
    assert all("owes me money" not in text for text in _prompts(scene, "tomas"))
    assert any("owes me money" in text for text in _prompts(scene, "mira"))
    _assert_no_leaks(scene)


def test_out_of_earshot_joining_and_leaving(tmp_path: Path) -> None:
    scene = _scene(tmp_path)
    scene.say("Good evening, all!")
    scene.join("brann")  # joins later: hears nothing said before
    assert scene.members["brann"].heard == []
    round_ = scene.say("Brann, any news from the gate?")
    assert round_.turns[0].npc == "brann"
    brann_line = next(line for line in scene.transcript if line.speaker == "brann")
    assert "tomas" not in brann_line.heard_by  # the bard is out of the guard's earshot
    assert "mira" in brann_line.heard_by
    scene.leave("mira")
    gone = scene.say("Is the innkeeper gone?")
    assert "mira" not in gone.speakers and "mira" not in gone.player.heard_by
    _assert_no_leaks(scene)


def test_one_who_joins_hears_what_was_said_before_when_the_scene_says_so(tmp_path: Path) -> None:
    raw = json.loads(TAVERN.read_text(encoding="utf-8"))
    raw["npcs"][2]["hears_before_join"] = True
    scene = _scene(tmp_path, npcs=raw["npcs"])
    scene.say("Good evening, all!")
    scene.join("brann")
    heard = scene.members["brann"].heard
    assert [line.speaker for line in heard] == ["player", "mira", "tomas"]
    assert scene.say("Brann?").turns[0].heard.startswith("Traveller: Good evening, all!")


def test_the_npcs_carry_on_among_themselves_when_the_player_says_nothing(tmp_path: Path) -> None:
    scene = _scene(tmp_path, director={"max_npc_lines": 3})
    round_ = scene.say(None)
    assert round_.player is None and round_.speakers == ["mira", "tomas", "mira"]
    assert round_.turns[0].heard == PAUSE
    assert round_.turns[1].heard.startswith("Mira: ")


def test_max_npc_lines_and_nobody_stop_the_round(tmp_path: Path) -> None:
    assert len(_scene(tmp_path, director={"max_npc_lines": 1}).say("Hello!").turns) == 1

    def director_says_nobody(key, request):
        return "nobody" if key.endswith("/director") else _saying("Well met.")(key, request)

    scene = _scene(tmp_path, ScriptedBackend(director_says_nobody),
                   director={"rules": ["addressed", "model"], "model": "director.gguf"})
    assert scene.say("Hello there.").turns == []  # nobody was addressed, and the model says nobody
    assert scene.say("Mira, hello.").speakers[0] == "mira"


def test_the_model_rule_picks_among_the_npcs_with_a_constrained_choice(tmp_path: Path) -> None:
    asked = []

    def reply(key, request):
        if key.endswith("/director"):
            asked.append(request.choices)
            return "Tomas"
        return _saying("Well met.")(key, request)

    scene = _scene(tmp_path, ScriptedBackend(reply), director={"rules": ["model"], "model": "director.gguf",
                                                                "max_npc_lines": 1})
    round_ = scene.say("What a night.")
    assert (round_.turns[0].npc, round_.turns[0].rule) == ("tomas", "model")
    assert asked == [["Mira", "Tomas", "nobody"]]


def test_a_round_that_fails_is_taken_back_whole(tmp_path: Path) -> None:
    def bard_breaks(key, request):
        if "/tomas/" in key:
            raise BackendError("the bard's model is gone")
        return request.choices[0] if request.choices else "Welcome!"

    scene = _scene(tmp_path, ScriptedBackend(bard_breaks))
    with pytest.raises(BackendError):
        scene.say("Good evening, all!")
    assert scene.transcript == [] and scene.rounds == []
    assert all(not m.pending and not m.heard for m in scene.members.values())
    assert len(scene.members["mira"].session.agent.history.turns) == 0


def test_rewind_and_regenerate_put_every_npc_back(tmp_path: Path) -> None:
    scene = _scene(tmp_path)
    first = scene.say("Good evening, all!")
    second = scene.say("Tomas, a song!")
    turns = {n: len(m.session.agent.history.turns) for n, m in scene.members.items()}
    scene.rewind(1)
    assert len(scene.rounds) == 1 and scene.transcript[-1].speaker == first.speakers[-1]
    assert len(scene.members["tomas"].session.agent.history.turns) == turns["tomas"] - 1
    again = scene.regenerate()
    assert again.speakers == first.speakers
    assert [t.result.reply for t in again.turns] == [t.result.reply for t in first.turns]
    assert len(scene.rounds) == 1
    assert second.speakers == scene.say("Tomas, a song!").speakers


def test_bad_requests_name_what_is_wrong(tmp_path: Path) -> None:
    scene = _scene(tmp_path)
    with pytest.raises(SceneError, match="not in the scene now"):
        scene.say("Brann!", to="brann")
    with pytest.raises(SceneError, match="no NPC 'ghost'"):
        scene.join("ghost")
    with pytest.raises(SceneError, match="needs the NPC"):
        scene.say("psst", whisper=True)
    with pytest.raises(SceneError, match="cannot take back 3 rounds"):
        scene.rewind(3)


@pytest.mark.parametrize("change, field, words", [
    (lambda raw: raw["npcs"].append(dict(raw["npcs"][0])), "npcs", "used by an earlier NPC"),
    (lambda raw: raw["out_of_earshot"].append({"speaker": "ghost", "listener": "mira"}), "out_of_earshot.1.speaker",
     "no NPC of the scene"),
    (lambda raw: raw["npcs"][0].update(id="player"), "npcs.0.id", "names the player"),
    (lambda raw: raw["director"].update(rules=["model"]), "director.model", "needs a model"),
    (lambda raw: raw["npcs"][0].update(voice="deep"), "npcs.0.voice", "unknown key"),
    (lambda raw: raw.update(format="parley-asset"), "format", "not a Parley scene"),
])
def test_a_bad_scene_file_names_the_field(tmp_path: Path, change, field, words) -> None:
    raw = json.loads(TAVERN.read_text(encoding="utf-8"))
    change(raw)
    path = tmp_path / "bad.scene.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(SceneError) as caught:
        load_scene(path)
    problem = caught.value.problems[0]
    assert problem.file == str(path) and problem.field.startswith(field) and words in problem.message, problem


def test_an_npc_whose_asset_does_not_load_is_named(tmp_path: Path) -> None:
    raw = json.loads(TAVERN.read_text(encoding="utf-8"))
    raw["npcs"][1]["asset"] = "../missing.json"
    with pytest.raises(SceneError) as caught:
        _scene(tmp_path, npcs=raw["npcs"])
    problem = caught.value.problems[0]
    assert problem.field == "npcs.1.asset" and "'tomas'" in problem.message, problem


def test_scene_lines_are_events_each_npcs_events_carry_its_name(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []
    scene = _scene(tmp_path, director={"max_npc_lines": 1})
    scene.say("Hello!", on_event=lambda speaker, event: seen.append(
        (speaker, "line" if isinstance(event, SceneLine) else event.kind)))
    assert seen[0] == ("player", "line")
    assert ("mira", "token") in seen and seen[-1] == ("mira", "line")
    assert {speaker for speaker, _ in seen} == {"player", "mira"}


def test_the_example_scene_matches_the_committed_schema() -> None:
    import jsonschema

    from runtime.resources import schemas_dir

    schema = json.loads((schemas_dir() / "scene.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(json.loads(TAVERN.read_text(encoding="utf-8")), schema)
