"""``parley serve``'s flags are checked before anything binds or loads, each refusal said plainly."""

from __future__ import annotations

import pytest

from runtime.cli import main
from runtime.resources import examples_dir


@pytest.mark.parametrize(("argv", "said"), [
    ([], "give at least one --assets folder"),
    (["--assets", "no/such/folder"], "--assets no/such/folder: not a folder"),
    (["--assets", str(examples_dir()), "--max-line", "0"], "--max-line must be at least 1"),
    (["--assets", str(examples_dir()), "--tool-timeout", "0"], "--tool-timeout 0: seconds above 0 and at most 86400"),
    # issue 39: inf made every tool call fail with an OverflowError, nan every call time out at once
    (["--assets", str(examples_dir()), "--tool-timeout", "inf"], "--tool-timeout inf: seconds above 0"),
    (["--assets", str(examples_dir()), "--tool-timeout", "nan"], "--tool-timeout nan: seconds above 0"),
    (["--assets", str(examples_dir()), "--tool-timeout", "1e300"], "at most 86400 (a day)"),
    (["--assets", str(examples_dir()), "--kv-budget", "0"], "--kv-budget must be positive"),
    (["--assets", str(examples_dir()), "--kv-budget", "nan"], "--kv-budget must be positive"),
    (["--assets", str(examples_dir()), "--backend", "scripted", "--kv-budget", "1"],
     "--kv-budget: settings of the embedded backend"),
    (["--assets", str(examples_dir()), "--backend", "no-such-profile-or-url"], "no backend named 'no-such-profile"),
    (["--assets", str(examples_dir()), "--backend", "scripted", "--store", "redis://cache"],
     "--store 'redis://cache': use none, sqlite:PATH"),
    (["--assets", str(examples_dir()), "--backend", "scripted", "--store", "sqlite:"], "give the file's path"),
])
def test_bad_flags_are_refused_before_anything_starts(argv, said, capsys, monkeypatch):
    monkeypatch.delenv("PARLEY_SERVE_TOKEN", raising=False)
    code = main(["serve", "--port", "0", *argv])
    err = capsys.readouterr().err
    assert code == 2 and said in err, err


def test_listening_beyond_this_computer_needs_a_token(capsys, monkeypatch):
    monkeypatch.delenv("PARLEY_SERVE_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "0", "--backend", "scripted",
                 "--assets", str(examples_dir())]) == 2
    assert "set a long random token in the environment variable" in capsys.readouterr().err
    monkeypatch.setenv("PARLEY_SERVE_TOKEN", "short")
    assert main(["serve", "--host", "0.0.0.0", "--port", "0", "--backend", "scripted",
                 "--assets", str(examples_dir())]) == 2
    assert "shorter than 16 characters" in capsys.readouterr().err


def test_the_embedded_backend_has_a_kv_budget_that_fits_the_machine_by_default(tmp_path) -> None:
    """Issue 39: with no --kv-budget each session kept its contexts for its whole life (about 61 MB on
    the sample model): the default 1,000 sessions would want 61 GB. The default is a quarter of memory."""
    import argparse
    import os

    from runtime.cli.serve import _backend, default_kv_budget_mib

    memory_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1024 * 1024)
    assert default_kv_budget_mib() == pytest.approx(memory_mib / 4)
    args = argparse.Namespace(backend="embedded", kv_budget=None, park_budget=None, threads=1, threads_batch=1,
                              state_dir=tmp_path)
    backend = _backend(args, tmp_path)
    try:
        assert backend.kv_budget_mib == pytest.approx(memory_mib / 4)
    finally:
        backend.close()
    args.kv_budget = 0.5
    backend = _backend(args, tmp_path)
    try:
        assert backend.kv_budget_mib == 512
    finally:
        backend.close()
