"""A real PostgreSQL on 127.0.0.1 for tests and benchmarks (``parley serve --store postgresql://``).

A cluster of its own in a temporary folder (trust authentication, a free port, its socket in that
folder), started with ``pg_ctl`` and stopped with ``pg_ctl stop -m immediate`` when the ``with`` block
ends. PostgreSQL refuses to run as root, so as root it runs as the ``postgres`` user. A machine
without PostgreSQL (a fresh CI machine) gets it from apt first, when it can; otherwise the tests skip.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import free_port

DATABASE = "parley"


def apt_install(package: str) -> bool:
    """Install ``package`` with apt (a fresh CI machine); False where that cannot be done (not root, no apt)."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update"], check=True, capture_output=True, env=env)
    subprocess.run(["apt-get", "install", "-y", package], check=True, capture_output=True, env=env)
    return True


def postgres_bin() -> Path:
    """The newest installed PostgreSQL's bin folder, installed with apt if there is none (as root)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    if not found and apt_install("postgresql"):
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql) and cannot be installed here")
    return Path(found[-1]).parent


@contextlib.contextmanager
def running_postgres() -> Iterator[str]:
    """A new PostgreSQL cluster with a database ``parley``; yields its DSN
    (``postgresql://postgres@127.0.0.1:PORT/parley``)."""
    bin_dir = postgres_bin()
    as_root = os.geteuid() == 0
    # Under /tmp itself: pytest's own temporary folders are root's alone, and a socket path has a length limit
    folder = Path(tempfile.mkdtemp(prefix="parley-pg-"))
    data, log = folder / "data", folder / "postgres.log"
    if as_root:
        shutil.chown(folder, "postgres", "postgres")
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []

    def run(*command: str) -> None:
        done = subprocess.run([*prefix, *command], check=False, capture_output=True, text=True)
        if done.returncode:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}{tail}")

    port = free_port()
    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1", "start")
        try:
            run(str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", DATABASE)
            yield f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}"
        finally:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
