"""Backend profiles: kept in the user's settings (never in an asset), keys never saved, bad files
named with the entry and field at fault, and ``--backend`` on the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.backends.llama_server import LlamaServerBackend
from runtime.backends.openai_server import OpenAIBackend
from runtime.backends.profiles import (
    BACKENDS_ENV,
    BackendProfile,
    backend_factory,
    find_profile,
    load_profiles,
    make_backend,
    profiles_path,
    save_profiles,
)
from runtime.cli import main as parley
from runtime.problems import BackendError, InputError

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def profiles_file(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "config" / "backends.json"
    monkeypatch.setenv(BACKENDS_ENV, str(path))
    return path


def test_profiles_round_trip_and_keys_stay_in_the_environment(profiles_file, monkeypatch) -> None:
    gpu = BackendProfile(name="gpu-box", kind="llama-server", url="http://10.0.0.5:8080", api_key_env="GPU_KEY")
    vllm = BackendProfile(name="vllm", kind="openai", url="http://10.0.0.6:8000/v1", model="Qwen/Qwen2.5-7B",
                          context_size=32768)
    assert save_profiles([gpu, vllm]) == profiles_file == profiles_path()
    assert load_profiles() == [gpu, vllm]
    monkeypatch.setenv("GPU_KEY", "sk-secret-123")
    assert make_backend(gpu).server.api_key == "sk-secret-123"
    assert "sk-secret" not in profiles_file.read_text()
    monkeypatch.delenv("GPU_KEY")
    with pytest.raises(BackendError, match="GPU_KEY that holds its API key is not set"):
        make_backend(gpu)


def test_a_key_written_into_the_file_is_refused_not_used(profiles_file) -> None:
    profiles_file.parent.mkdir(parents=True)
    profiles_file.write_text(json.dumps({"version": 1, "backends": [
        {"name": "x", "kind": "openai", "url": "http://h:1", "api_key": "sk-oops"}]}))
    with pytest.raises(InputError, match=r"backends\[0\] \('x'\): API keys are never saved.*api_key_env"):
        load_profiles()


@pytest.mark.parametrize(("entry", "words"), [
    ({"name": "a b", "kind": "openai", "url": "http://h:1"}, "name: Value error, 'a b' is not a profile name"),
    ({"name": "embedded", "kind": "openai", "url": "http://h:1"}, "not 'embedded'"),
    ({"name": "a", "kind": "vllm", "url": "http://h:1"}, "kind: Input should be 'llama-server' or 'openai'"),
    ({"name": "a", "kind": "openai", "url": "h:1"}, "url: Value error, 'h:1' is not a server address"),
    ({"name": "a", "kind": "openai", "url": "http://h:1", "timeout": -1}, "timeout: Input should be greater than 0"),
    ({"name": "a", "kind": "openai", "url": "http://h:1", "api_key_env": "A-B"}, "not an environment variable"),
    ({"name": "a", "kind": "openai", "url": "http://h:1", "colour": "red"}, "colour: Extra inputs"),
])
def test_bad_entries_are_named_with_the_file_entry_and_field(profiles_file, entry, words) -> None:
    profiles_file.parent.mkdir(parents=True)
    good = {"name": "fine", "kind": "llama-server", "url": "http://h:2"}
    profiles_file.write_text(json.dumps({"version": 1, "backends": [good, entry]}))
    with pytest.raises(InputError) as caught:
        load_profiles()
    message = str(caught.value)
    assert str(profiles_file) in message and "backends[1]" in message and words in message


@pytest.mark.parametrize("text", ["{", "[]", '{"version": 2, "backends": []}', '{"backends": [], "x": 1}'])
def test_a_broken_file_is_an_input_error_naming_it(profiles_file, text) -> None:
    profiles_file.parent.mkdir(parents=True)
    profiles_file.write_text(text)
    with pytest.raises(InputError, match=str(profiles_file).replace("\\", "\\\\")):
        load_profiles()


def test_no_file_is_no_profiles_and_a_folder_is_refused(profiles_file) -> None:
    assert load_profiles() == []
    profiles_file.mkdir(parents=True)
    with pytest.raises(InputError, match="not a regular file"):
        load_profiles()


def test_backend_specs() -> None:
    gpu = BackendProfile(name="gpu", kind="llama-server", url="http://h:1")
    assert find_profile("embedded", [gpu]) is None and find_profile("llama", [gpu]) is None
    assert find_profile("gpu", [gpu]) == gpu
    assert find_profile("llama+http://h:9", []).kind == "llama-server"
    assert find_profile("openai+http://h:9/v1", []).kind == "openai"
    with pytest.raises(BackendError, match=r"no backend named 'gpux'.*saved profiles: gpu"):
        find_profile("gpux", [gpu])
    assert isinstance(backend_factory("gpu", None, [gpu])(), LlamaServerBackend)
    assert isinstance(backend_factory("openai+http://h:9", None, [])(), OpenAIBackend)


def test_an_address_with_no_server_says_so_when_its_kind_must_be_asked() -> None:
    with pytest.raises(BackendError, match="connection was refused"):
        find_profile("http://127.0.0.1:9", [])


def test_the_asset_never_holds_the_backend() -> None:
    """Assets stay portable: no backend, profile or server field exists in the asset model."""
    from runtime.asset.model import Asset

    fields = set(Asset.model_fields)
    assert not {f for f in fields if "backend" in f or "server" in f or "url" in f}


def test_parley_backends_add_list_remove(profiles_file, capsys) -> None:
    assert parley(["backends", "add", "gpu", "http://10.0.0.5:8080", "--kind", "llama-server",
                   "--api-key-env", "GPU_KEY"]) == 0
    assert parley(["backends", "list"]) == 0
    out = capsys.readouterr().out
    assert "gpu · llama.cpp server at http://10.0.0.5:8080 · key from $GPU_KEY" in out
    assert parley(["backends", "add", "bad", "nope", "--kind", "openai"]) == 2
    assert "not a server address" in capsys.readouterr().err
    assert parley(["backends", "remove", "gpu"]) == 0
    assert load_profiles() == []
    assert parley(["backends", "remove", "gpu"]) == 2


def test_parley_chat_and_test_name_an_unknown_backend(capsys) -> None:
    asset = ROOT / "resources" / "examples" / "chat.json"
    assert parley(["chat", str(asset), "--backend", "nowhere", "--script", str(asset)]) == 1
    assert "no backend named 'nowhere'" in capsys.readouterr().err
    suite = ROOT / "resources" / "examples" / "chat.suite.yaml"
    assert parley(["test", str(suite), "--backend", "scripted,,scripted"]) == 2
    assert "empty name between commas" in capsys.readouterr().err
    assert parley(["test", str(suite), "--backend", "http://127.0.0.1:9"]) == 2
    assert "connection was refused" in capsys.readouterr().err


def test_a_fleet_of_one_lost_server_fails_every_case_with_the_reason_and_loses_none(capsys, tmp_path) -> None:
    suite = ROOT / "resources" / "examples" / "chat.suite.yaml"
    code = parley(["test", str(suite), "--backend", "llama+http://127.0.0.1:9,openai+http://127.0.0.1:9",
                   "--json", str(tmp_path / "r.json")])
    assert code == 1
    cases = json.loads((tmp_path / "r.json").read_text())["cases"]
    assert cases and all("no server left to run it" in c["error"] for c in cases)
    assert all(c["moved"] for c in cases)


def test_parley_backends_says_why_a_broken_file_cannot_be_read_and_keeps_it(profiles_file, capsys) -> None:
    profiles_file.parent.mkdir(parents=True)
    profiles_file.write_text("{broken")
    for argv in (["backends", "list"], ["backends", "add", "x", "http://h:1", "--kind", "openai"],
                 ["backends", "remove", "x"]):
        assert parley(argv) == 2
        assert f"{profiles_file}: not valid JSON" in capsys.readouterr().err
    assert profiles_file.read_text() == "{broken"  # nothing written over it


def test_a_backend_that_cannot_be_made_fails_each_case_with_the_reason() -> None:
    from runtime.suites.file import load_suite
    from runtime.suites.run import run_suites

    def broken():
        raise BackendError("the model file is gone")

    report = run_suites([load_suite(ROOT / "resources" / "examples" / "chat.suite.yaml")], broken)
    assert report.results and all(r.error == "no backend: the model file is gone" and r.server == ""
                                  for r in report.results)
