"""Debian packages a test needs (Mono, the headless Godot), installed by the test itself with apt-get,
so a new machine needs nothing beyond what the project's own files install."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

INSTALL_SECONDS = 900.0  # apt-get on a slow mirror


def apt_install(packages: Sequence[str], missing: str) -> str | None:
    """``apt-get update`` and ``apt-get install PACKAGES``; None when it worked, else why it could not
    (``missing`` names what the test lacks, for the reason)."""
    if shutil.which("apt-get") is None:
        return f"{missing} is missing, and there is no apt-get to install it"
    if os.geteuid() != 0:
        return f"{missing} is missing, and only root may apt-get install {' '.join(packages)}"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", *packages]):
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=INSTALL_SECONDS,
                                  check=False)
        except subprocess.TimeoutExpired:
            return f"{' '.join(command)} took over {INSTALL_SECONDS:.0f} s"
        if done.returncode != 0:
            return f"{' '.join(command)} failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}"
    return None
