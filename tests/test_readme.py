"""The README's set-up commands are the ones CI runs."""

import re
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
