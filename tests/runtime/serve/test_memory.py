"""A server's freed KV snapshots go back to the system: turns on new threads that make and free
snapshots of a few MiB leave the process's resident memory where it was (glibc's malloc tuned by
``keep_memory_flat``; untuned, the same turns kept about 38 MiB)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.servers import ROOT

TURNS = """
import ctypes, threading
from runtime.serve.server import keep_memory_flat

def rss_mib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024

assert keep_memory_flat()
kept = []

def turn(i):  # a turn's snapshots, made and freed on its own thread, and a little kept
    snapshots = [(ctypes.c_uint8 * (3_000_000 + 4096 * (i % 7)))() for _ in range(4)]
    for snapshot in snapshots:
        ctypes.memset(snapshot, 1, len(snapshot))
    kept.append(bytes(2000))

before = rss_mib()
for r in range(30):
    threads = [threading.Thread(target=turn, args=(r * 3 + k,)) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
print(round(rss_mib() - before, 1))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc: Linux")
def test_snapshots_freed_on_turn_threads_leave_resident_memory_flat():
    done = subprocess.run([sys.executable, "-c", TURNS], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) < 8, f"resident memory grew {done.stdout.strip()} MiB over 90 turns"
