"""Backend profiles: kept in the user's settings (never in an asset), keys never saved, bad files
named with the entry and field at fault, and ``--backend`` on the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    with pytest.raises(InputError, match=r"backends\[0\] \('x'\)\.api_key: error: API keys are never saved.*api_key_env"):
        load_profiles()


@pytest.mark.parametrize(("entry", "where", "words"), [
    ({"name": "a b", "kind": "openai", "url": "http://h:1"}, "('a b').name", "'a b' is not a profile name"),
    ({"name": "embedded", "kind": "openai", "url": "http://h:1"}, ".name", "'embedded' is reserved"),
    ({"name": "a", "kind": "vllm", "url": "http://h:1"}, "('a').kind", "Input should be 'llama-server' or 'openai'"),
    ({"name": "a", "kind": "openai", "url": "h:1"}, "('a').url", "'h:1' is not a server address"),
    ({"name": "a", "kind": "openai", "url": "http://h:1", "timeout": -1}, ".timeout", "Input should be greater than 0"),
    ({"name": "a", "kind": "openai", "url": "http://h:1", "api_key_env": "A-B"}, ".api_key_env",
     "not an environment variable"),
    ({"name": "a", "kind": "openai", "url": "http://h:1", "colour": "red"}, ".colour", "Extra inputs"),
    ([1, 2], "", "a profile is an object"),
])
def test_bad_entries_are_named_with_the_file_entry_and_field(profiles_file, entry, where, words) -> None:
    """Each problem is FILE:backends[i] ('name').field: error: what is wrong (issue 20: they printed as
    ": error: ..." with no location)."""
    profiles_file.parent.mkdir(parents=True)
    good = {"name": "fine", "kind": "llama-server", "url": "http://h:2"}
    profiles_file.write_text(json.dumps({"version": 1, "backends": [good, entry]}))
    with pytest.raises(InputError) as caught:
        load_profiles()
    [problem] = caught.value.problems
    assert problem.file == str(profiles_file) and problem.node_id.startswith("backends[1]")
    assert str(problem).startswith(f"{profiles_file}:backends[1]") and not str(problem).startswith(":")
    assert where in problem.where and words in problem.message and "Value error" not in problem.message


@pytest.mark.parametrize("text", ["{", "[]", '{"version": 2, "backends": []}', '{"backends": [], "x": 1}'])
def test_a_broken_file_is_an_input_error_naming_it(profiles_file, text) -> None:
    profiles_file.parent.mkdir(parents=True)
    profiles_file.write_text(text)
    with pytest.raises(InputError, match=str(profiles_file).replace("\\", "\\\\")):
        load_profiles()


def test_no_file_is_no_profiles_and_a_folder_is_refused(profiles_file) -> None:
    assert load_profiles() == []
    profiles_file.mkdir(parents=True)
    with pytest.raises(InputError, match="not a file but a folder"):
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
        assert f"{profiles_file}:1:2: error: malformed JSON" in capsys.readouterr().err
    assert profiles_file.read_text() == "{broken"  # nothing written over it


def test_a_backend_that_cannot_be_made_fails_each_case_with_the_reason() -> None:
    from runtime.suites.file import load_suite
    from runtime.suites.run import run_suites

    def broken():
        raise BackendError("the model file is gone")

    report = run_suites([load_suite(ROOT / "resources" / "examples" / "chat.suite.yaml")], broken)
    assert report.results and all(r.error == "no backend: the model file is gone" and r.server == ""
                                  for r in report.results)


# --- issue 20: reserved names, addresses, deep files, credentials, round trips ---------------------


@pytest.mark.parametrize("name", ["embedded", "llama", "scripted", "Llama", "EMBEDDED"])
def test_a_word_backend_reads_itself_is_no_profile_name(profiles_file, name, capsys) -> None:
    """A profile named 'llama' saved, but --backend llama and the picker ran on this computer."""
    with pytest.raises(ValueError, match=f"'{name}' is reserved, so it is not a profile name: --backend and the"):
        BackendProfile(name=name, kind="openai", url="http://h:1")
    assert parley(["backends", "add", name, "http://h:1", "--kind", "openai"]) == 2
    assert f"NAME: error: '{name}' is reserved" in capsys.readouterr().err
    assert not profiles_file.exists()
    profiles_file.parent.mkdir(parents=True)
    profiles_file.write_text(json.dumps({"version": 1, "backends": [{"name": name, "kind": "openai",
                                                                     "url": "http://h:1"}]}))
    with pytest.raises(InputError, match=rf"backends\[0\] \('{name}'\)\.name: error: '{name}' is reserved"):
        load_profiles()


@pytest.mark.parametrize(("url", "words"), [
    ("http://[::1", "Invalid IPv6 URL"),
    ("http://[zz]:1", "does not appear to be an IPv4 or IPv6 address"),
    ("http://h:99999", "Port out of range"),
    ("http://h:abc", "Port could not be cast"),
    ("http://h:0", "the port must be a number from 1 to 65535"),
    ("http://h:", "the port must be a number from 1 to 65535"),
    ("http://:8080", "names no host"),
    ("ftp://h:1", "must start with http:// or https://"),
    ("http://h :1", "has a space"),
    ("http://" + "h" * 3000, "at most 2048 characters"),
], ids=lambda value: value if len(value) < 60 else f"{value[:20]}...({len(value)} characters)")
def test_a_bad_address_is_refused_on_save_and_on_load_with_its_place(profiles_file, url, words, capsys) -> None:
    """'http://[::1' was saved, then every use of it was a traceback."""
    with pytest.raises(ValueError, match=re.escape(words)):
        BackendProfile(name="a", kind="openai", url=url)
    assert parley(["backends", "add", "a", url, "--kind", "openai"]) == 2
    assert "URL: error:" in capsys.readouterr().err
    assert parley(["backends", "add", "a", url]) == 2  # refused before the server is asked its kind
    assert "URL: error:" in capsys.readouterr().err
    assert not profiles_file.exists()
    profiles_file.parent.mkdir(parents=True)
    profiles_file.write_text(json.dumps({"version": 1, "backends": [{"name": "a", "kind": "openai", "url": url}]}))
    with pytest.raises(InputError) as caught:
        load_profiles()
    [problem] = caught.value.problems
    assert (problem.file, problem.node_id, problem.field) == (str(profiles_file), "backends[0] ('a')", "url")
    assert words in problem.message
    with pytest.raises(BackendError, match=re.escape(words) if url.startswith("http") else "no backend named"):
        find_profile(url, [])
    assert parley(["backends", "list"]) == 2
    assert f"{profiles_file}:backends[0] ('a').url: error:" in capsys.readouterr().err


def test_good_addresses_are_kept() -> None:
    for url in ("http://[::1]:8080", "https://h/v1", "http://10.0.0.5:8080/", "http://u:p@h:1/v1"):
        assert BackendProfile(name="a", kind="openai", url=f" {url} ").url == url


@pytest.mark.parametrize("text", ["[" * 100_000, '{"version": 1, "backends": [' + "[" * 100_000,
                                  '{"version": 1, "backends": [{"name": "a", "model": ' + "[" * 900 + "]" * 900 + "}]}"],
                         ids=["top level", "an entry", "a field"])
def test_a_deeply_nested_file_is_a_problem_naming_it(profiles_file, text, capsys) -> None:
    """A deeply nested backends.json stopped the editor from starting and `parley backends list`
    printed a traceback."""
    profiles_file.parent.mkdir(parents=True)
    profiles_file.write_text(text)
    with pytest.raises(InputError) as caught:
        load_profiles()
    assert all(p.file == str(profiles_file) for p in caught.value.problems)
    assert parley(["backends", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{profiles_file}") and "Traceback" not in err


def test_a_file_over_the_limit_is_refused_unread(profiles_file) -> None:
    from runtime.backends.profiles import MAX_FILE_BYTES

    profiles_file.parent.mkdir(parents=True)
    profiles_file.write_text(" " * (MAX_FILE_BYTES + 1))
    with pytest.raises(InputError, match="at most 1 MB is read"):
        load_profiles()


def test_credentials_in_an_address_are_never_shown(profiles_file, capsys) -> None:
    secret = "http://alice:s3cret@10.0.0.5:8080/v1"
    profile = BackendProfile(name="gpu", kind="openai", url=secret)
    assert profile.url == secret and "s3cret" not in profile.description and "alice" not in profile.description
    assert parley(["backends", "add", "gpu", secret, "--kind", "openai"]) == 0
    assert parley(["backends", "list"]) == 0
    assert parley(["backends", "add", "bad", "http://alice:s3cret@h:99999", "--kind", "openai"]) == 2
    with pytest.raises(BackendError) as caught:
        find_profile("http://alice:s3cret@[::1", [])
    said = capsys.readouterr()
    assert "10.0.0.5:8080" in said.out and "s3cret" not in said.out + said.err + str(caught.value)
    assert "alice" not in said.out + said.err + str(caught.value)


# What a backends.json may hold: good and bad values of every field, so some files load and some do not.
_names = st.one_of(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,10}", fullmatch=True),
                   st.sampled_from(["embedded", "llama", "", " x", "a,b"]), st.text(max_size=8))
_urls = st.one_of(
    st.builds(lambda scheme, auth, host, port, path: f"{scheme}://{auth}{host}{port}{path}",
              st.sampled_from(["http", "https", "ftp"]), st.sampled_from(["", "u:p@", "@"]),
              st.sampled_from(["h", "10.0.0.5", "[::1]", "[::1", "", "ex-ample.org"]),
              st.one_of(st.just(""), st.integers(-1, 70_000).map(lambda n: f":{n}"), st.just(":x")),
              st.sampled_from(["", "/", "/v1", "/v1/"])),
    st.text(max_size=12))
_entries = st.fixed_dictionaries(
    {"name": _names, "kind": st.sampled_from(["llama-server", "openai", "vllm"]), "url": _urls},
    optional={"api_key_env": st.sampled_from(["", "KEY", "A-B", "_K9"]),
              "model": st.text(max_size=8), "context_size": st.one_of(st.integers(-1, 20_000_000), st.booleans()),
              "timeout": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 4000),
                                   st.booleans()),
              "structured_output": st.sampled_from(["auto", "json_schema", "json_object", "none", "xml"]),
              "extra": st.integers()})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(_entries, max_size=4), padding=st.sampled_from(["", "  ", "\n"]))
def test_every_profiles_file_that_loads_saves_and_loads_as_the_same_value(profiles_file, entries, padding) -> None:
    profiles_file.parent.mkdir(parents=True, exist_ok=True)
    profiles_file.write_text(padding + json.dumps({"version": 1, "backends": entries}) + padding)
    try:
        loaded = load_profiles()
    except InputError as exc:
        assert exc.problems and all(p.file == str(profiles_file) and p.node_id.startswith("backends[")
                                    for p in exc.problems)
        return
    save_profiles(loaded)
    once = profiles_file.read_text()
    assert load_profiles() == loaded
    save_profiles(load_profiles())
    assert profiles_file.read_text() == once  # saving is stable, too
