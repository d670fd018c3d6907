"""The llama.cpp build on this host: the AMX guard, and the self-check in a child process that a
decode of several tokens survives (runtime.backends.llama_build)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import llama_cpp
import pytest

from runtime.backends import llama_build
from runtime.backends.llama import LlamaBackend
from runtime.backends.llama_build import (
    PORTABLE_INSTALL,
    checked_extra_buffers,
    cpu_flags,
    extra_buffer_types,
    use_extra_buffers,
)
from runtime.problems import BackendError
from tests.runtime.backends import stand_in_probes

LIB = Path(llama_cpp.__file__).parent / "lib"


@pytest.fixture()
def checks(tmp_path, monkeypatch) -> Path:
    """A checks file of the test's own, and nothing this process decided before."""
    file = tmp_path / "checks.json"
    monkeypatch.setenv(llama_build.CHECKS_ENV, str(file))
    monkeypatch.delenv(llama_build.EXTRA_BUFFERS_ENV, raising=False)
    llama_build.forget_decisions()
    yield file
    llama_build.forget_decisions()


def kept(file: Path) -> list[dict]:
    return list(json.loads(file.read_text())["checks"].values())


# --- the guard ----------------------------------------------------------------------------------


def test_the_guard_keeps_weights_out_of_an_amx_buffer(monkeypatch):
    monkeypatch.delenv(llama_build.EXTRA_BUFFERS_ENV, raising=False)
    assert use_extra_buffers(["AMX", "CPU_REPACK"], set(), []) is False
    assert use_extra_buffers(["CPU_REPACK"], {"avx512f"}, ["AVX512"]) is True
    # A CPU that lists AMX with a build that has AMX code, even where the registry did not say so
    assert use_extra_buffers([], {"amx_tile", "avx512f"}, ["AVX512", "AMX_INT8"]) is False
    assert use_extra_buffers([], {"amx_tile"}, ["AVX2"]) is True  # a portable build on an AMX CPU
    monkeypatch.setenv(llama_build.EXTRA_BUFFERS_ENV, "on")
    assert use_extra_buffers(["AMX"], {"amx_tile"}, ["AMX_INT8"]) is True
    monkeypatch.setenv(llama_build.EXTRA_BUFFERS_ENV, "off")
    assert use_extra_buffers(["CPU_REPACK"], set(), []) is False


def _has_amx_tile_code(library: Path) -> bool:
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True,
                          check=True).stdout
    return "ldtilecfg" in dump


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump (binutils)")
def test_the_installed_llama_cpp_has_no_amx_tile_code_unless_the_guard_is_on(monkeypatch):
    """On a CPU that lists AMX, a build with AMX tile instructions must load without the extra buffers."""
    monkeypatch.delenv(llama_build.EXTRA_BUFFERS_ENV, raising=False)
    library = next(LIB.glob("libggml-cpu.so*"), None) or next(LIB.glob("*ggml-cpu*"))
    amx_code = _has_amx_tile_code(library)
    if amx_code and "amx_tile" in cpu_flags():
        assert use_extra_buffers() is False
    if "AMX" in extra_buffer_types():
        assert amx_code and use_extra_buffers() is False


@pytest.mark.model
def test_the_loader_loads_without_extra_buffers_where_the_cpu_offers_amx(sample_model, checks, monkeypatch):
    monkeypatch.setattr(llama_build, "extra_buffer_types", lambda: ["AMX", "CPU_REPACK"])
    seen = []
    real = llama_build.model_params

    def recording(extra_buffers: bool):
        params = real(extra_buffers)
        seen.append(params.use_extra_bufts)
        return params

    monkeypatch.setattr("runtime.backends.llama.model_params", recording)
    backend = LlamaBackend()
    try:
        backend.load_model(str(sample_model))
        assert seen == [False]
        assert backend._models[sample_model].extra_buffers is False
        assert backend.count_tokens(str(sample_model), "Hello there") > 0
    finally:
        backend.close()
    assert kept(checks)[0]["extra_buffers"] is False


# --- the self-check -----------------------------------------------------------------------------


@pytest.mark.model
def test_the_self_check_decodes_the_sample_model_once_per_build_and_host(sample_model, checks, monkeypatch):
    assert checked_extra_buffers(sample_model, 2) == use_extra_buffers()
    [result] = kept(checks)
    assert result["ok"] and result["model"] == sample_model.name
    # Later processes read the kept result: the check does not run again
    llama_build.forget_decisions()

    def must_not_run(*args):
        raise AssertionError("the self-check ran again although its result was kept")

    monkeypatch.setattr(llama_build, "_run_in_child", must_not_run)
    assert checked_extra_buffers(sample_model, 2) == use_extra_buffers()
    # A new build (a reinstall changes its libraries) is checked again
    monkeypatch.setattr(llama_build, "build_key", lambda: "another-build")
    with pytest.raises(AssertionError, match="ran again"):
        checked_extra_buffers(sample_model, 2)


def test_a_build_that_crashes_decoding_is_a_message_naming_the_cause_and_the_fix(sample_model, checks, caplog):
    with caplog.at_level(logging.ERROR, logger=llama_build.__name__), pytest.raises(BackendError) as raised:
        checked_extra_buffers(sample_model, 2, stand_in_probes.crashes_decoding)
    message = str(raised.value)
    assert "crashed (SIGSEGV, Segmentation fault)" in message
    assert f"decoding {llama_build.PROBE_TOKENS} tokens of {sample_model.name}" in message
    assert "nothing was lost" in message and PORTABLE_INSTALL in message
    assert message in caplog.text  # the log (parley serve's) says it too
    [result] = kept(checks)
    assert result["ok"] is False and result["message"] == message
    # Kept: later loads say it at once, without crashing a child again
    llama_build.forget_decisions()
    with pytest.raises(BackendError, match="Reinstall a portable build"):
        checked_extra_buffers(sample_model, 2, stand_in_probes.hangs)


def test_a_failed_check_stops_the_backend_before_it_loads_the_model(sample_model, checks):
    stand_in_probes.keep_failed_check(checks, sample_model.name)
    backend = LlamaBackend()
    try:
        with pytest.raises(BackendError, match="Reinstall a portable build"):
            backend.load_model(str(sample_model))
        assert backend.loaded_models() == []
    finally:
        backend.close()


@pytest.mark.model
def test_a_build_that_crashes_only_with_extra_buffers_loads_without_them(sample_model, checks, caplog,
                                                                          monkeypatch):
    monkeypatch.setenv(llama_build.EXTRA_BUFFERS_ENV, "on")
    with caplog.at_level(logging.WARNING, logger=llama_build.__name__):
        assert checked_extra_buffers(sample_model, 2, stand_in_probes.crashes_with_extra_buffers) is False
    assert "decodes with them off" in caplog.text
    [result] = kept(checks)
    assert result["ok"] is True and result["extra_buffers"] is False


def test_a_crash_loading_the_file_names_the_file_and_is_not_kept_against_the_build(sample_model, checks):
    with pytest.raises(BackendError, match=r"crashed \(SIGSEGV.*loading this model.*download it again"):
        checked_extra_buffers(sample_model, 2, stand_in_probes.crashes_loading)
    assert not checks.exists()


def test_a_check_that_hangs_is_stopped_and_said(sample_model, checks, monkeypatch):
    monkeypatch.setattr(llama_build, "check_seconds", lambda model: 3.0)
    with pytest.raises(BackendError, match=r"did not finish .* in 3 s"):
        checked_extra_buffers(sample_model, 2, stand_in_probes.hangs)
    assert not checks.exists()  # a busy machine may pass next time


# --- where a user hears it ------------------------------------------------------------------------


@pytest.mark.model
def test_parley_chat_says_the_failed_check(sample_model, checks, tmp_path):
    """`parley chat` on a build whose check crashed: the message and a non-zero exit, never a silent death."""
    stand_in_probes.keep_failed_check(checks, sample_model.name)
    script = tmp_path / "lines.txt"
    script.write_text("Hello there\n")
    asset = Path(__file__).resolve().parents[3] / "resources" / "examples" / "chat.json"
    done = subprocess.run([sys.executable, "-m", "runtime", "chat", str(asset), "--script", str(script)],
                          check=False, capture_output=True, text=True, timeout=300,
                          env={**_env(), llama_build.CHECKS_ENV: str(checks)})
    assert done.returncode not in (0, -11, 139)
    assert "crashed (SIGSEGV, Segmentation fault)" in done.stderr + done.stdout
    assert "Reinstall a portable build" in done.stderr + done.stdout


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != llama_build.EXTRA_BUFFERS_ENV}
