"""What both PyInstaller specs (parley-studio.spec, parley-serve.spec) do the same way: which of
llama.cpp's libraries to bundle, Python's own libraries without their debug symbols, no system
library that nothing bundled loads, and the installed packages neither app uses.

A spec imports this module from the folder it sits in (``sys.path.insert(0, SPECPATH)``); it
runs inside PyInstaller, never in the apps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

# The libraries llama_cpp opens with ctypes (llama_cpp.py: "llama", _ggml.py: "ggml"); the rest
# are their link-time dependencies. libmtmd/libllava serve only the multimodal chat handlers,
# which llama_cpp imports lazily and the runtime never uses.
OPENED_BY_LLAMA_CPP = ("llama", "ggml")
MULTIMODAL_ONLY = ("mtmd", "llava")

# Installed, and imported by something either app bundles, but only inside functions neither app
# calls: requests (gguf's and llama_cpp's URL helpers, with urllib3, cryptography and
# charset_normalizer), rich (pydantic's debug printing), tqdm (gguf's writer), numpy's Fortran
# tools; llama_cpp.server (its own FastAPI server); the test tools; and the standard library's
# GUI and documentation tools.
UNUSED_BY_EITHER_APP = [
    "tkinter", "_tkinter", "IPython", "pandas", "PIL",
    "requests", "urllib3", "cryptography", "charset_normalizer", "rich", "pygments", "markdown_it", "tqdm",
    "numpy.f2py",
    "llama_cpp.server",
    # the openai package (the tests' client of the OpenAI-compatible door), which llama_cpp.llama imports
    # in a method never called here (create_chat_completion_openai_v1), with its HTTP stack
    "openai", "httpx2", "httpcore2",
    "pytest", "_pytest", "pytestqt", "hypothesis", "importlinter", "grimp",
    "unittest", "pydoc", "doctest", "lib2to3",
]


def llama_libraries() -> list[tuple[str, str]]:
    """llama_cpp/lib's shared libraries that the runtime loads, each once.

    pip installs every Linux library three times (libllama.so, .so.0 and .so.0.5.0 as
    separate files, not links). llama_cpp opens ``libllama.so`` and ``libggml.so`` by path,
    and those find the others by SONAME (``libggml-cpu.so.0`` ...) through RUNPATH $ORIGIN,
    so those names are all that is needed; the other copies would add ~8 MB.
    """
    from PyInstaller.utils.hooks import collect_dynamic_libs

    found = [(src, dest) for src, dest in collect_dynamic_libs("llama_cpp")
             if not any(name in Path(src).name for name in MULTIMODAL_ONLY)]
    if not found:
        raise SystemExit("llama_cpp has no shared libraries in llama_cpp/lib: is llama-cpp-python installed?")
    if not sys.platform.startswith("linux"):
        return found
    from PyInstaller.depend.bindepend import get_imports

    opened = [(src, dest) for src, dest in found if Path(src).name in {f"lib{n}.so" for n in OPENED_BY_LLAMA_CPP}]
    needed = {Path(name).name for src, _dest in opened for name, _path in get_imports(src)}
    return opened + [(src, dest) for src, dest in found if Path(src).name in needed]


def windows_openmp_runtime(libraries: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """vcomp140.dll, when ggml-cpu.dll needs it (MSVC builds use OpenMP from the Visual C++ runtime).

    It is not part of Windows and PyInstaller does not bundle DLLs from the Windows folder, so a
    machine without the VC++ redistributable could not load ggml-cpu.dll. It goes beside the
    llama.cpp DLLs (llama_cpp puts that folder on the DLL search path).
    """
    from PyInstaller.depend.bindepend import get_imports

    imported = {Path(name).name.lower() for src, _dest in libraries for name, _path in get_imports(src)}
    if "vcomp140.dll" not in imported:
        return []  # built without OpenMP, or with a compiler that links its own
    folders = [Path(sys.base_prefix), Path(os.environ.get("SystemRoot", r"C:\Windows")) / "System32"]
    folders += [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    for folder in folders:
        dll = folder / "vcomp140.dll"
        if dll.is_file():
            return [(str(dll), "llama_cpp/lib")]
    raise SystemExit(
        "vcomp140.dll (the Visual C++ OpenMP runtime that ggml-cpu.dll needs) was not found; "
        "install the Visual C++ 2015-2022 redistributable, or build llama-cpp-python with -DGGML_OPENMP=OFF"
    )


def llama_binaries_and_datas() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """What an app that runs llama.cpp bundles of it on this platform: its libraries (and the
    OpenMP runtime on Windows) as binaries, its Metal shaders (macOS) as data."""
    from PyInstaller.utils.hooks import collect_data_files

    binaries = llama_libraries()
    datas: list[tuple[str, str]] = []
    if sys.platform == "win32":
        binaries += windows_openmp_runtime(binaries)
    if sys.platform == "darwin":
        # Metal: ggml-metal compiles its shaders from ggml-metal.metal, or loads default.metallib,
        # from the library's own folder unless the build embedded them (GGML_METAL_EMBED_LIBRARY).
        datas += collect_data_files("llama_cpp", includes=["**/*.metal", "**/*.metallib"])
    return binaries, datas


def without_unreachable_libraries(binaries: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Drop the system libraries that only removed files needed (Linux).

    PyInstaller puts every dependency it found next to the executable; once, say, the GTK theme
    plugin is gone, cairo, pango and the rest of its stack are loaded by nothing. What
    remains is every library something we keep links to (ldd lists the whole closure).
    """
    if not sys.platform.startswith("linux"):
        return binaries
    from PyInstaller.depend.bindepend import get_imports

    def top_level_library(entry: tuple[str, str, str]) -> bool:
        dest, _src, typecode = entry
        return "/" not in dest and typecode != "EXTENSION" and not dest.startswith("libpython")

    needed: set[str] = set()
    for entry in binaries:
        if not top_level_library(entry) and entry[2] != "SYMLINK":
            needed |= {Path(name).name for name, _path in get_imports(entry[1])}
    return [entry for entry in binaries if not top_level_library(entry) or entry[0] in needed]


def with_python_stripped(binaries: list[tuple[str, str, str]], folder: Path) -> list[tuple[str, str, str]]:
    """Python's own libraries without debug symbols (Linux), stripped copies kept in ``folder``
    (the spec's work folder): a pyenv-built libpython is 23 MB with them and 6 MB without, its
    lib-dynload 12 MB against 5 MB.

    Not PyInstaller's strip=True: it strips every library, and that breaks the ones auditwheel
    repaired (numpy's OpenBLAS: "ELF load command address/offset not page-aligned").
    """
    if not sys.platform.startswith("linux") or shutil.which("strip") is None:
        return binaries
    result = []
    for dest, src, typecode in binaries:
        if typecode != "SYMLINK" and (dest.startswith("libpython") or "/lib-dynload/" in "/" + dest):
            stripped = folder / dest
            if not stripped.exists() or stripped.stat().st_mtime < Path(src).stat().st_mtime:
                stripped.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, stripped)
                subprocess.run(["strip", "--strip-unneeded", str(stripped)], check=True)
            src = str(stripped)
        result.append((dest, src, typecode))
    return result
