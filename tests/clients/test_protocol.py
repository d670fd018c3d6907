"""The protocol test set (clients/protocol/README.md) run by the Python client, the JS client in Node
and in a real browser (headless Chromium, on another origin), and the C# client on Mono, each against
the same scripted server behind the cutting proxy. The Unity package and the Godot addon run it in
their own modules (test_unity_package.py, test_godot_addon.py); the last test here checks that all
six do, so no client drops out of the set unnoticed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clients.protocol import ROOT, SCRIPT, check_protocol, protocol_env, protocol_server, steps

CLIENTS = ("python", "csharp", "unity", "js", "browser", "godot")
DEADLINE = 300.0  # seconds for a driver's whole run; its own waits fail sooner (20 s each)


def run_driver(command: list[str], env: dict[str, str], cwd: Path = ROOT) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_") or k == "PARLEY_SERVE_STATE"}
    done = subprocess.run(command, cwd=cwd, env={**base, **env}, capture_output=True, text=True, encoding="utf-8",
                          errors="replace", timeout=DEADLINE, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{command[0]} exited {done.returncode}:\n{output[-8000:]}"
    return done.stdout


def test_the_python_client_runs_the_protocol_set() -> None:
    with protocol_server("python") as url:
        output = run_driver([sys.executable, "-m", "tests.clients.protocol_python"], protocol_env(url, "python"))
    check_protocol(output, "python")


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_js_client_runs_the_protocol_set_in_node() -> None:
    with protocol_server("js") as url:
        output = run_driver([str(shutil.which("node")), "clients/js/protocol/node.mjs"], protocol_env(url, "js"))
    check_protocol(output, "js")


def test_a_driver_that_drifts_fails_on_the_step_where_it_drifted() -> None:
    """The check itself can fail: one changed field, a missing step, or no closing line."""
    right = [f"step {n} {json.dumps(step['expect'])}" for n, step in enumerate(steps("x"))]
    check_protocol("\n".join([*right, "protocol done"]), "x")
    say = next(n for n, step in enumerate(steps("x")) if step["do"] == "say")
    drifted = json.loads(right[say].split(" ", 2)[2]) | {"shown": '{"name": "check_stock"} ...'}
    wrong = [*right[:say], f"step {say} {json.dumps(drifted)}", *right[say + 1:], "protocol done"]
    with pytest.raises(AssertionError, match=rf"x: step {say} \(say"):
        check_protocol("\n".join(wrong), "x")
    with pytest.raises(AssertionError, match="printed nothing"):
        check_protocol("\n".join([*right[:-1], "protocol done"]), "x")
    with pytest.raises(AssertionError, match="did not finish"):
        check_protocol("\n".join(right), "x")


def test_every_client_runs_the_protocol_set() -> None:
    """Each client's name is run through check_protocol by some test: dropping a client from the set fails here."""
    runs: set[str] = set()
    for module in (ROOT / "tests" / "clients").glob("test_*.py"):
        text = module.read_text(encoding="utf-8")
        runs |= set(re.findall(r'check_protocol\([^)]*"(\w+)"\)', text))
        runs |= set(re.findall(r'protocol_server\("(\w+)"', text))
    assert runs >= set(CLIENTS), f"no protocol run for {sorted(set(CLIENTS) - runs)}"
    assert json.loads(SCRIPT.read_text(encoding="utf-8"))["steps"], "the script has no steps"
