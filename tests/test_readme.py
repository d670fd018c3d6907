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
