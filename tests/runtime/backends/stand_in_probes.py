"""Stand-ins for llama.cpp's self-check probe (runtime.backends.llama_build.probe), run in its child
process: each crashes, hangs or decodes the way a broken build would. They live in a module of their
own because the child imports them by name."""

from __future__ import annotations

import ctypes
import json
import threading
from pathlib import Path
from typing import Any

from runtime.backends import llama_build
from runtime.backends.llama_build import probe


def crash() -> None:
    ctypes.string_at(0)  # a real SIGSEGV, as llama.cpp's AMX kernel gives


def crashes_decoding(model_path: str, extra_buffers: bool, n_threads: int, report: Any) -> None:
    report.send(("loaded", ""))
    crash()


def crashes_with_extra_buffers(model_path: str, extra_buffers: bool, n_threads: int, report: Any) -> None:
    if extra_buffers:
        report.send(("loaded", ""))
        crash()
    probe(model_path, extra_buffers, n_threads, report)  # the real decode, without them


def crashes_loading(model_path: str, extra_buffers: bool, n_threads: int, report: Any) -> None:
    crash()


def hangs(model_path: str, extra_buffers: bool, n_threads: int, report: Any) -> None:
    report.send(("loaded", ""))
    threading.Event().wait()




FAILED_CHECK = ("llama.cpp crashed (SIGSEGV, Segmentation fault) decoding 16 tokens of the model in a self-check "
                "run in a child process, so nothing was lost. Reinstall a portable build: ...")


def keep_failed_check(file: Path, model_name: str) -> None:
    """Write ``file`` as the checks file of a build that crashed its self-check on this host."""
    key = f"{llama_build.build_key()}/{llama_build.host_key()}/{llama_build.use_extra_buffers()}"
    file.write_text(json.dumps({"version": 1, "checks": {key: {
        "ok": False, "extra_buffers": True, "message": FAILED_CHECK, "model": model_name, "checked_at": 0.0}}}))
