"""A ``parley serve`` announces its address while it serves, so a server started with ``--port 0`` is
found on this computer (the editor's Attach dialog lists them); a killed server's file is dropped."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from runtime.resources import examples_dir
from runtime.serve.running import announce, reachable_url, running_folder, running_servers
from tests.servers import parley_serve_process


def test_a_server_on_port_0_is_found_while_it_runs_and_gone_after():
    with parley_serve_process("--backend", "scripted", "--assets", str(examples_dir())) as server:
        assert not server.url.endswith(":8765")
        found = running_servers()
        assert [s.url for s in found] == [server.url], "found with the port it took"
        (one,) = found
        assert one.pid == server.process.pid and one.assets == (str(examples_dir()),) and not one.wants_token
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=30)
    assert running_servers() == [] and not list(running_folder().glob("*.json")), "it withdrew as it stopped"


def test_a_killed_servers_file_is_not_listed_and_is_removed(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    left = tmp_path / f"{gone.pid}.json"
    left.write_text(json.dumps({"url": "http://127.0.0.1:40001", "pid": gone.pid, "started": 1.0}), encoding="utf-8")
    (tmp_path / "junk.json").write_text("{not json", encoding="utf-8")
    mine = announce("http://0.0.0.0:40002", ["/games/assets"], True, folder=tmp_path)
    assert mine is not None
    found = running_servers(tmp_path)
    assert [(s.url, s.wants_token) for s in found] == [("http://127.0.0.1:40002", True)]
    assert not left.exists(), "a dead server's announcement is cleaned up"


def test_a_server_on_every_address_is_reached_on_loopback():
    assert reachable_url("http://0.0.0.0:8123") == "http://127.0.0.1:8123"
    assert reachable_url("http://[::]:8123") == "http://[::1]:8123"
    assert reachable_url("http://10.0.0.5:8123") == "http://10.0.0.5:8123"
