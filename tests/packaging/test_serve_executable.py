"""The frozen ``parley-serve`` (packaging/parley-serve.spec): built (or a build newer than the sources
reused), copied away from the checkout and run as a game runs it, with no Python on the machine's
PATH, to serve a turn of a shipped example on the sample model."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient
from tests.packaging.builds import built
from tests.packaging.frozen_serve import bare_env, copy_of, frozen_server

TURN_SECONDS = 300.0  # the first turn loads the model and runs llama.cpp's self-check: a busy 2-core machine
ARGUMENTS_SECONDS = 60.0


@pytest.fixture(scope="module")
def serve_exe() -> Path:
    """The frozen executable, rebuilt only when a source file changed since the last build."""
    return built("serve")


@pytest.fixture
def copied(serve_exe: Path, tmp_path: Path) -> Path:
    """The built folder copied to a clean folder of its own: nothing next to it but what it carries."""
    return copy_of(serve_exe, tmp_path / "shipped")


@pytest.mark.slow
def test_the_executable_serves_a_turn_on_the_sample_model_without_python(copied: Path, models_folder: Path,
                                                                         tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    shutil.copy2(examples_dir() / "chat.json", agents)  # as shipped: its model named, found in the models folder
    checks = tmp_path / "llama-checks.json"
    env = bare_env(tmp_path, PARLEY_MODELS_DIR=str(models_folder), PARLEY_SERVE_STATE=str(tmp_path / "state"),
                   PARLEY_LLAMA_CHECKS=str(checks))
    with frozen_server(copied, ["--port", "0", "--assets", str(agents), "--store", "none"], env) as server:
        url = server.wait_for_address()
        with ParleyClient(url, timeout=TURN_SECONDS) as client:
            assert client.health().backend.startswith("embedded")
            npc = client.create_session("chat.json", id="innkeeper")
            outcome = client.turn(npc.id, "Good evening. Is there a room for the night?")
        assert outcome.reply.strip(), server.output()
        assert outcome.events[0].kind == "turn_started" and outcome.events[-1].kind == "turn_finished"
        assert any(e.kind == "token" for e in outcome.events)  # streamed as it was generated
        assert outcome.record.path == ["reply"] and outcome.record.index == 0
        exit_code = server.stop()
    if sys.platform != "win32":
        assert exit_code == 128 + signal.SIGTERM, server.output()  # ended through its shutdown, not killed
    assert "Traceback" not in server.output(), server.output()
    # llama.cpp's self-check ran in a child process that was the frozen executable itself
    [check] = json.loads(checks.read_text())["checks"].values()
    assert check["ok"] and check["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf", check


@pytest.mark.slow
@pytest.mark.parametrize(("args", "says"), [
    (["--port", "eighty"], "parley-serve: error: argument --port: invalid int value: 'eighty'"),
    (["--port", "0"], "parley serve: give at least one --assets folder"),
    (["--port", "0", "--assets", "no-such-folder"], "parley serve: --assets no-such-folder: not a folder"),
], ids=["port-not-a-number", "no-assets", "assets-not-a-folder"])
def test_bad_arguments_are_refused_with_the_reason_and_exit_2(copied: Path, tmp_path: Path, args: list[str],
                                                              says: str) -> None:
    run = subprocess.run([str(copied), *args], cwd=tmp_path, env=bare_env(tmp_path), capture_output=True, text=True,
                         timeout=ARGUMENTS_SECONDS, check=False)
    assert run.returncode == 2, run.stdout + run.stderr
    assert says in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert run.stdout == ""


def bundled_modules(executable: Path) -> list[str]:
    """The Python modules in the executable's archive (PyInstaller keeps them in the executable)."""
    from PyInstaller.archive.readers import CArchiveReader

    return list(CArchiveReader(str(executable)).open_embedded_archive("PYZ.pyz").toc)


@pytest.mark.slow
def test_the_executable_leaves_out_what_a_server_does_not_need(serve_exe: Path) -> None:
    files = [p.relative_to(serve_exe.parent).as_posix() for p in serve_exe.parent.rglob("*")]
    unwanted = ["PySide6", "shiboken6", "Qt6", "NodeGraphQt", "tkinter", "scipy/", "matplotlib", "statsmodels",
                "httpx", "pytest", "cryptography", "mtmd", "trio", "setuptools", "libreadline"]
    found = sorted({u for u in unwanted for n in files if u in n})
    assert not found, f"parley-serve bundles files a server does not use: {found}"
    modules = bundled_modules(serve_exe)
    assert "runtime.serve.server" in modules and "uvicorn.loops.asyncio" in modules
    unwanted_modules = ("editor", "PySide6", "NodeGraphQt", "Qt", "scipy", "runtime.suites", "runtime.cli.test")
    found = sorted(m for m in modules for u in unwanted_modules if m == u or m.startswith(u + "."))
    assert not found, f"parley-serve bundles modules a server does not use: {found[:20]}"
    internal = serve_exe.parent / "_internal"
    assert (internal / "resources" / "prompts").is_dir()
    assert any((internal / "llama_cpp" / "lib").glob("*llama*"))
