"""The test suite as the README states it: how many tests there are and how long the README's test
command takes once installed (``python -m pytest``, offscreen), with the machine's load before and
after, so the README's counts and times come from a measurement (tests/test_readme.py holds the README
to this file).

    python bench/bench_test_suite.py     # the whole suite (~12 min on 2 cores): bench/results/test_suite.json

Run it on a quiet machine with llama-server already built (the first run of the tests builds it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from conversation import ROOT, write_results

# pytest's last line, under -q without its "=" frame: "2 failed, 1767 passed, 1 skipped in 688.46s (0:11:28)"
CLOSING_LINE = re.compile(r"^=*\s*(?P<counts>\d+ \w+(?:, \d+ \w+)*) in (?P<seconds>[\d.]+)s", re.MULTILINE)


def counts(line: str) -> dict[str, int]:
    """pytest's closing counts ("1754 passed, 1 skipped, 2 deselected") as a dict."""
    return {word: int(number) for number, word in re.findall(r"(\d+) (\w+)", line) if word not in ("warning", "warnings")}


def main() -> None:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    load_before = os.getloadavg()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=10"],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    closing = [m for m in CLOSING_LINE.finditer(done.stdout)]
    if not closing:
        raise SystemExit(f"pytest printed no closing line (exit {done.returncode}):\n{done.stdout[-3000:]}")
    found = counts(closing[-1].group("counts"))
    data = {
        "command": "QT_QPA_PLATFORM=offscreen python -m pytest",
        "exit_code": done.returncode,
        "tests": sum(found.values()),
        "counts": found,
        "pytest_seconds": float(closing[-1].group("seconds")),
        "wall_seconds": round(wall, 1),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "failed": [line.split(" - ")[0].removeprefix("FAILED ") for line in done.stdout.splitlines()
                   if line.startswith("FAILED ")],
        "slowest": [line for line in done.stdout.splitlines() if re.match(r"^\d+\.\d+s (call|setup)", line)][:10],
    }
    write_results("test_suite", data)
    print(f"{data['tests']} tests ({closing[-1].group('counts')}) in {data['pytest_seconds'] / 60:.1f} min, "
          f"load {data['load_average_before'][0]} -> {data['load_average_after'][0]}")


if __name__ == "__main__":
    main()
