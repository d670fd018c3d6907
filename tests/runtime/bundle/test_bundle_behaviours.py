"""Repro bundles of assets that run behaviours (Subgraph nodes): the bundle carries every behaviour file
the asset runs, keyed by its path relative to the asset, so a bundle moved to another folder (another
machine) replays the same graph from its own files; hostile paths in a bundle are refused with their
place; a bundle unpacks into the folder chosen for it and nowhere else; version 1 bundles still load."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from runtime.agent import Agent
from runtime.asset.file import asset_to_dict, dumps_asset, load_asset, save_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.bundle.file import (
    BundleError,
    asset_sha256,
    bundle_from_dict,
    dumps_bundle,
    load_bundle,
    make_bundle,
    unpack_bundle,
    write_bundle,
)
from runtime.bundle.replay import replay_bundle
from runtime.cli import main
from runtime.dialogue.dialog_file import load_history
from runtime.names import shown_name
from runtime.resources import examples_dir

LINES = ["Where is the inn?", "I threaten you: step aside!"]
BEHAVIOUR = "behaviours/guard_threats.json"
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
REPLAY_TIMEOUT_S = 900  # generous: the machine may be busy; nothing waits this long when all is well


def copy_gate_guard(folder):
    """gate_guard.json and its behaviour, as the examples folder holds them, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(examples_dir() / "gate_guard.json", folder / "gate_guard.json")
    shutil.copytree(examples_dir() / "behaviours", folder / "behaviours")
    return folder / "gate_guard.json"


@pytest.fixture()
def written(tmp_path):
    """A bundle of two scripted turns of gate_guard (one through the behaviour to Brann, one warned off
    inside it), written beside the asset and moved to an empty folder; the asset's folder is gone."""
    source = tmp_path / "studio"
    asset_path = copy_gate_guard(source)
    (source / MODEL).write_bytes(b"GGUF, for the hash only: the scripted backend reads no model")
    asset = load_asset(asset_path)
    agent = Agent(asset, ScriptedBackend(), str(source))
    results = [agent.run_turn(line) for line in LINES]
    assert results[1].path == ["guard", "guard/classify", "guard/warn", "guard/warned"]
    bundle = make_bundle(asset, agent.export_dialog(), asset_dir=source, asset_source=str(asset_path))
    write_bundle(bundle, source / "guard.parley-bundle")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(source / "guard.parley-bundle", elsewhere / "guard.parley-bundle")
    shutil.rmtree(source)
    return elsewhere / "guard.parley-bundle", agent.export_dialog(), results


def test_a_bundle_carries_the_behaviour_and_replays_the_same_turns_elsewhere(written):
    path, saved, results = written
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert raw["version"] == 2 and list(raw["asset"]["behaviours"]) == [BEHAVIOUR]
    behaviour = load_asset(examples_dir() / BEHAVIOUR)
    assert raw["asset"]["behaviours"][BEHAVIOUR] == {"sha256": asset_sha256(behaviour),
                                                     "file": asset_to_dict(behaviour)}
    assert "folder" not in raw["asset"], "no behaviour lies above the asset's folder"
    assert set(raw["settings"]["seeds"]) == {"guard/warn", "guard/refuse_bribe", "directions"}
    assert set(raw["contexts"]) == {"guard/classify", "guard/warn", "guard/refuse_bribe", "directions"}

    bundle = load_bundle(path)
    assert bundle.behaviours == {BEHAVIOUR: behaviour} and bundle.conversation == saved
    assert "guard/warned" in bundle.runs.node_ids() and "guard/warned" not in bundle.asset.node_ids()
    assert dumps_bundle(bundle) == path.read_text(encoding="utf-8"), "it reads back as written"
    report = replay_bundle(bundle, backend=ScriptedBackend())
    assert [(t.turn_id, t.outcome) for t in report.turns] == [(0, "identical"), (1, "identical")], \
        [t.describe() for t in report.turns]
    # The scripted engine keeps no decode journals: the model-backed nodes' replies are what is compared
    assert [t.reason for t in report.turns] == [
        "replies only: no decode journal was recorded for guard/classify, directions",
        "replies only: no decode journal was recorded for guard/classify, guard/warn"]
    assert list(path.parent.iterdir()) == [path], "a replay writes nothing"
    # "identical" compared each replayed turn's replies with these, the ones the turns gave
    assert [t.entries[-1].text for t in bundle.conversation.history.turns] == [r.reply for r in results]
    assert bundle.conversation.history.turns[1].entries[-1].node == "guard/warn"


def test_the_replay_runs_the_bundles_behaviour_not_a_file_beside_it(written):
    path, _saved, _results = written
    # A different guard_threats.json beside the bundle changes nothing: the bundle's own is run.
    (path.parent / "behaviours").mkdir()
    other = load_asset(examples_dir() / BEHAVIOUR)
    nodes = [n.model_copy(update={"template": "Someone else."}) if n.id == "warn" else n for n in other.nodes]
    save_asset(other.model_copy(update={"nodes": nodes}), path.parent / BEHAVIOUR)
    report = replay_bundle(load_bundle(path), backend=ScriptedBackend())
    assert report.identical and report.count("identical") == 2

    # The bundle's own behaviour changed (and hashed again): the warned turn replays differently, at guard/warn.
    raw = json.loads(path.read_text(encoding="utf-8"))
    entry = raw["asset"]["behaviours"][BEHAVIOUR]
    warn = next(n for n in entry["file"]["nodes"] if n["id"] == "warn")
    warn["template"] = "You are someone else entirely."
    entry["sha256"] = asset_sha256(load_asset_dict(entry["file"]))
    report = replay_bundle(bundle_from_dict(raw, "changed.parley-bundle"), backend=ScriptedBackend())
    assert [t.outcome for t in report.turns] == ["identical", "different"]
    assert report.first_difference.difference.node == "guard/warn", report.first_difference.describe()


def load_asset_dict(raw):
    from runtime.asset.file import asset_from_dict

    return asset_from_dict(raw)


def refused(raw, tmp_path, *expected: str, text: str | None = None) -> str:
    path = tmp_path / "hostile.parley-bundle"
    path.write_text(text if text is not None else json.dumps(raw), encoding="utf-8")
    with pytest.raises(BundleError) as caught:
        load_bundle(path)
    said = str(caught.value)
    for part in expected:
        assert part.replace("FILE", str(path)) in said, said
    return said


def moved(raw, new_key: str) -> dict:
    """``raw`` with its one behaviour under ``new_key`` (the node naming it so too, where it can)."""
    behaviours = raw["asset"]["behaviours"]
    behaviours[new_key] = behaviours.pop(BEHAVIOUR)
    return raw


@pytest.mark.parametrize(("key", "expected"), [
    ("/etc/guard_threats.json", "an absolute path"),
    ("C:/guard_threats.json", "an absolute path"),
    ("//server/share/guard_threats.json", "an absolute path"),
    ("../guard_threats.json", "goes up 1 folder (..), out of the bundle's folder"),
    ("../../../../etc/cron.d/x", "goes up 4 folders (..), out of the bundle's folder"),
    ("behaviours/../../guard_threats.json", "not a plain relative path"),
    ("behaviours/./guard_threats.json", "not a plain relative path"),
    ("behaviours//guard_threats.json", "not a plain relative path"),
    ("behaviours\\guard_threats.json", "holds a backslash"),
    ("behaviours/guard\nthreats.json", "holds a control character"),
    ("behaviours/guard_threats.json:stream", "cannot be a file's or folder's name on every system"),
    ("behaviours/CON.json", "cannot be a file's or folder's name on every system"),
    ("", "an empty path"),
    ("behaviours/\udc80.json", "holds a lone surrogate"),
])
def test_a_hostile_behaviour_path_is_refused_with_its_place(written, tmp_path, key, expected):
    raw = moved(json.loads(written[0].read_text(encoding="utf-8")), key)
    said = refused(raw, tmp_path, f"FILE:asset.behaviours.{shown_name(key)}: error: ")
    assert expected in said and said.count(" error: ") == 1, said


def test_a_path_listed_twice_or_the_same_file_twice_is_refused(written, tmp_path):
    text = written[0].read_text(encoding="utf-8")
    raw = json.loads(text)
    entry = json.dumps(raw["asset"]["behaviours"][BEHAVIOUR], ensure_ascii=False)
    # The same key twice in the JSON text (a reader keeping the last would run a file nobody checked)
    twice = text.replace('"behaviours":{', f'"behaviours":{{"{BEHAVIOUR}":{entry},', 1)
    assert twice.count(f'"{BEHAVIOUR}":') == 2
    refused(None, tmp_path, f"FILE:asset.behaviours.'{BEHAVIOUR}': error: listed twice", text=twice)
    # Two spellings of one file on a system that does not tell capitals apart
    raw["asset"]["behaviours"]["Behaviours/Guard_Threats.json"] = raw["asset"]["behaviours"][BEHAVIOUR]
    refused(raw, tmp_path, "FILE:asset.behaviours.'Behaviours/Guard_Threats.json': error:", "the same file as")
    # A behaviour under the asset's own name would be unpacked over the asset
    raw = json.loads(text)
    raw["asset"]["behaviours"]["gate_guard.json"] = raw["asset"]["behaviours"][BEHAVIOUR]
    refused(raw, tmp_path, "FILE:asset.behaviours.'gate_guard.json': error:", "the asset's own file")


def test_a_bundle_missing_a_behaviour_or_holding_one_nobody_runs_is_refused(written, tmp_path):
    raw = json.loads(written[0].read_text(encoding="utf-8"))
    raw["asset"]["behaviours"]["behaviours/spare.json"] = raw["asset"]["behaviours"][BEHAVIOUR]
    refused(raw, tmp_path, "FILE:asset.behaviours.'behaviours/spare.json': error: no Subgraph node of the asset "
            "runs this behaviour")
    del raw["asset"]["behaviours"][BEHAVIOUR]
    refused(raw, tmp_path, f"FILE:asset.file.guard.behaviour: error: runs the behaviour {BEHAVIOUR}, which the "
            "bundle does not hold")
    raw = json.loads(written[0].read_text(encoding="utf-8"))
    raw["asset"]["behaviours"][BEHAVIOUR]["file"]["name"] = "changed"
    refused(raw, tmp_path, f"FILE:asset.behaviours.'{BEHAVIOUR}'.sha256: error: the behaviour hashes to")
    raw = json.loads(written[0].read_text(encoding="utf-8"))
    raw["asset"]["behaviours"][BEHAVIOUR]["file"]["nodes"][1]["max_tokens"] = "many"
    refused(raw, tmp_path, f"FILE:asset.behaviours.'{BEHAVIOUR}'.file.warn.max_tokens: error:")
    # A behaviour that runs itself: the cycle is found in the bundle's files, at the node that starts it
    raw = json.loads(written[0].read_text(encoding="utf-8"))
    entry = raw["asset"]["behaviours"][BEHAVIOUR]
    entry["file"]["nodes"].append({"id": "again", "type": "Subgraph", "behaviour": "guard_threats.json",
                                   "exits": {"warned": "", "refused": "", "next": ""}})
    entry["sha256"] = asset_sha256(load_asset_dict(entry["file"]))
    refused(raw, tmp_path, "FILE:asset.file.guard.behaviour: error:", "a cycle of behaviours")
    raw = json.loads(written[0].read_text(encoding="utf-8"))
    raw["asset"]["folder"] = "../up"
    refused(raw, tmp_path, "FILE:asset.folder: error: '../up': goes up 1 folder")


def test_a_version_1_bundle_still_loads_and_one_that_needed_behaviours_says_why_not(written, tmp_path, sample_model):
    # A version 1 bundle (written before behaviours) of an asset without Subgraph nodes reads as it did
    asset = load_asset(examples_dir() / "chat.json").model_copy(update={"default_model": str(sample_model)})
    agent = Agent(asset, ScriptedBackend())
    agent.run_turn("Hello")
    raw = json.loads(dumps_bundle(make_bundle(asset, agent.export_dialog(), asset_dir=examples_dir())))
    assert "behaviours" not in raw["asset"] and "folder" not in raw["asset"]
    raw["version"] = 1
    old = bundle_from_dict(raw, "old.parley-bundle")
    assert old.behaviours == {} and old.runs == asset and old.conversation == agent.export_dialog()
    # One of gate_guard holds no behaviour file: refused at the node, saying why
    raw = json.loads(written[0].read_text(encoding="utf-8"))
    raw["version"] = 1
    # issue 39: one that says version 1 but carries behaviour files was read silently
    refused(raw, tmp_path, "FILE:asset.behaviours: error: a version 1 bundle holds no behaviour files")
    del raw["asset"]["behaviours"]
    refused(raw, tmp_path, f"FILE:asset.file.guard.behaviour: error: runs the behaviour {BEHAVIOUR}, which the "
            "bundle does not hold (a bundle of version 1 holds no behaviour files")
    raw["version"] = 3
    refused(raw, tmp_path, "FILE:version: error: this bundle is version 3")


def test_a_behaviour_above_the_assets_folder_keeps_its_place(tmp_path):
    """``../shared/x.json``: the key goes up, and the bundle records the asset's folder within it so the
    key stays inside the bundle's folder; unpacked, the layout is the one the asset was written in."""
    studio = tmp_path / "studio"
    copy_gate_guard(studio / "npcs")
    (studio / "shared").mkdir()
    shutil.move(studio / "npcs" / BEHAVIOUR, studio / "shared" / "threats.json")
    guard = load_asset(studio / "npcs" / "gate_guard.json")
    nodes = [n.model_copy(update={"behaviour": "../shared/threats.json"}) if n.id == "guard" else n
             for n in guard.nodes]
    save_asset(guard.model_copy(update={"nodes": nodes}), studio / "npcs" / "gate_guard.json")
    (studio / "npcs" / MODEL).write_bytes(b"GGUF, for the hash only")
    asset = load_asset(studio / "npcs" / "gate_guard.json")
    agent = Agent(asset, ScriptedBackend(), str(studio / "npcs"))
    agent.run_turn(LINES[1])
    bundle = make_bundle(asset, agent.export_dialog(), asset_dir=studio / "npcs", asset_source="gate_guard.json")
    assert list(bundle.behaviours) == ["../shared/threats.json"] and bundle.folder == "npcs"
    path = tmp_path / "b.parley-bundle"
    write_bundle(bundle, path)
    again = load_bundle(path)
    assert replay_bundle(again, backend=ScriptedBackend()).identical

    target = tmp_path / "unpacked"
    target.mkdir()
    written = unpack_bundle(again, target)
    assert sorted(p.relative_to(target).as_posix() for p in written) == [
        "npcs/gate_guard.dialog.json", "npcs/gate_guard.json", "shared/threats.json"]
    unpacked = load_asset(target / "npcs" / "gate_guard.json")
    assert dumps_asset(unpacked) == dumps_asset(asset)
    opened = Agent(unpacked, ScriptedBackend(), str(target / "npcs"))  # the graph expands from the files written
    assert opened.asset.node_ids() == bundle.runs.node_ids()
    assert load_history(target / "npcs" / "gate_guard.dialog.json") == agent.export_dialog()


def test_unpacking_writes_inside_the_chosen_folder_only_and_overwrites_nothing(written, tmp_path, capsys):
    path = written[0]
    target = tmp_path / "open-here"
    target.mkdir()
    assert main(["unpack", str(path), str(target)]) == 0
    assert capsys.readouterr().out.count("wrote ") == 3
    assert {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()} == {
        "gate_guard.json", BEHAVIOUR, "gate_guard.dialog.json"}
    assert main(["unpack", str(path), str(target)]) == 0, "the same files again: nothing to change"

    (target / BEHAVIOUR).write_text("{}", encoding="utf-8")  # someone's own file: it is not overwritten
    assert main(["unpack", str(path), str(target)]) == 2
    assert "is there already and holds something else" in capsys.readouterr().err
    assert (target / BEHAVIOUR).read_text(encoding="utf-8") == "{}"

    # A link inside the chosen folder that leads out of it is not written through
    linked, outside = tmp_path / "linked", tmp_path / "outside"
    linked.mkdir()
    outside.mkdir()
    (linked / "behaviours").symlink_to(outside, target_is_directory=True)
    with pytest.raises(BundleError, match="would be written outside"):
        unpack_bundle(load_bundle(path), linked)
    assert list(outside.iterdir()) == [] and list(linked.iterdir()) == [linked / "behaviours"], \
        "refused before anything was written"


def test_an_unpacking_that_fails_to_write_leaves_nothing_half_written(written, tmp_path, monkeypatch):
    """Issue 39: an OS error midway (a full disk) left a half-written folder. What this unpacking wrote
    (files and the folders it made) is taken back, and the error names the file."""
    from runtime.bundle import file as bundle_file

    target = tmp_path / "full-disk"
    target.mkdir()
    (target / "mine.txt").write_text("the designer's own", encoding="utf-8")
    real = bundle_file.atomic_write_text
    calls = []

    def fails_on_the_third(path, text):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(path, text)

    monkeypatch.setattr(bundle_file, "atomic_write_text", fails_on_the_third)
    with pytest.raises(BundleError, match="No space left on device; nothing this unpacking wrote is left"):
        unpack_bundle(load_bundle(written[0]), target)
    assert len(calls) == 3
    assert [p.name for p in target.iterdir()] == ["mine.txt"], "the behaviours folder it made is gone too"


@pytest.mark.model
def test_a_gate_guard_conversation_on_the_sample_model_replays_byte_identical_from_another_folder(sample_model,
                                                                                                   tmp_path):
    from runtime.backends.llama import LlamaBackend

    source = tmp_path / "studio"
    asset_path = copy_gate_guard(source)
    behaviour = load_asset(source / BEHAVIOUR)
    save_asset(behaviour.model_copy(update={"nodes": [n.model_copy(update={"max_tokens": 12})
                                                      if hasattr(n, "max_tokens") else n for n in behaviour.nodes]}),
               source / BEHAVIOUR)
    asset = load_asset(asset_path)
    nodes = [n.model_copy(update={"max_tokens": 12}) if hasattr(n, "max_tokens") else n for n in asset.nodes]
    asset = asset.model_copy(update={"default_model": str(sample_model), "nodes": nodes})
    backend = LlamaBackend(str(source))
    try:
        agent = Agent(asset, backend, str(source))
        paths = [agent.run_turn(line).path for line in LINES]
        bundle = make_bundle(asset, agent.export_dialog(), backend, source, asset_source="gate_guard.json")
    finally:
        backend.close()
    assert all(p[:2] == ["guard", "guard/classify"] for p in paths), paths
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = elsewhere / "guard.parley-bundle"
    write_bundle(bundle, path)
    shutil.rmtree(source)
    raw = json.loads(path.read_text(encoding="utf-8"))
    journals = {key for turn in raw["conversation"]["turns"] for key in turn.get("state", {}).get("journals", {})}
    assert "guard/classify" in journals, "the behaviour's node's decode journal is in the bundle"

    done = subprocess.run([sys.executable, "-m", "runtime", "replay", str(path), "--json"], capture_output=True,
                          text=True, timeout=REPLAY_TIMEOUT_S, check=False, cwd=elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["identical"] and report["first_difference"] is None
    assert [(t["turn"], t["outcome"], t["reason"]) for t in report["turns"]] == [
        (1, "identical", ""), (2, "identical", "")], "every node's decode journal was compared, token by token"
    assert list(elsewhere.iterdir()) == [path], "the replay wrote nothing"


def test_a_behaviour_whose_path_a_bundle_cannot_hold_is_said_when_bundling(tmp_path):
    """A name reading would refuse (one not every system can hold) is refused as the bundle is written,
    so no bundle is written that cannot be read back."""
    studio = tmp_path / "studio"
    asset_path = copy_gate_guard(studio)
    shutil.move(studio / BEHAVIOUR, studio / "behaviours" / "threats:v2.json")
    guard = load_asset(asset_path)
    nodes = [n.model_copy(update={"behaviour": "behaviours/threats:v2.json"}) if n.id == "guard" else n
             for n in guard.nodes]
    asset = guard.model_copy(update={"nodes": nodes})
    (studio / MODEL).write_bytes(b"GGUF, for the hash only")
    agent = Agent(asset, ScriptedBackend(), str(studio))
    agent.run_turn(LINES[0])
    with pytest.raises(BundleError, match="the behaviour behaviours/threats:v2.json: 'threats:v2.json' cannot be "
                                          "a file's or folder's name on every system; rename it to bundle it"):
        make_bundle(asset, agent.export_dialog(), asset_dir=studio, asset_source="gate_guard.json")
