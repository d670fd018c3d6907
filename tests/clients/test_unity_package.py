"""The Unity package (clients/unity): its manifest, assembly definition and .meta files have the shape Unity
reads, and its Runtime, sample and test program build with Mono's mcs (C# 7, no warnings) against stand-ins
for the few UnityEngine types they use (clients/unity/Tests~/StandIns/UnityEngine.cs: NOT Unity). The
stand-in UnityWebRequest does real HTTP and hands the body to DownloadHandlerScript.ReceiveData in 7-byte
pieces on a simulated main thread, so the package's UnityWebRequest transport runs against a real ``parley
serve``: the sample NPC's whole flow, a resume through tests/clients/cutting_proxy.py, the shared protocol
test set (clients/protocol) and, on the sample model, one chat turn. Two builds: a desktop one
(``-define:UNITY_5_3_OR_NEWER``) and a WebGL one (``-define:UNITY_WEBGL`` too), which has no HttpClient
transport at all, so everything it does goes through UnityWebRequest. Nothing here ran inside Unity.

Mono comes as for tests/clients/test_csharp_client.py (whose install code this module uses)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from runtime.resources import examples_dir
from tests.clients.console_picture import console_png
from tests.clients.cutting_proxy import CuttingProxy
from tests.clients.protocol import check_protocol, protocol_env, protocol_server
from tests.clients.test_csharp_client import RUN_SECONDS, _mono_tools, mono_tools
from tests.samples import example_on_sample_model
from tests.servers import parley_serve

ROOT = Path(__file__).resolve().parents[2]
UNITY = ROOT / "clients" / "unity"
SCREENSHOT = ROOT / "docs" / "screenshot-unity-sample.png"  # the README's picture of the sample's output
SOURCES = (*sorted((UNITY / "Runtime").glob("*.cs")), UNITY / "Tests~" / "StandIns" / "UnityEngine.cs",
           UNITY / "Samples~" / "TalkingNpc" / "TalkingNpc.cs", UNITY / "Tests~" / "ProtocolDriver.cs",
           UNITY / "Tests~" / "UnityPackageTest.cs")
BUILDS = {"desktop": ("-define:UNITY_5_3_OR_NEWER",), "webgl": ("-define:UNITY_5_3_OR_NEWER", "-define:UNITY_WEBGL")}
TOKEN = "unity-package-test-token"
TOOL_TIMEOUT = "10"
CHECKS = re.compile(r"^ok (.+)$", re.MULTILINE)
THROUGH_UNITY = re.compile(r"^requests through UnityWebRequest: (\d+)$", re.MULTILINE)


def test_unity_package_manifest_asmdef_and_meta_files_have_the_shape_unity_reads() -> None:
    manifest = json.loads((UNITY / "package.json").read_text(encoding="utf-8"))
    assert re.fullmatch(r"com\.[a-z0-9-]+(\.[a-z0-9-]+)+", manifest["name"]), manifest["name"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", manifest["version"]) and manifest["unity"] == "2021.3", manifest
    assert manifest["displayName"] and manifest["description"], manifest
    assert manifest["samples"], "no samples entry"
    for sample in manifest["samples"]:
        assert sample["displayName"] and sample["description"] and sample["path"].startswith("Samples~/"), sample
        assert list((UNITY / sample["path"]).glob("*.cs")), f"{sample['path']} has no script"

    [asmdef] = (UNITY / "Runtime").glob("*.asmdef")
    assembly = json.loads(asmdef.read_text(encoding="utf-8"))
    assert assembly["name"] and assembly["rootNamespace"] == "Parley" and assembly["autoReferenced"], assembly
    assert not assembly["noEngineReferences"] and assembly["includePlatforms"] == [], "Runtime must build everywhere"

    # A package added by git URL is immutable: Unity makes no .meta files for it, so every file and folder
    # Unity imports (all but those in folders ending in ~) has one committed, its GUID the MD5 of its path.
    imported = [p for p in UNITY.rglob("*") if p.suffix != ".meta"
                and not any(part.endswith("~") or part.startswith(".") for part in p.relative_to(UNITY).parts)]
    assert imported, "nothing to import"
    guids = {}
    for path in imported:
        meta = path.with_name(path.name + ".meta")
        assert meta.is_file(), f"{meta.relative_to(ROOT)} is missing (see clients/unity/README.md, Files)"
        guid = re.search(r"^guid: ([0-9a-f]{32})$", meta.read_text(encoding="utf-8"), re.MULTILINE)
        assert guid, f"{meta.relative_to(ROOT)} has no guid"
        assert guid.group(1) == hashlib.md5(path.relative_to(ROOT).as_posix().encode()).hexdigest(), meta
        assert ("folderAsset: yes" in meta.read_text(encoding="utf-8")) == path.is_dir(), meta
        guids[guid.group(1)] = path
    assert len(guids) == len(imported), "two files share a GUID"
    orphans = [m for m in UNITY.rglob("*.meta") if not m.with_name(m.name[:-len(".meta")]).exists()]
    assert not orphans, f".meta files of nothing: {orphans}"


def build_test_program(mcs: str, mono: str, folder: Path, build: str) -> list[str]:
    """Builds UnityPackageTest.exe for ``build`` (desktop or webgl) in ``folder``; the command that runs it."""
    exe = folder / f"UnityPackageTest-{build}.exe"
    done = subprocess.run([mcs, "-langversion:7", "-warnaserror", "-r:System.Net.Http.dll", *BUILDS[build], f"-out:{exe}",
                           *map(str, SOURCES)], capture_output=True, text=True, timeout=RUN_SECONDS, check=False)
    assert done.returncode == 0, f"mcs ({build}) failed:\n{done.stdout}{done.stderr}"
    return [mono, "--debug", str(exe)]


@pytest.fixture(scope="module")
def unity_builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The commands that run UnityPackageTest.exe, built for the desktop and for WebGL."""
    tools = mono_tools()
    folder = tmp_path_factory.mktemp("unity")
    return {build: build_test_program(*tools, folder, build) for build in BUILDS}


def run_program(command: list[str], url: str, mode: str, **more: str) -> tuple[str, str]:
    """UnityPackageTest.exe URL MODE; its stdout and stderr, after checking it passed."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}, "PARLEY_TOKEN": TOKEN, **more}
    done = subprocess.run([*command, url, mode], env=env, capture_output=True, text=True, encoding="utf-8",
                          errors="replace", timeout=RUN_SECONDS, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"UnityPackageTest.exe {mode} exited {done.returncode}:\n{output[-12000:]}"
    assert "FAIL" not in output and done.stderr.rstrip().endswith("all passed"), output[-12000:]
    through = THROUGH_UNITY.search(done.stderr)
    assert through and int(through.group(1)) > 0, f"nothing went through UnityWebRequest:\n{output[-4000:]}"
    return done.stdout, done.stderr


@pytest.mark.parametrize("build", list(BUILDS))
def test_unity_sample_npc_talks_streams_answers_a_tool_saves_loads_and_cancels(unity_builds: dict[str, list[str]],
                                                                                 build: str) -> None:
    """The sample NPC on a ParleyNpc, over UnityWebRequest (the WebGL build's only transport; the desktop
    build asks for it): the subtitle is the reply's tokens only, the tool call is answered from the game's
    stores, the states come in order, a save and a load put the history back, and Stop cancels a turn."""
    with parley_serve("--backend", "scripted", "--assets", str(examples_dir()), "--tool-timeout", TOOL_TIMEOUT,
                      token=TOKEN) as url:
        transcript, checks = run_program(unity_builds[build], url, "sample", PARLEY_TRANSPORT="unitywebrequest")
    assert CHECKS.findall(checks) == [
        "sse lines across chunks",
        "a turn: the subtitle is the reply's tokens only, the tool answered, the states in order",
        "save and load the history", "cancel", "reply tags", "callbacks on the main thread"], checks
    for line in ("Player: Quartermaster, how many arrows?",
                 '  [the game answers check_stock{"item":"arrows"}: 240 arrows in the armoury — counted twice]',
                 "Hilde: unity.sample/reply heard: 240 arrows in the armoury — counted twice",
                 "  [loaded the save: Hilde remembers 1 turn]",
                 '  (Hilde stops: the turn was cancelled; "Quartermaster, how many arrows?" can be said again)',
                 "  [Tomas's mood: cheerful]", "  [Tomas's gesture: bow]"):
        assert line in transcript.splitlines(), f"{line!r} not in the transcript:\n{transcript}"
    if build == "webgl":  # the README's picture of the sample's output
        console_png(transcript.splitlines(), "Samples~/TalkingNpc (WebGL build) under Mono with UnityEngine stand-ins, "
                    "on parley serve --backend scripted", SCREENSHOT)


def test_unity_transport_resumes_a_broken_stream_and_hands_a_lost_turn_line_back(
        unity_builds: dict[str, list[str]]) -> None:
    """The proxy cuts turn streams after the tool request (whole, and in the middle of its data line); the
    WebGL build's UnityWebRequest transport resumes with Last-Event-ID and every event comes once, as an
    unbroken turn's; a resume that reaches the server that never ran the turn is turn_lost, with the line."""
    args = ("--backend", "scripted", "--assets", str(examples_dir()))
    with parley_serve(*args, token=TOKEN) as url, parley_serve(*args, "--store", "none", token=TOKEN) as other, \
            CuttingProxy(url, other) as proxy:
        _, checks = run_program(unity_builds["webgl"], proxy.url, "resume", PARLEY_OTHER_URL=other)
    assert CHECKS.findall(checks) == ["a broken stream resumed", "a turn lost with its server"], checks
    assert proxy.cuts == {"cut.tool_request.unity": 1, "half.tool_request.unity": 1,
                          "lost.turn_started.unity": 1}, proxy.cuts
    assert proxy.resumes == {"cut.tool_request.unity": 1, "half.tool_request.unity": 1,
                             "lost.turn_started.unity": 1}, proxy.resumes


def test_unity_package_runs_the_shared_protocol_set_over_unitywebrequest(unity_builds: dict[str, list[str]]) -> None:
    """clients/protocol/conversation.json through ParleyConversation on the WebGL build (UnityWebRequest only)."""
    with protocol_server("unity") as url:
        env = protocol_env(url, "unity")
        transcript, _ = run_program(unity_builds["webgl"], url, "protocol", **env)
    check_protocol(transcript, "unity")


@pytest.mark.model
def test_unity_package_runs_a_chat_turn_on_the_sample_model(unity_builds: dict[str, list[str]], sample_model: Path,
                                                           tmp_path: Path) -> None:
    example_on_sample_model("chat", sample_model, tmp_path, 24)
    with parley_serve("--backend", "embedded", "--assets", str(tmp_path), token=TOKEN) as url:
        transcript, checks = run_program(unity_builds["webgl"], url, "model")
    assert CHECKS.findall(checks) == ["model turn"], checks
    reply = re.search(r"^reply: (.*)$", transcript, re.MULTILINE)
    assert reply and reply.group(1).strip(), transcript


def print_sample_transcript() -> None:
    """Prints what a player of the sample sees (``python -m tests.clients.test_unity_package``)."""
    tools = _mono_tools()
    assert tools, "needs Mono: mcs, mono and System.Net.Http.dll"
    with tempfile.TemporaryDirectory() as folder:
        os.environ["PARLEY_SERVE_STATE"] = folder  # the server's sessions, kept apart from the user's
        command = build_test_program(*tools, Path(folder), "desktop")
        with parley_serve("--backend", "scripted", "--assets", str(examples_dir()), token=TOKEN) as url:
            transcript, _ = run_program(command, url, "sample", PARLEY_TRANSPORT="unitywebrequest")
    print(transcript, end="")


if __name__ == "__main__":
    print_sample_transcript()
