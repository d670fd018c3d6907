"""The protocol test set every client runs (clients/protocol/README.md): the server it runs against, the
environment its driver gets, and the check of what the driver printed against ``conversation.json``."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient
from tests.clients.cutting_proxy import CuttingProxy
from tests.servers import parley_serve

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "clients" / "protocol" / "conversation.json"
TOKEN = "protocol-test-token"
TOOL_TIMEOUT = "10"  # a tool nobody answers (the lost run's) ends its turn this soon
STEP = re.compile(r"^step (\d+) (\{.*\})\s*$", re.MULTILINE)


def named(value: Any, client: str) -> Any:
    """``value`` with ``{client}`` replaced by ``client`` in every string."""
    if isinstance(value, str):
        return value.replace("{client}", client)
    if isinstance(value, list):
        return [named(item, client) for item in value]
    if isinstance(value, dict):
        return {key: named(item, client) for key, item in value.items()}
    return value


def steps(client: str) -> list[dict[str, Any]]:
    """The script's steps with ``{client}`` replaced by the client's name."""
    return named(json.loads(SCRIPT.read_text(encoding="utf-8"))["steps"], client)


@contextlib.contextmanager
def protocol_server(client: str, *more: str, token: str = TOKEN) -> Iterator[str]:
    """The script's server for ``client`` (``more``: its further arguments): a scripted ``parley serve``
    behind the cutting proxy, whose resumes of a ``lost.`` session go to a second server that has the
    session but never ran the turn (a replica). Yields the proxy's URL."""
    args = ("--backend", "scripted", "--assets", str(examples_dir()), "--tool-timeout", TOOL_TIMEOUT, *more)
    with parley_serve(*args, token=token) as url, parley_serve(*args, "--store", "none", token=token) as other, \
            CuttingProxy(url, other) as proxy:
        with ParleyClient(other, token=token) as replica:
            for step in steps(client):
                if step["do"] == "create" and step["session"].startswith("lost."):
                    replica.create_session(step["asset"], id=step["session"])
        yield proxy.url


def protocol_env(url: str, client: str, token: str = TOKEN) -> dict[str, str]:
    """What a driver reads from its environment."""
    return {"PARLEY_URL": url, "PARLEY_TOKEN": token, "PARLEY_PROTOCOL": str(SCRIPT), "PARLEY_CLIENT": client}


def check_protocol(output: str, client: str) -> None:
    """Fails on the first step whose observation differs from the script's ``expect``, naming the step."""
    seen = {int(n): json.loads(text) for n, text in STEP.findall(output)}
    for n, step in enumerate(steps(client)):
        what = f"{client}: step {n} ({step['do']} {step.get('line') or step.get('asset') or step.get('session', '')!r})"
        assert n in seen, f"{what} printed nothing:\n{output[-6000:]}"
        assert seen[n] == step["expect"], f"{what}\n  saw      {seen[n]}\n  expected {step['expect']}"
    assert "protocol done" in output, f"{client}: the driver did not finish:\n{output[-6000:]}"
