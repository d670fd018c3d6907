"""The repro bundle file: what it holds, that it reads back as written, that every bad part is refused
naming its field, and that a model is hashed once however often it is bundled."""

from __future__ import annotations

import json

import pytest

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.bundle import file as bundle_file
from runtime.bundle.file import (
    BUNDLE_FORMAT,
    BundleError,
    asset_sha256,
    bundle_from_dict,
    dumps_bundle,
    load_bundle,
    make_bundle,
    model_sha256,
    write_bundle,
)
from runtime.cli import main
from runtime.dialogue.dialog_file import save_history
from runtime.models.folder import file_sha256
from runtime.resources import examples_dir


def test_a_model_is_hashed_once_per_file_and_again_when_it_changes(tmp_path, monkeypatch):
    calls = []

    def counted(path):
        calls.append(path)
        return file_sha256(path)

    monkeypatch.setattr(bundle_file, "file_sha256", counted)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 5000)
    first = model_sha256(model)
    assert model_sha256(model) == first and len(calls) == 1, "the second time is remembered in this process"
    monkeypatch.setattr(bundle_file, "_hashes", {})  # another process: the hash is remembered on disk
    assert model_sha256(model) == first and len(calls) == 1
    model.write_bytes(b"GGUF" + b"\1" * 5001)
    assert model_sha256(model) != first and len(calls) == 2, "a changed file is hashed again"


def test_a_damaged_hash_cache_is_only_a_cache(tmp_path, private_hash_cache):
    private_hash_cache.parent.mkdir(parents=True)
    private_hash_cache.write_text("{not json", encoding="utf-8")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x" * 100)
    assert model_sha256(model) == file_sha256(model)
    assert json.loads(private_hash_cache.read_text(encoding="utf-8"))[str(model.resolve())]["size"] == 100


@pytest.fixture(scope="module")
def conversation(sample_model):
    """Three scripted turns on the chat example pointed at the sample model (the bundle hashes it)."""
    asset = load_asset(examples_dir() / "chat.json").model_copy(update={"default_model": str(sample_model)})
    agent = Agent(asset, ScriptedBackend())
    for line in ("Hello", "Any rooms?", "Goodnight"):
        agent.run_turn(line)
    return asset, agent.export_dialog()


@pytest.fixture()
def raw(conversation):
    asset, saved = conversation
    return json.loads(dumps_bundle(make_bundle(asset, saved, asset_dir=examples_dir(), asset_source="chat.json")))


def refused(raw, tmp_path, *expected: str) -> str:
    """Write ``raw`` and read it: it must be refused with each of ``expected`` in the message."""
    path = tmp_path / "bad.parley-bundle"
    path.write_text(json.dumps(raw) if not isinstance(raw, str) else raw, encoding="utf-8")
    with pytest.raises(BundleError) as caught:
        load_bundle(path)
    text = str(caught.value)
    for part in expected:
        assert part.replace("FILE", str(path)) in text, text
    return text


@pytest.mark.model
def test_a_bundle_holds_every_part_and_reads_back_as_written(conversation, tmp_path, sample_model):
    asset, saved = conversation
    bundle = make_bundle(asset, saved, asset_dir=examples_dir(), asset_source="chat.json")
    path = tmp_path / "b.parley-bundle"
    size = write_bundle(bundle, path)
    assert size == path.stat().st_size
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert raw["format"] == BUNDLE_FORMAT and raw["version"] == 2
    assert raw["asset"]["sha256"] == asset_sha256(asset) and raw["asset"]["source"] == "chat.json"
    assert raw["models"] == [{"name": str(sample_model), "file": sample_model.name,
                              "size": sample_model.stat().st_size, "sha256": file_sha256(sample_model)}]
    assert raw["llama_cpp"]["version"] and "CPU" in raw["llama_cpp"]["system_info"]
    settings = raw["settings"]
    assert settings["flash_attn"] == "off" and settings["kv_type"] == "f16" and settings["n_batch"] == 512
    assert settings["n_threads"] >= 1 and settings["seeds"] == {"reply": asset.node("reply").seed}
    assert raw["contexts"]["reply"]["n_ctx"] == asset.node("reply").context_size
    assert raw["conversation"]["format"] == "parley-dialog" and len(raw["conversation"]["turns"]) == 3
    again = load_bundle(path)
    assert again == bundle, "what is written reads back as it was"
    assert dumps_bundle(again) == path.read_text(encoding="utf-8")


@pytest.mark.model
@pytest.mark.parametrize(("change", "expected"), [
    (lambda r: r.update(format="parley-dialog"), "FILE:format: error: not a Parley repro bundle"),
    (lambda r: r.update(version=3), "FILE:version: error: this bundle is version 3"),
    (lambda r: r.update(version=0), "FILE:version: error: a bundle's version is 1 to 2"),
    (lambda r: r["settings"].pop("n_threads"), "FILE:settings.n_threads: error: required field is missing"),
    (lambda r: r["settings"].update(n_thread=2), "FILE:settings.n_thread: error: unknown key"),
    (lambda r: r["settings"].update(flash_attn="maybe"), "FILE:settings.flash_attn: error:"),
    (lambda r: r["settings"].update(n_batch=0), "FILE:settings.n_batch: error:"),
    (lambda r: r["models"][0].update(sha256="b179"), "FILE:models.0.sha256: error: a SHA-256 is 64 lowercase hex"),
    (lambda r: r.update(models=[]), "FILE:models: error: node reply uses the model"),
    (lambda r: r["asset"]["file"].update(name="Someone else"), "FILE:asset.sha256: error: the asset hashes to"),
    (lambda r: r["asset"]["file"]["nodes"][0].update(max_tokens="many"), "FILE:asset.file.reply.max_tokens: error:"),
    (lambda r: r["settings"]["seeds"].update(reply=7), ("FILE:settings.seeds.reply: error: the seed is 7, but "
                                                        "the asset's node has seed")),
    (lambda r: r["settings"].update(seed_salt=5), ("FILE:settings.seed_salt: error: the seed salt is 5, "
                                                   "but the conversation's is 0")),
    (lambda r: r["contexts"].update(nope=r["contexts"]["reply"]), "FILE:contexts.nope: error: not a node of the asset"),
    (lambda r: r["contexts"].pop("reply"), "FILE:contexts: error: node reply uses a model, and has no context here"),
    (lambda r: r["asset"]["file"]["nodes"][0].update(system_prompt="\ud800"),
     "FILE:asset.file.nodes.0.system_prompt: error: the text holds a lone surrogate"),
    (lambda r: r["conversation"].update(format="x"), "FILE:conversation.format: error: not a Parley dialog history"),
    (lambda r: r["conversation"]["turns"][1].setdefault("state", {}).update(windows={"ghost": 0}),
     "FILE:conversation.turns[id 1].state.windows.ghost: error: a window for ghost"),
    (lambda r: r["conversation"]["turns"][0].setdefault("state", {}).update(
        journals={"reply": {"keep": 99, "chunks": [{"tokens": [1, 2], "kept": 1}]}}),
     "FILE:conversation.turns.0.state.journals.reply.keep: error: keeps 99 cells"),
])
def test_every_bad_part_of_a_bundle_is_refused_naming_its_field(raw, tmp_path, change, expected):
    change(raw)
    refused(raw, tmp_path, expected)


@pytest.mark.model
def test_a_bundle_that_is_not_a_json_object_is_refused_with_its_place(raw, tmp_path):
    refused("{\"format\": ", tmp_path, "FILE:1:", "malformed JSON")
    refused([raw], tmp_path, "FILE: error: a repro bundle is a JSON object, not an array")
    folder = tmp_path / "folder.parley-bundle"
    folder.mkdir()
    with pytest.raises(BundleError, match="not a file but a folder"):
        load_bundle(folder)


@pytest.mark.model
def test_parley_bundle_writes_a_bundle_and_parley_replay_refuses_a_bad_one_with_exit_2(conversation, tmp_path,
                                                                                       capsys, sample_model):
    asset_path = tmp_path / "chat.json"
    asset_path.write_text((examples_dir() / "chat.json").read_text(encoding="utf-8"), encoding="utf-8")
    history = tmp_path / "h.json"
    save_history(conversation[1], history)
    out = tmp_path / "b.parley-bundle"
    assert main(["bundle", str(asset_path), str(history), "--model", str(sample_model), "-o", str(out),
                 "--threads", "1", "--threads-batch", "1"]) == 0
    said = capsys.readouterr().out
    assert f"wrote {out}" in said and "3 turns on SmolLM2" in said and "1/1 threads" in said
    bundle = load_bundle(out)
    assert bundle.settings.n_threads == bundle.settings.n_threads_batch == 1
    assert bundle.asset.default_model == str(sample_model) and bundle.conversation == conversation[1]

    raw = json.loads(out.read_text(encoding="utf-8"))
    raw["settings"]["kv_type"] = "q2"
    out.write_text(json.dumps(raw), encoding="utf-8")
    assert main(["replay", str(out)]) == 2
    assert f"{out}:settings.kv_type: error:" in capsys.readouterr().err

    assert main(["bundle", str(asset_path), str(history), "-o", str(tmp_path / "no" / "b.parley-bundle")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["bundle", str(asset_path), str(history), "--flash-attn", "off", "--kv-type", "q8_0", "-o",
                 str(out)]) == 2
    assert "needs flash attention" in capsys.readouterr().err


@pytest.mark.model
def test_a_replay_needs_the_model_the_bundle_was_recorded_on(raw, tmp_path, sample_model):
    from runtime.bundle.replay import model_files

    digest = file_sha256(sample_model)
    raw["models"][0]["sha256"] = "0" * 64
    bundle = bundle_from_dict(raw, "b.parley-bundle")
    with pytest.raises(BundleError) as caught:
        model_files(bundle)
    text = str(caught.value)
    assert "b.parley-bundle:models.0.sha256: error:" in text and digest in text and "0" * 64 in text
    assert "--force" in text
    files, notes = model_files(bundle, force=True)
    assert files == {str(sample_model): sample_model.resolve()} and digest in notes[0]

    raw["models"][0]["sha256"] = digest
    for node in raw["asset"]["file"]["nodes"]:
        node["model_name"] = "elsewhere/SmolLM2-135M-Instruct.Q4_1.gguf"
    raw["asset"]["sha256"] = asset_sha256(load_asset_dict(raw["asset"]["file"]))
    raw["models"][0].update(name="elsewhere/SmolLM2-135M-Instruct.Q4_1.gguf", file="Missing.gguf")
    raw["contexts"]["reply"]["model"] = "elsewhere/SmolLM2-135M-Instruct.Q4_1.gguf"
    missing = bundle_from_dict(raw, "b.parley-bundle")
    with pytest.raises(BundleError, match="b.parley-bundle:models.0: error: the model Missing.gguf .* is not on this "
                                          "machine"):
        model_files(missing)
    files, _ = model_files(missing, [str(sample_model)])  # named on the command line: the bundle's only model
    assert list(files.values()) == [sample_model.resolve()]


def test_a_replay_reads_no_file_the_bundle_points_at_outside_the_models_it_can_use(raw, tmp_path, sample_model,
                                                                                   monkeypatch):
    """Issue 39: `parley replay` hashed any file a bundle named, a path outside the bundle too, and a file
    that never ends (/proc/self/pagemap) made it hash without end. A bundle's absolute or upward name is
    never looked for; a file of another size than recorded is not read; a device or pipe is refused."""
    from runtime.bundle import replay
    from runtime.bundle.replay import model_files

    hashed: list = []
    monkeypatch.setattr(replay, "model_sha256", lambda path: hashed.append(path) or "f" * 64)

    def naming(name: str):
        for node in raw["asset"]["file"]["nodes"]:
            node["model_name"] = name
        raw["asset"]["sha256"] = asset_sha256(load_asset_dict(raw["asset"]["file"]))
        raw["models"][0].update(name=name, file="pagemap")
        raw["contexts"]["reply"]["model"] = name
        return bundle_from_dict(raw, "b.parley-bundle")

    with pytest.raises(BundleError, match="is not on this machine"):
        model_files(naming("/proc/self/pagemap"))
    with pytest.raises(BundleError, match="is not on this machine"):
        model_files(naming("../../../../../proc/self/pagemap"))
    assert hashed == []
    # given on the command line: another size is said without reading it, a device is refused
    with pytest.raises(BundleError, match="has 0 bytes, but the bundle was recorded on pagemap with"):
        model_files(naming("pagemap"), ["/proc/self/pagemap"])
    with pytest.raises(BundleError, match="not a regular file"):
        model_files(naming("pagemap"), ["/dev/zero"])
    assert hashed == []


def load_asset_dict(raw):
    from runtime.asset.file import asset_from_dict

    return asset_from_dict(raw)


def test_a_replayed_tool_call_is_answered_with_the_recorded_result_of_the_same_call():
    from runtime.agent import TurnError
    from runtime.dialogue.history import Reply, ToolExchange, Turn
    from runtime.session.tools import recorded_answers

    turn = Turn("where is the key?", [ToolExchange("ask", "lookup", {"q": "key"}, "under the mat"),
                                      ToolExchange("ask", "lookup", {"q": "door"}, "locked"), Reply("reply", "...")])
    answer = recorded_answers(turn)
    assert answer("ask", "lookup", {"q": "key"}) == "under the mat"
    assert answer("ask", "lookup", {"q": "door"}) == "locked", "the node's calls of the tool, in order"
    with pytest.raises(TurnError, match="the recorded turn has no result for that call"):
        answer("ask", "lookup", {"q": "window"})
