"""The C# client (clients/unity/Runtime/ParleyClient.cs, the one C# protocol core, here on its HttpClient
transport) built with Mono's mcs and run with mono against a real ``parley serve`` process: a whole
scripted conversation (a tool call answered by the client, two NPCs waiting on tools at once, turns
cancelled by POST /cancel, by a token and by a failing tool, history, variables, params, typed errors, the
token) on both of Mono's HTTP handlers, turns whose streams a proxy breaks mid-turn (resumed, or lost with
the line handed back), a server killed mid-turn (server_gone) and one never started (unavailable), and one
turn on the real sample model.

Mono comes from the package registry: when ``mcs`` or ``mono`` is missing and we are root with apt-get,
the module installs ``mono-mcs`` (which brings ``mono-runtime``) and ``libmono-system-net-http4.0-cil``
(about 20 s on Debian 12); otherwise it skips, saying why."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from runtime.resources import examples_dir
from tests.apt import apt_install
from tests.clients.cutting_proxy import CuttingProxy
from tests.clients.kill_switch import KillSwitch, closed_url
from tests.clients.protocol import check_protocol, protocol_env, protocol_server
from tests.samples import example_on_sample_model
from tests.servers import parley_serve, parley_serve_process

ROOT = Path(__file__).resolve().parents[2]
CSHARP = ROOT / "clients" / "csharp"
# The core lives in the Unity package (a package added by git URL sees only clients/unity); this test builds
# it without Unity, on its HttpClient transport.
CORE = ROOT / "clients" / "unity" / "Runtime" / "ParleyClient.cs"
UNITY = ROOT / "clients" / "unity"
# the core, the Unity package's plain-C# conversation (which the protocol driver runs through) and the tests
SOURCES = (CORE, UNITY / "Runtime" / "ParleyConversation.cs", UNITY / "Tests~" / "ProtocolDriver.cs",
           CSHARP / "tests" / "ConversationTest.cs")
MONO_PACKAGES = ("mono-mcs", "libmono-system-net-http4.0-cil")
TOKEN = "csharp-client-test-token"
RUN_SECONDS = 600.0  # a deadline for the program; its own waits fail sooner (60 s each)
# A client that never answers a tool call fails on the server's tool timeout: this soon, not 30 s.
TOOL_TIMEOUT = "10"

SCRIPTED_CHECKS = ("json", "token required", "health and assets", "create session", "turn with a tool call",
                   "async and callback tools", "two sessions at once", "turn cancelled by POST /cancel",
                   "turn cancelled by its token", "tool that throws",
                   "history and rewind", "variables and params", "typed errors", "guarded turn and game event",
                   "delete session",
                   "callbacks on the caller's thread")


def _http_dll(mono: str) -> Path:
    return Path(mono).resolve().parents[1] / "lib" / "mono" / "4.5" / "System.Net.Http.dll"


def _mono_tools() -> tuple[str, str] | None:
    mcs, mono = shutil.which("mcs"), shutil.which("mono")
    return (mcs, mono) if mcs and mono and _http_dll(mono).is_file() else None


def mono_tools() -> tuple[str, str]:
    """mcs and mono, installed with apt-get when missing; skips the test, saying why, when they cannot be."""
    tools = _mono_tools()
    if tools is None:
        why = apt_install(MONO_PACKAGES, "mcs, mono or mono's System.Net.Http.dll")
        tools = _mono_tools()
        if tools is None:
            pytest.skip(why or "apt-get installed Mono, but mcs, mono or System.Net.Http.dll is still missing")
    return tools


@pytest.fixture(scope="module")
def conversation_test(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command that runs ConversationTest.exe, built from the client and the test program."""
    mcs, mono = mono_tools()
    exe = tmp_path_factory.mktemp("csharp") / "ConversationTest.exe"
    # C# 7 and no warnings: what Unity's compiler takes, kept clean.
    done = subprocess.run([mcs, "-langversion:7", "-warnaserror", "-r:System.Net.Http.dll", f"-out:{exe}",
                           *map(str, SOURCES)], capture_output=True, text=True, timeout=RUN_SECONDS, check=False)
    assert done.returncode == 0, f"mcs failed:\n{done.stdout}{done.stderr}"
    return [mono, "--debug", str(exe)]  # --debug: line numbers in a failure's stack trace


def run_program(command: list[str], url: str, mode: str, token: str | None = None, handler: str = "",
                **more: str) -> str:
    """ConversationTest.exe URL MODE, with ``more`` added to its environment; its output, after checking it passed."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}, **more}
    if token is not None:
        env["PARLEY_TOKEN"] = token
    if handler:
        env["PARLEY_HANDLER"] = handler
    done = subprocess.run([*command, url, mode], env=env, capture_output=True, text=True, encoding="utf-8",
                          errors="replace", timeout=RUN_SECONDS, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"ConversationTest.exe {mode} exited {done.returncode}:\n{output[-12000:]}"
    assert "FAIL" not in output and output.rstrip().endswith("all passed"), output[-12000:]
    return output


# Mono 6.8's HttpClientHandler runs on SocketsHttpHandler; .NET Framework and older Monos on HttpWebRequest,
# which allows 2 connections per host unless told otherwise. The conversation runs on both.
HANDLERS = {"": "SocketsHttpHandler", "webrequest": "MonoWebRequestHandler"}


@pytest.mark.parametrize("handler", list(HANDLERS), ids=list(HANDLERS.values()))
def test_csharp_client_runs_a_scripted_conversation_with_a_tool_call_and_a_cancel(conversation_test: list[str],
                                                                                   handler: str) -> None:
    with parley_serve("--backend", "scripted", "--assets", str(examples_dir()), "--tool-timeout", TOOL_TIMEOUT,
                      token=TOKEN) as url:
        output = run_program(conversation_test, url, "scripted", TOKEN, handler)
    assert f"handler: {HANDLERS[handler]}\n" in output, output
    passed = re.findall(r"^ok (.+)$", output, re.MULTILINE)
    assert passed == list(SCRIPTED_CHECKS), output


@pytest.mark.parametrize("handler", list(HANDLERS), ids=list(HANDLERS.values()))
def test_csharp_client_resumes_a_turn_whose_stream_breaks_and_hands_a_lost_turn_line_back(
        conversation_test: list[str], handler: str) -> None:
    """The proxy cuts turn streams (after a whole event, and in the middle of one); the client resumes
    and gets every event once, as an unbroken turn gives them. A resume that reaches the other server,
    which never ran the turn, ends in turn_lost with the line handed back; cancelOnDisconnect does not resume."""
    args = ("--backend", "scripted", "--assets", str(examples_dir()))
    # the other server keeps its sessions apart (--store none), as a replica that never ran the turn
    with parley_serve(*args, token=TOKEN) as url, parley_serve(*args, "--store", "none", token=TOKEN) as other, \
            CuttingProxy(url, other) as proxy:
        output = run_program(conversation_test, proxy.url, "resume", TOKEN, handler, PARLEY_OTHER_URL=other,
                             PARLEY_SUFFIX=".cs")
    assert re.findall(r"^ok (.+)$", output, re.MULTILINE) == [
        "a broken stream resumed", "a turn lost with its server", "cancelOnDisconnect is not resumed"], output
    assert proxy.cuts == {"cut.tool_request.cs": 1, "half.tool_request.cs": 1, "lost.turn_started.cs": 1,
                          "cut.tool_request.cancel.cs": 1}, proxy.cuts
    assert proxy.resumes == {"cut.tool_request.cs": 1, "half.tool_request.cs": 1, "lost.turn_started.cs": 1}


@pytest.mark.parametrize("handler", list(HANDLERS), ids=list(HANDLERS.values()))
def test_csharp_client_tells_a_server_killed_mid_turn_from_one_that_never_started(conversation_test: list[str],
                                                                                 handler: str) -> None:
    """The server is killed (SIGKILL) while its turn waits for a tool result: Turn throws server_gone with
    the line once every resume try found no server; a closed port is unavailable."""
    with parley_serve_process("--backend", "scripted", "--assets", str(examples_dir()), "--store", "none",
                              token=TOKEN) as doomed, KillSwitch(doomed.process) as switch:
        output = run_program(conversation_test, doomed.url, "gone", TOKEN, handler, PARLEY_KILL_URL=switch.url,
                             PARLEY_CLOSED_URL=closed_url())
    assert re.findall(r"^ok (.+)$", output, re.MULTILINE) == [
        "a server killed mid-turn is server_gone", "a server never started is unavailable"], output
    assert switch.kills == 1 and doomed.process.returncode is not None


@pytest.mark.model
def test_csharp_client_runs_a_chat_turn_on_the_sample_model(conversation_test: list[str], sample_model: Path,
                                                           tmp_path: Path) -> None:
    example_on_sample_model("chat", sample_model, tmp_path, 24)
    with parley_serve("--backend", "embedded", "--assets", str(tmp_path)) as url:
        output = run_program(conversation_test, url, "model")
    assert re.findall(r"^ok (.+)$", output, re.MULTILINE) == ["model turn"], output
    reply = re.search(r"^reply: (.*)$", output, re.MULTILINE)
    assert reply and reply.group(1).strip(), output


@pytest.mark.parametrize("handler", list(HANDLERS), ids=list(HANDLERS.values()))
def test_csharp_client_stops_a_server_by_request_with_its_token(conversation_test: list[str], handler: str) -> None:
    """Shutdown() (a Windows game cannot send its child SIGTERM): refused without the token; with it the
    running turn ends cancelled, the answer is the limit, and the process exits."""
    with parley_serve_process("--backend", "scripted", "--assets", str(examples_dir()), "--store", "none",
                              token=TOKEN) as server:
        output = run_program(conversation_test, server.url, "shutdown", TOKEN, handler)
        server.process.wait(timeout=RUN_SECONDS)
    assert re.findall(r"^ok (.+)$", output, re.MULTILINE) == ["a shutdown by request"], output
    assert server.process.returncode == 0


@pytest.mark.parametrize("handler", list(HANDLERS), ids=list(HANDLERS.values()))
def test_csharp_client_runs_the_shared_protocol_set_over_httpclient(conversation_test: list[str], handler: str) -> None:
    """clients/protocol/conversation.json by the Unity test's driver, on the HttpClient transport."""
    with protocol_server("csharp") as url:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_") or k == "PARLEY_SERVE_STATE"}
        env.update(protocol_env(url, "csharp"))
        if handler:
            env["PARLEY_HANDLER"] = handler
        done = subprocess.run([*conversation_test, url, "protocol"], env=env, capture_output=True, text=True,
                              encoding="utf-8", errors="replace", timeout=RUN_SECONDS, check=False)
    assert done.returncode == 0, f"ConversationTest.exe protocol exited {done.returncode}:\n{done.stdout}{done.stderr}"
    check_protocol(done.stdout, "csharp")
