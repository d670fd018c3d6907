"""Build llama.cpp's server (``llama-server``) from the llama.cpp source that the installed
llama-cpp-python vendors, so the server and the embedded engine are the same llama.cpp.

    python packaging/build_llama_server.py          # prints the binary's path (builds once, then cached)

The source comes from PyPI (llama-cpp-python's sdist, through ``pip download``); the build uses
cmake and the C++ compiler, with ``GGML_NATIVE=OFF`` like the shipped wheel, no web UI and no
network features. The binary is kept in ``~/.cache/parley-studio/llama-server-<version>/``
(``PARLEY_LLAMA_SERVER_CACHE`` moves it). About 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib import metadata
from pathlib import Path

CACHE_ENV = "PARLEY_LLAMA_SERVER_CACHE"
BINARY_ENV = "PARLEY_LLAMA_SERVER"
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF",
]


def version() -> str:
    return metadata.version("llama-cpp-python")


def cached_binary() -> Path:
    base = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "parley-studio")
    return base / f"llama-server-{version()}" / "llama-server"


def find_binary() -> Path | None:
    """``PARLEY_LLAMA_SERVER`` if set, else the cached build; None when neither exists."""
    named = os.environ.get(BINARY_ENV)
    if named:
        return Path(named) if Path(named).is_file() else None
    binary = cached_binary()
    return binary if binary.is_file() else None


def build(jobs: int | None = None, log=print) -> Path:
    """Build (once) and return the binary."""
    found = find_binary()
    if found is not None:
        return found
    target = cached_binary()
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise SystemExit(f"building llama-server needs {tool}, which is not installed")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llama-server-build-") as tmp:
        work = Path(tmp)
        log(f"downloading llama-cpp-python {version()}'s source from PyPI ...")
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={version()}", "-d", str(work)], check=True)
        sdist = next(work.glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: refuse links and paths out of the folder
                tar.extractall(work, filter="data")
            else:
                tar.extractall(work)
        source = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        log(f"building llama-server from {source.relative_to(work)} ...")
        subprocess.run(["cmake", "-S", str(source), "-B", str(source / "build"), *CMAKE_FLAGS],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", str(source / "build"), "--target", "llama-server",
                        "-j", str(jobs or os.cpu_count() or 2)], check=True, stdout=subprocess.DEVNULL)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        shutil.copy2(source / "build" / "bin" / "llama-server", partial)
        partial.replace(target)
    log(f"built {target} in {time.monotonic() - started:.0f} s")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=None, help="compile jobs (default: every CPU)")
    args = parser.parse_args()
    print(build(args.jobs, log=lambda m: print(m, file=sys.stderr)))


if __name__ == "__main__":
    main()
