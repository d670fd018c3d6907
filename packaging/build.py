"""Build the desktop app, or parley serve on its own for games, as a folder that needs no Python.

``python packaging/build.py`` -> ``dist/parley-studio/`` (the editor), ``python packaging/build.py
serve`` -> ``dist/parley-serve/`` (``parley serve``, no Qt).

Runs PyInstaller on the target's spec (``packaging/parley-studio.spec``, ``parley-serve.spec``)
for the platform it runs on, after checking that the installed llama.cpp was built without
instructions only some CPUs have (an app built on this machine must start on the designers' and
the players' machines too), then prints the folder's size. A llama.cpp with AMX code is refused
outright: on some hosts that list AMX it crashes on the first decode of several tokens (llama.cpp
issue #20824). Other machine-specific instructions (AVX-512) are a warning, or an error with
``--require-portable``. ``--clean`` throws away PyInstaller's cache in
``build/pyinstaller`` first; without it, a rebuild reuses what has not changed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
WORK = ROOT / "build" / "pyinstaller"
# What can be built, and the name of its spec (packaging/NAME.spec), folder and executable.
TARGETS = {"studio": "parley-studio", "serve": "parley-serve"}

# Instruction sets llama.cpp's default portable build (GGML_NATIVE=OFF) does not use on x86-64;
# finding one in llama_print_system_info() means the library was built for the build machine.
MACHINE_SPECIFIC = ("AVX512", "AVX_VNNI", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8", "AMX_BF16", "AMX_TILE")

PORTABLE_BUILD = 'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --no-cache-dir --force-reinstall llama-cpp-python==0.3.36'
AMX_TILE_INSTRUCTION = "ldtilecfg"  # what llama.cpp's AMX kernels start with; a portable build has none


def spec(target: str = "studio") -> Path:
    return ROOT / "packaging" / f"{TARGETS[target]}.spec"


def app_dir(target: str = "studio") -> Path:
    return DIST / TARGETS[target]


def executable(target: str = "studio") -> Path:
    return app_dir(target) / (TARGETS[target] + (".exe" if sys.platform == "win32" else ""))


def machine_specific_instructions(system_info: str | None = None) -> list[str]:
    """The CPU features compiled into llama.cpp (its ``llama_print_system_info()`` line, by
    default the installed one's) that a portable build leaves out."""
    if system_info is None:
        import llama_cpp

        system_info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    enabled = {name for name, value in re.findall(r"([A-Z0-9_]+)\s*=\s*(\d+)", system_info) if value != "0"}
    return sorted(enabled.intersection(MACHINE_SPECIFIC))


def cpu_library() -> Path | None:
    """The installed llama.cpp's CPU backend library (``libggml-cpu``), where its AMX code would be."""
    import llama_cpp

    folder = Path(llama_cpp.__file__).parent / "lib"
    return next(iter(sorted(folder.glob("*ggml-cpu*"))), None)


def has_amx_tile_code(library: Path | None, system_info: str | None = None) -> bool:
    """Whether llama.cpp was built with AMX code: its system info lists AMX, or (where objdump is
    installed) the CPU library holds AMX tile instructions."""
    if any(name.startswith("AMX") for name in machine_specific_instructions(system_info)):
        return True
    if library is None or shutil.which("objdump") is None:
        return False
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True,
                          check=False).stdout
    return AMX_TILE_INSTRUCTION in dump


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def largest_parts(folder: Path, count: int = 8) -> list[tuple[int, str]]:
    """The biggest files and package folders in the app, to see what the size is made of."""
    internal = folder / "_internal"
    parts = []
    for child in internal.iterdir() if internal.is_dir() else folder.iterdir():
        if child.is_symlink():
            continue
        size = folder_size(child) if child.is_dir() else child.stat().st_size
        parts.append((size, child.name + ("/" if child.is_dir() else "")))
    return sorted(parts, reverse=True)[:count]


def build(clean: bool = False, require_portable: bool = False, target: str = "studio") -> Path:
    """Run PyInstaller on ``target``'s spec; return the app folder. Raises SystemExit with the reason
    on failure."""
    if has_amx_tile_code(cpu_library()):
        raise SystemExit(
            "error: the installed llama-cpp-python has AMX code, which crashes on the first decode of several "
            "tokens on some machines whose CPU lists AMX (llama.cpp issue #20824): an app built from it would "
            f"lose its designers' work there. Reinstall a portable build first:\n    {PORTABLE_BUILD}")
    specific = machine_specific_instructions()
    if specific:
        message = (
            f"the installed llama-cpp-python uses {', '.join(specific)}, which not every CPU has: the app may "
            f"crash with 'illegal instruction' on other machines. For a build to give away, reinstall it with\n"
            f"    {PORTABLE_BUILD}"
        )
        if require_portable:
            raise SystemExit(f"error: {message}")
        print(f"warning: {message}", file=sys.stderr)
    command = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
               "--distpath", str(DIST), "--workpath", str(WORK), str(spec(target))]
    if clean:
        command.insert(3, "--clean")
    env = dict(os.environ, QT_PREFERRED_BINDING="PySide6")
    started = time.perf_counter()
    print("running:", " ".join(command), flush=True)
    if subprocess.run(command, cwd=ROOT, env=env, check=False).returncode != 0:
        raise SystemExit("error: PyInstaller failed (its messages are above)")
    if not executable(target).is_file():
        raise SystemExit(f"error: PyInstaller finished but {executable(target)} is missing")
    seconds = time.perf_counter() - started
    size = folder_size(app_dir(target))
    print(f"built {app_dir(target)} in {seconds:.0f} s: {size / 1e6:.0f} MB")
    for part_size, name in largest_parts(app_dir(target)):
        print(f"  {part_size / 1e6:7.1f} MB  {name}")
    return app_dir(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", choices=sorted(TARGETS), default="studio",
                        help="studio: the desktop app (the default); serve: parley serve alone, for games")
    parser.add_argument("--clean", action="store_true", help="rebuild from scratch (drop PyInstaller's cache)")
    parser.add_argument("--require-portable", action="store_true",
                        help="fail instead of warning when llama.cpp was built for this machine's CPU only")
    args = parser.parse_args(argv)
    if shutil.which("objdump") is None and sys.platform.startswith("linux"):
        # PyInstaller reads binaries' dependencies with ldd/objdump on Linux.
        print("warning: objdump not found (binutils); PyInstaller may miss shared-library dependencies",
              file=sys.stderr)
    build(clean=args.clean, require_portable=args.require_portable, target=args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
