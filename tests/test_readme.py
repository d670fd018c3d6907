"""The README's set-up commands are the ones CI runs, and the test count and time it states are measured."""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commands():
    return re.findall(r"```sh\n(.+?)\n```", (ROOT / "README.md").read_text(encoding="utf-8"))


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    setup = [c for c in commands() if c.startswith("pip install")]
    assert len(setup) == 2
    run, test = setup
    assert "parley-studio" in run and "pytest" in test
    assert test in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_readme_screenshot_exists():
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", (ROOT / "README.md").read_text(encoding="utf-8")):
        assert (ROOT / image).is_file(), image


def test_readme_layout_table_matches_the_tree():
    """Every folder of the project, and every dock, is in the README's layout table, and every folder
    the table names exists."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text[text.index("## Layout"):]
    named = set(re.findall(r"^\| `([^`]+)/` \|", table, flags=re.MULTILINE))
    root = ROOT
    top = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
           and not p.name.endswith(".egg-info") and p.name not in ("build", "dist")}
    assert top <= named, f"folders missing from the README's layout table: {sorted(top - named)}"
    assert all((root / name).is_dir() for name in named), sorted(n for n in named if not (root / n).is_dir())
    packages = {f"runtime/{p.name}" for p in (root / "runtime").iterdir() if (p / "__init__.py").is_file()}
    assert packages <= named, f"runtime packages missing from the layout table: {sorted(packages - named)}"
    docks = {p.name for p in (root / "editor" / "docks").iterdir() if (p / "dock.py").is_file()}
    docks_row = next(line for line in table.splitlines() if line.startswith("| `editor/docks/`"))
    assert all(f"`{name}`" in docks_row for name in docks), sorted(docks)


def test_readme_states_the_measured_test_count_and_time(request):
    """The README's "about N minutes (M of them)" is bench/results/test_suite.json's measurement, and that
    measurement is of today's suite (within 5 % of the tests collected now: rerun bench/bench_test_suite.py)."""
    stated = re.search(r"The tests take about (\d+) minutes on a quiet 2-core machine once installed \(([\d,]+) of them",
                       (ROOT / "README.md").read_text(encoding="utf-8"))
    assert stated, "the README no longer states the tests' time and count in the sentence this test reads"
    measured = json.loads((ROOT / "bench" / "results" / "test_suite.json").read_text(encoding="utf-8"))
    assert int(stated[1]) == round(measured["pytest_seconds"] / 60)
    assert int(stated[2].replace(",", "")) == measured["tests"]
    collected = request.session.testscollected
    if collected < 0.9 * measured["tests"]:  # this run is part of the suite: count the whole of it
        listing = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                                 cwd=ROOT, capture_output=True, text=True, check=False).stdout
        collected = int(re.search(r"(\d+) tests? collected", listing)[1])
    assert abs(collected - measured["tests"]) <= 0.05 * measured["tests"], (
        f"{collected} tests now against {measured['tests']} measured: run python bench/bench_test_suite.py "
        "and update the README")
