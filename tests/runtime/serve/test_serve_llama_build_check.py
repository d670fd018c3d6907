"""`parley serve` on a llama.cpp build whose self-check crashed: the server stays up, its log says why
and what to do, and the game's turn fails with that message (runtime.backends.llama_build)."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from runtime.backends import llama_build
from runtime.models.folder import SAMPLE_MODEL
from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient, TurnFailed
from tests.runtime.backends.stand_in_probes import FAILED_CHECK, keep_failed_check

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[3]


def test_a_failed_self_check_is_in_the_servers_log_and_the_turns_error(sample_model, tmp_path):
    checks = tmp_path / "checks.json"
    keep_failed_check(checks, SAMPLE_MODEL.file_name)
    log = tmp_path / "serve.log"
    env = {**os.environ, llama_build.CHECKS_ENV: str(checks)}
    env.pop("PARLEY_SERVE_TOKEN", None)
    with open(log, "w", encoding="utf-8") as err:
        process = subprocess.Popen([sys.executable, "-m", "runtime", "serve", "--port", "0", "--assets",
                                    str(examples_dir())], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err,
                                   text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    try:
        url = None
        while url is None:
            found = re.search(r"listening on (http://\S+)", lines.get(timeout=120))
            url = found and found.group(1)
        with ParleyClient(url) as client:
            session = client.create_session("chat.json")
            with pytest.raises(TurnFailed) as failed:
                client.turn(session.id, "Hello there")
            assert FAILED_CHECK in str(failed.value)
            assert client.health().status == "ok", "the server is still up"
    finally:
        process.terminate()
        process.wait(timeout=30)
    text = log.read_text(encoding="utf-8")
    assert "ERROR" in text and FAILED_CHECK in text
