"""Issue 23, friction 8: a Context Size above the model's trained size is an error in validation
(the editor's Problems and ``parley validate``) when the model file can be read; it passed both,
and only failed when the node ran."""

from __future__ import annotations

import json

import pytest

from runtime.asset.validation import check_file
from runtime.cli import main
from tests.runtime.tiny_gguf import write_tiny_gguf


def _asset(tmp_path, *nodes, trained: int = 8192):
    write_tiny_gguf(tmp_path / "m.gguf", context_length=trained)
    path = tmp_path / "npc.json"
    path.write_text(json.dumps({"version": 1, "default_model": "m.gguf", "start_node": nodes[0]["id"],
                                "nodes": list(nodes)}))
    return path


def _context_errors(path):
    return [p for p in check_file(path) if p.field == "context_size"]


def test_a_context_above_the_trained_size_is_an_error_on_the_node_and_field(tmp_path):
    path = _asset(tmp_path, {"id": "reply", "type": "Generate", "context_size": 32768, "system_prompt": "x"})
    (problem,) = _context_errors(path)
    assert (problem.severity, problem.node_id) == ("error", "reply")
    assert "32,768" in problem.message and "8,192" in problem.message and "m.gguf" in problem.message


@pytest.mark.parametrize("context", [0, 2048, 8192])
def test_up_to_the_trained_size_or_0_passes(tmp_path, context):
    path = _asset(tmp_path, {"id": "reply", "type": "Generate", "context_size": context, "system_prompt": "x"})
    assert _context_errors(path) == []


def test_a_classifier_with_its_own_model_is_checked_against_that_model(tmp_path):
    write_tiny_gguf(tmp_path / "small.gguf", context_length=1024)
    path = _asset(tmp_path, {"id": "sort", "type": "ClassifyIntent", "model_name": "small.gguf", "context_size": 2048,
                             "intents": [{"name": "a"}, {"name": "b"}]})
    (problem,) = _context_errors(path)
    assert problem.node_id == "sort" and "small.gguf" in problem.message and "1,024" in problem.message


def test_an_unknown_model_file_is_not_guessed_at(tmp_path):
    path = _asset(tmp_path, {"id": "reply", "type": "Generate", "context_size": 32768, "model_name": "gone.gguf",
                             "system_prompt": "x"})
    assert _context_errors(path) == []  # the missing file is its own warning


def test_parley_validate_says_it_and_fails(tmp_path, capsys):
    path = _asset(tmp_path, {"id": "reply", "type": "Generate", "context_size": 32768, "system_prompt": "x"})
    assert main(["validate", str(path)]) == 1
    assert "reply.context_size: error: context_size (32,768) is larger than m.gguf was trained for" in capsys.readouterr().out
