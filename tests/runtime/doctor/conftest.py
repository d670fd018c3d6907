"""What the self-test's tests share: one ``parley doctor --json`` run on the sample model at the
default settings (the CI test of the self-test), parsed."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from runtime.cli import main as parley


@pytest.fixture(scope="session")
def doctor_run(sample_model) -> tuple[int, dict, str]:
    """``parley doctor --model SAMPLE --json``: the exit code, the report and what went to stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = parley(["doctor", "--model", str(sample_model), "--json"])
    return code, json.loads(out.getvalue()) if out.getvalue() else {}, err.getvalue()
