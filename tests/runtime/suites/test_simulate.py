"""Simulated players: personas played against the agent (scripted player and agent: exact), coverage-
guided steering changing the player's prompt toward what is not reached, discoveries saved as a
scripted suite that passes, the suite file's personas, ``parley test``'s flags, and one run on the
sample model as both player and agent."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from runtime.backends.base import GenerationRequest
from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.cli import main
from runtime.problems import InputError
from runtime.resources import examples_dir
from runtime.suites.file import load_suite
from runtime.suites.report import Coverage
from runtime.suites.run import run_suites
from runtime.suites.simulate import (
    OPENING,
    PLAYER_SESSION,
    SimulatedPlayer,
    save_discoveries,
    simulate,
    steers,
)

ROUTER = examples_dir() / "intent_router.json"  # 4 nodes and 6 exits: 10 things to cover


def persona_suite(tmp_path: Path, *, conversations: int = 2, turns: int = 2, extra: str = "") -> Path:
    shutil.copy(ROUTER, tmp_path / "intent_router.json")
    path = tmp_path / "players.suite.yaml"
    path.write_text(f"""\
asset: intent_router.json
{extra}personas:
  - name: traveller
    description: A tired traveller.
    goals: [find the inn]
    max_turns: {turns}
    conversations: {conversations}
""", encoding="utf-8")
    return path


def told(request: GenerationRequest) -> str:
    """What the player model is told it is (and, guided, what to say next)."""
    return request.messages[0].content


def player_saying(lines: list[str]) -> ScriptedBackend:
    """A scripted player that says ``lines`` in order, whatever it is asked."""
    said = iter(lines)
    return ScriptedBackend(lambda key, request: next(said))


def steered_player() -> ScriptedBackend:
    """A scripted player that does what its prompt asks: a line that asks the way, one that
    threatens, else small talk."""
    def reply(key: str, request: GenerationRequest) -> str:
        ask = told(request)
        if "asks the way" in ask and "none of these" not in ask:
            return "Where do I ask directions to the inn?"
        if "threatens" in ask and "none of these" not in ask:
            return "Open up or I threaten you!"
        return "Nice weather."
    return ScriptedBackend(reply)


def test_personas_play_k_conversations_exactly(tmp_path) -> None:
    loaded = load_suite(persona_suite(tmp_path, conversations=2, turns=2))
    player = player_saying(["Nice weather.", "I want to ask directions.", "Nice weather.", "I threaten you."])
    result = simulate(loaded, ScriptedBackend(), SimulatedPlayer(player))
    assert [c.name for c in result.conversations] == ["traveller #1", "traveller #2"]
    first, second = result.conversations
    assert first.lines == ["Nice weather.", "I want to ask directions."]
    assert first.replies == ["smalltalk heard: Nice weather.", "directions heard: I want to ask directions."]
    assert [t.path for t in first.turns] == [["classify", "smalltalk"], ["classify", "directions"]]
    assert first.turns[0].new == [("node", "classify"), ("exit", "classify.fallback_exit"), ("node", "smalltalk"),
                                  ("exit", "smalltalk.default_exit")]
    assert first.turns[1].new == [("exit", "classify.intent:ask_directions"), ("node", "directions"),
                                  ("exit", "directions.default_exit")]
    assert second.turns[0].new == []  # small talk again: nothing new
    assert second.turns[1].new == [("exit", "classify.intent:threaten"), ("node", "warn"), ("exit", "warn.default_exit")]
    assert result.curve == [0.0, 70.0, 100.0]
    assert [len(d.new) for _c, d in result.discoveries] == [4, 3, 3]
    # the player read who it is, and each agent reply as the other side's line
    prompt = first.turns[1].prompt
    assert prompt[0].role == "system" and "A tired traveller." in prompt[0].content and "find the inn" in prompt[0].content
    assert [(m.role, m.content) for m in prompt[1:]] == [
        ("user", OPENING), ("assistant", "Nice weather."), ("user", "smalltalk heard: Nice weather.")]
    assert "must be" not in prompt[0].content  # random play: no steer
    assert {key for key, _ in player.calls} == {PLAYER_SESSION}


def test_conversations_and_seed_are_applied(tmp_path) -> None:
    loaded = load_suite(persona_suite(tmp_path, conversations=5, turns=1))
    seeds = []
    player = ScriptedBackend(lambda key, request: (seeds.append(request.seed), "hi")[1])
    result = simulate(loaded, ScriptedBackend(), SimulatedPlayer(player), conversations=3)
    assert len(result.conversations) == 3 and len(result.curve) == 4
    assert len(set(seeds)) == 3  # each conversation its own player seed
    again = []
    simulate(loaded, ScriptedBackend(), SimulatedPlayer(ScriptedBackend(lambda k, r: (again.append(r.seed), "hi")[1])),
             conversations=3)
    assert again == seeds  # and the same ones on the next run


def test_the_graph_names_the_kinds_of_line_that_reach_each_branch() -> None:
    loaded_asset = load_suite_from_example()
    kinds = {k.hint: set(k.targets) for k in steers(loaded_asset)}
    assert kinds == {
        "a line in which the player asks the way somewhere, or where a place is (it leads to 'Give directions')":
            {("exit", "classify.intent:ask_directions"), ("node", "directions"), ("exit", "directions.default_exit")},
        "a line in which the player threatens, insults or tries to force their way in (it leads to 'Warn the player')":
            {("exit", "classify.intent:threaten"), ("node", "warn"), ("exit", "warn.default_exit")},
        "a line that is none of these: asks the way somewhere, or where a place is; threatens, insults or tries to "
        "force their way in (it leads to 'Small talk')":
            {("exit", "classify.fallback_exit"), ("node", "smalltalk"), ("exit", "smalltalk.default_exit")},
    }


def load_suite_from_example():
    from runtime.asset.file import load_asset

    return load_asset(ROUTER)


def test_guided_steering_asks_for_what_is_not_reached(tmp_path) -> None:
    loaded = load_suite(persona_suite(tmp_path, conversations=2, turns=3))
    random_play = simulate(loaded, ScriptedBackend(), SimulatedPlayer(steered_player()))
    guided = simulate(loaded, ScriptedBackend(), SimulatedPlayer(steered_player()), guided=True)
    # Without steering this player only makes small talk; steered, it reaches every branch
    assert random_play.curve[-1] == 40.0
    assert all("must be" not in t.prompt[0].content for c in random_play.conversations for t in c.turns)
    assert guided.curve == [0.0, 100.0, 100.0]
    turns = guided.conversations[0].turns
    assert [t.line for t in turns] == ["Where do I ask directions to the inn?", "Open up or I threaten you!",
                                       "Nice weather."]
    assert "Your next line must be a line in which the player asks the way somewhere" in turns[0].prompt[0].content
    assert "threatens, insults" in turns[1].prompt[0].content and "asks the way" not in turns[1].prompt[0].content
    assert "none of these" in turns[2].prompt[0].content
    # once everything is reached, the player plays in character again
    assert all(t.steer == "" and "must be" not in t.prompt[0].content
               for t in guided.conversations[1].turns)
    # each steer named something not reached when it was asked for
    reached: set = set()
    for conv in guided.conversations:
        for t in conv.turns:
            if t.steer:
                kind = next(k for k in steers(loaded.asset) if k.hint == t.steer)
                assert not set(kind.targets) <= reached
            reached |= set(t.new)


def test_guided_steering_skips_what_the_cases_reached(tmp_path) -> None:
    loaded = load_suite(persona_suite(tmp_path, conversations=1, turns=1))
    baseline = Coverage(loaded.asset)
    baseline.visits.update({"classify": 1, "directions": 1})
    baseline.exits.update({("classify", "intent:ask_directions"): 1, ("directions", "default_exit"): 1})
    result = simulate(loaded, ScriptedBackend(), SimulatedPlayer(steered_player()), guided=True, baseline=baseline)
    assert "threatens, insults" in result.conversations[0].turns[0].prompt[0].content
    assert result.conversations[0].turns[0].new == [("exit", "classify.intent:threaten"), ("node", "warn"),
                                                    ("exit", "warn.default_exit")]
    assert result.curve == [40.0, 70.0]


def test_discoveries_are_saved_as_a_suite_that_passes(tmp_path) -> None:
    loaded = load_suite(persona_suite(tmp_path, conversations=2, turns=3, extra="seed: 4\n"))
    result = simulate(loaded, ScriptedBackend(), SimulatedPlayer(steered_player()), guided=True)
    out = tmp_path / "found.suite.yaml"
    names = save_discoveries(out, loaded, result)
    assert names == [("traveller #1 reaches classify.intent:ask_directions, classify.intent:threaten, "
                      "classify.fallback_exit")]
    saved = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert saved["asset"] == "intent_router.json" and saved["seed"] == 4
    assert saved["cases"][0]["turns"][1] == {"say": "Open up or I threaten you!",
                                              "expect": {"path": ["classify", "warn"],
                                                         "exits": {"classify": "intent:threaten"}}}
    report = run_suites([load_suite(out)], ScriptedBackend)
    assert report.passed and len(report.results) == 1 and report.coverage_percent() == 100.0
    # saved again: added beside, under a name of its own; the file still reads as a suite
    assert save_discoveries(out, loaded, result) == [names[0] + " (2)"]
    assert len(load_suite(out).suite.cases) == 2


@pytest.mark.parametrize("existing", [False, True])
def test_saving_discoveries_follows_no_link_planted_beside_the_file(tmp_path, existing) -> None:
    """Issue 39: --save-discoveries wrote its check copy to a fixed name beside the target, and a link
    planted there made it overwrite another file."""
    loaded = load_suite(persona_suite(tmp_path, conversations=2, turns=3, extra="seed: 4\n"))
    result = simulate(loaded, ScriptedBackend(), SimulatedPlayer(steered_player()), guided=True)
    out = tmp_path / "found.suite.yaml"
    if existing:
        save_discoveries(out, loaded, result)
    victim = tmp_path / "elsewhere.txt"
    victim.write_text("not yours", encoding="utf-8")
    (tmp_path / ".found.suite.yaml.checking").symlink_to(victim)
    assert save_discoveries(out, loaded, result)
    assert victim.read_text(encoding="utf-8") == "not yours"
    assert len(load_suite(out).suite.cases) == (2 if existing else 1)
    assert [p.name for p in tmp_path.glob(".*checking")] == [".found.suite.yaml.checking"], "only the planted link"


def test_discoveries_are_not_saved_where_they_would_not_replay(tmp_path) -> None:
    loaded = load_suite(persona_suite(tmp_path, conversations=1, turns=1, extra="seed: 4\n"))
    result = simulate(loaded, ScriptedBackend(), SimulatedPlayer(player_saying(["hi"])))
    out = tmp_path / "other.suite.yaml"
    text = "asset: intent_router.json\nseed: 5\ncases:\n  - {name: x, turns: [{say: hi}]}\n"
    out.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        save_discoveries(out, loaded, result)
    assert "seed: 5" in str(caught.value.problems[0]) and caught.value.problems[0].file == str(out)
    assert out.read_text(encoding="utf-8") == text  # untouched
    assert not list(tmp_path.glob(".*checking"))


@pytest.mark.parametrize(("text", "line"), [
    ("(The conversation continues)", "Hello."),
    ('Player: "Where is the inn?" (he smiles)\nmore', "Where is the inn?"),
    ("*waves*  Hi   there", "Hi there"),
    ("", "Hello."),
])
def test_the_players_output_is_cleaned_to_a_spoken_line(text, line) -> None:
    from runtime.suites.simulate import clean_line

    assert clean_line(text) == line


def test_a_failed_turn_ends_its_conversation_with_the_reason(tmp_path) -> None:
    loaded = load_suite(persona_suite(tmp_path, conversations=2, turns=3))

    def agent(key, request):
        if key == "smalltalk":
            raise RuntimeError("the server went away")
        return default_reply(key, request)

    result = simulate(loaded, ScriptedBackend(agent), SimulatedPlayer(player_saying(["hi"] * 6)))
    assert [len(c.turns) for c in result.conversations] == [1, 1]
    why = "turn 1: the turn failed: smalltalk: the Generate node failed: RuntimeError: the server went away"
    assert result.errors == [f"traveller #1: {why}", f"traveller #2: {why}"]
    assert result.discoveries == []


@pytest.mark.parametrize(("persona", "says"), [
    ("{name: a, description: d, max_turns: 0}", "personas.0.max_turns"),
    ("{name: a, description: d, conversations: 1001}", "personas.0.conversations"),
    ("{name: a, description: d, mood: x}", "personas.0.mood"),
    ("{name: a}", "personas.0.description"),
])
def test_a_bad_persona_is_named(tmp_path, persona, says) -> None:
    shutil.copy(ROUTER, tmp_path / "intent_router.json")
    path = tmp_path / "bad.suite.yaml"
    path.write_text(f"asset: intent_router.json\npersonas:\n  - {persona}\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_suite(path)
    problem = caught.value.problems[0]
    assert says in problem.message and problem.line == 3


def test_a_suite_needs_a_case_or_a_persona(tmp_path) -> None:
    shutil.copy(ROUTER, tmp_path / "intent_router.json")
    path = tmp_path / "empty.suite.yaml"
    path.write_text("asset: intent_router.json\npersonas: []\n", encoding="utf-8")
    with pytest.raises(InputError, match="at least one case or persona"):
        load_suite(path)


def test_parley_test_plays_guided_saves_discoveries_and_they_pass(tmp_path, capsys) -> None:
    suite = persona_suite(tmp_path, conversations=3, turns=2)
    out, report = tmp_path / "found.suite.yaml", tmp_path / "report.json"
    code = main(["test", str(suite), "--backend", "scripted", "--player-backend", "scripted", "--guided",
                 "--conversations", "2", "--save-discoveries", str(out), "--json", str(report)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "PLAY players.suite.yaml::traveller #1 [2 turns" in printed and "traveller #3" not in printed
    assert "simulated players (guided) on" in printed and "saved 1 discovery as cases in" in printed
    data = json.loads(report.read_text(encoding="utf-8"))
    assert [c["conversation"] for c in data["simulation"][0]["conversations"]] == [1, 2]
    assert data["simulation"][0]["guided"] is True
    assert main(["test", str(out), "--backend", "scripted"]) == 0
    assert "1 passed, 0 failed" in capsys.readouterr().out


def test_parley_test_refuses_player_flags_without_personas(tmp_path, capsys) -> None:
    from tests.runtime.suites.router import GOOD, write

    suite = write(tmp_path, GOOD)
    assert main(["test", str(suite), "--backend", "scripted", "--guided"]) == 2
    assert "--guided: none of these suites has personas" in capsys.readouterr().err
    (tmp_path / "p").mkdir()
    persona = persona_suite(tmp_path / "p")
    assert main(["test", str(persona), "--backend", "scripted", "--conversations", "0"]) == 2
    assert main(["test", str(persona), "--backend", "scripted", "--player-model", str(tmp_path / "none.gguf")]) == 2
    assert "none.gguf" in capsys.readouterr().err
    assert main(["test", str(persona), "--backend", "scripted", "--candidates", "2"]) == 2
    assert "--candidates 2: give it with --guided" in capsys.readouterr().err
    assert main(["test", str(persona), "--backend", "scripted", "--guided", "--candidates", "0"]) == 2
    assert "tries 1 to 20 lines a turn" in capsys.readouterr().err
    # issue 39: --candidates had no cap (each is a model call per turn of every conversation)
    assert main(["test", str(persona), "--backend", "scripted", "--guided", "--candidates", "100000"]) == 2
    assert "--candidates 100000: a guided player tries 1 to 20 lines a turn" in capsys.readouterr().err


@pytest.mark.model
def test_the_sample_model_plays_a_persona_and_its_discoveries_replay(tmp_path, sample_model) -> None:
    from runtime.backends.llama import LlamaBackend

    loaded = load_suite(persona_suite(tmp_path, conversations=2, turns=2))
    backend = LlamaBackend()
    try:
        result = simulate(loaded, backend, SimulatedPlayer(backend, str(sample_model)), guided=True)
    finally:
        backend.close()
    assert [len(c.turns) for c in result.conversations] == [2, 2] and result.errors == []
    assert all(t.line.strip() and t.path[0] == "classify" for c in result.conversations for t in c.turns)
    assert result.curve[0] == 0.0 and result.curve[1] >= 40.0 and result.curve == sorted(result.curve)
    out = tmp_path / "found.suite.yaml"
    assert save_discoveries(out, loaded, result)
    report = run_suites([load_suite(out)], LlamaBackend)  # the lines replay on the agent as they were said
    assert report.passed, [r.failures for r in report.results]


def stubborn_player() -> ScriptedBackend:
    """A scripted player that ignores the steer in its first line of a turn (small talk, as the small
    sample model does) and follows it only in the lines it tries after that."""
    tried: dict[tuple[str, int], int] = {}
    follows = steered_player()._reply

    def reply(key: str, request: GenerationRequest) -> str:
        at = (told(request), len(request.messages))
        tried[at] = tried.get(at, 0) + 1
        return "Nice weather." if tried[at] == 1 else follows(key, request)
    return ScriptedBackend(reply)


def test_guided_play_tries_lines_and_takes_back_those_that_reach_nothing_new(tmp_path) -> None:
    loaded = load_suite(persona_suite(tmp_path, conversations=1, turns=3, extra="seed: 4\n"))
    # asked only (one line a turn), a player that ignores the steer finds no more than at random
    asked = simulate(loaded, ScriptedBackend(), SimulatedPlayer(stubborn_player()), guided=True, candidates=1)
    assert asked.curve == [0.0, 40.0] and asked.agent_turns == 3
    # trying up to 3 lines a turn, it reaches every branch: the small talk found something new once,
    # then each turn's first line is taken back and the steered one kept
    result = simulate(loaded, ScriptedBackend(), SimulatedPlayer(stubborn_player()), guided=True)
    turns = result.conversations[0].turns
    assert result.curve == [0.0, 100.0]
    assert [(t.tried, t.line) for t in turns] == [
        ([], "Nice weather."),
        (["Nice weather."], "Open up or I threaten you!"),
        (["Nice weather."], "Where do I ask directions to the inn?"),
    ]
    assert result.agent_turns == 5
    assert [t.path for t in turns] == [["classify", "smalltalk"], ["classify", "warn"], ["classify", "directions"]]
    # a line taken back left nothing behind: the kept lines, saved, replay the same turns and pass
    out = tmp_path / "found.suite.yaml"
    save_discoveries(out, loaded, result)
    report = run_suites([load_suite(out)], ScriptedBackend)
    assert report.passed and report.coverage_percent() == 100.0
    assert [r.reply for r in report.results[0].turns] == [t.reply for t in turns]
    assert result.to_json()["conversations"][0]["turns"][1]["tried"] == ["Nice weather."]
