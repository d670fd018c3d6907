"""The Godot addon (clients/godot) in a real engine: its Godot 3 twin (clients/godot/godot3/addons/parley)
runs in Debian's headless ``godot3-server`` 3.2 against a real ``parley serve``: the shared protocol test
set (tags included), the addon's own checks (its SSE parser on split UTF-8 and CRLF, the token, a 204, a tool
answered from a signal, a stream cut mid-event and resumed, a closed port), and the sample NPC's
transcript. Godot 4 cannot run here: its addon (clients/godot/addons/parley) is only parsed, with
gdtoolkit 4.

``godot3-server`` comes from the package registry: when it is missing and we are root with apt-get, the
module installs it (about 10 s on Debian 12); otherwise it skips, saying why."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.resources import examples_dir
from tests.apt import INSTALL_SECONDS, apt_install
from tests.clients.console_picture import console_png
from tests.clients.kill_switch import closed_url
from tests.clients.protocol import check_protocol, protocol_env, protocol_server
from tests.servers import parley_serve

ROOT = Path(__file__).resolve().parents[2]
GODOT = ROOT / "clients" / "godot"
TWIN = GODOT / "godot3"
SCREENSHOT = ROOT / "docs" / "screenshot-godot-sample.png"  # the README's picture of the sample's output
PACKAGE = "godot3-server"
RUN_SECONDS = 120.0  # a deadline for the engine; the scripts' own waits fail sooner
CHECKS = ("event stream", "token required", "tool answered from a signal", "delete answers 204",
          "a stream cut mid-event resumed", "a closed port is unavailable")


@pytest.fixture(scope="module")
def godot() -> str:
    found = shutil.which(PACKAGE)
    if found is None:
        why = apt_install((PACKAGE,), PACKAGE)
        found = shutil.which(PACKAGE)
        if found is None:
            pytest.skip(why or f"apt-get installed {PACKAGE}, but it is not on PATH")
    return found


def godot_project(folder: Path, main: Path) -> Path:
    """A Godot 3 project: the addon in addons/parley as its autoload, the twin's tests and sample, and
    ``main`` (a scene, or a script the main scene runs; a path inside the twin)."""
    shutil.copytree(TWIN / "addons", folder / "addons")
    for part in ("tests", "sample"):
        shutil.copytree(TWIN / part, folder / part)
    scene = main.relative_to(TWIN).as_posix()
    if main.suffix == ".gd":
        (folder / "main.tscn").write_text(
            '[gd_scene load_steps=2 format=2]\n\n'
            f'[ext_resource path="res://{scene}" type="Script" id=1]\n\n'
            '[node name="Main" type="Node"]\nscript = ExtResource( 1 )\n', encoding="utf-8")
        scene = "main.tscn"
    (folder / "project.godot").write_text(
        f'config_version=4\n\n[application]\n\nconfig/name="parley-test"\nrun/main_scene="res://{scene}"\n\n'
        '[autoload]\n\nParley="*res://addons/parley/parley.gd"\n\n'
        '[debug]\n\nsettings/fps/force_fps=240\n', encoding="utf-8")
    return folder


def run_godot(godot: str, project: Path, **env: str) -> str:
    """The project's main scene in the headless engine; its output, after checking it exited 0."""
    home = project / "home"
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}, **env,
                   "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config"),
                   "XDG_CACHE_HOME": str(home / "cache"), "LANG": "C.UTF-8"}
    try:
        done = subprocess.run([godot, "--path", str(project)], env=environment, capture_output=True, text=True,
                              encoding="utf-8", errors="replace", timeout=RUN_SECONDS, check=False)
    except subprocess.TimeoutExpired as stuck:
        printed = [part.decode("utf-8", "replace") if isinstance(part, bytes) else part or ""
                   for part in (stuck.stdout, stuck.stderr)]
        pytest.fail(f"godot did not quit within {RUN_SECONDS:.0f} s:\n{''.join(printed)[-12000:]}")
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"godot exited {done.returncode}:\n{output[-12000:]}"
    assert "SCRIPT ERROR" not in output, output[-12000:]
    return done.stdout


def test_godot_addon_passes_the_protocol_test_set(godot: str, tmp_path: Path) -> None:
    project = godot_project(tmp_path, TWIN / "tests" / "protocol.gd")
    with protocol_server("godot") as url:
        output = run_godot(godot, project, **protocol_env(url, "godot"))
    check_protocol(output, "godot")


def test_godot_addon_checks(godot: str, tmp_path: Path) -> None:
    """The addon's own checks (tests/checks.gd), behind the cutting proxy that breaks a stream mid-event."""
    project = godot_project(tmp_path, TWIN / "tests" / "checks.gd")
    with protocol_server("godot") as url:
        env = protocol_env(url, "godot")
        output = run_godot(godot, project, **env, PARLEY_CLOSED_URL=closed_url())
    assert re.findall(r"^ok (.+)$", output, re.MULTILINE) == list(CHECKS), output
    assert output.rstrip().endswith("all passed"), output


def test_godot_sample_npc_talks_shows_only_reply_subtitles_answers_a_tool_and_cancels(godot: str,
                                                                                        tmp_path: Path) -> None:
    project = godot_project(tmp_path, TWIN / "sample" / "npc.tscn")
    with parley_serve("--backend", "scripted", "--assets", str(examples_dir()), "--store", "none") as url:
        output = run_godot(godot, project, PARLEY_URL=url)
    transcript = [line for line in output.splitlines() if line.startswith(("Player:", "Quartermaster:", "["))]
    assert transcript == [
        "Player: How many arrows are there?",
        "[the game looks up check_stock: 240 arrows]",
        "Quartermaster: quartermaster/reply heard: 240 arrows",
        "Player: And the bolts?",
        "[the player walks away: cancelled]",
    ], output
    console_png(transcript, "clients/godot/godot3/sample/npc.tscn in the headless Godot 3.2 (godot3-server), on parley "
                "serve --backend scripted", SCREENSHOT)


def test_godot4_addon_parses(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Godot 4 cannot run here: its addon is parsed with gdtoolkit 4 (installed into a temp folder)."""
    target = tmp_path_factory.mktemp("gdtoolkit")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target),
                           "gdtoolkit==4.*"], capture_output=True, text=True, timeout=INSTALL_SECONDS, check=False)
    if done.returncode != 0:
        pytest.skip(f"pip could not install gdtoolkit 4: {(done.stdout + done.stderr)[-1000:]}")
    scripts = sorted(GODOT.glob("addons/parley/*.gd")) + sorted(GODOT.glob("sample/*.gd"))
    assert len(scripts) >= 3, scripts
    env = {**os.environ, "PYTHONPATH": str(target)}
    for script in scripts:
        parsed = subprocess.run([sys.executable, "-m", "gdtoolkit.parser", str(script)], env=env,
                                capture_output=True, text=True, timeout=RUN_SECONDS, check=False)
        assert parsed.returncode == 0, f"{script.relative_to(ROOT)}:\n{parsed.stdout}{parsed.stderr}"
