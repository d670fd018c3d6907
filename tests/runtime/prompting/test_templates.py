"""Mustache templates for prompts: no HTML escaping, no partials, clear errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.prompting.templates import TemplateError, render_template


def test_values_are_not_html_escaped():
    assert render_template("{{a}} {{{a}}} {{&a}}", {"a": "<b> & 'c'"}) == "<b> & 'c' <b> & 'c' <b> & 'c'"


def test_sections_dotted_names_and_missing_names():
    values = {"knowledge": [{"text": "one"}, {"text": "two"}], "vars": {"x": 3}, "slots": {}}
    assert render_template("{{#knowledge}}- {{text}}\n{{/knowledge}}{{vars.x}}{{slots.none}}", values) == "- one\n- two\n3"
    assert render_template("{{^knowledge}}nothing{{/knowledge}}", {"knowledge": []}) == "nothing"


@pytest.mark.parametrize("template, message", [
    ("{{#a}}", "Unexpected EOF"),
    ("{{/a}}", 'close tag "a"'),
    ("{{#a}}{{/b}}", 'close tag "b"'),
    ("{{> header}}", "partials"),
])
def test_bad_templates_name_the_node_and_field(template, message):
    with pytest.raises(TemplateError) as info:
        render_template(template, {}, node_id="reply", field="template", source="inn.json")
    problem = info.value.problems[0]
    assert (problem.file, problem.node_id, problem.field) == ("inn.json", "reply", "template")
    assert message in problem.message
    assert str(problem).startswith("inn.json:reply.template: error: bad Mustache template") or "partials" in str(problem)


def test_partials_never_read_files(tmp_path, monkeypatch):
    (tmp_path / "secret.mustache").write_text("SECRET")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TemplateError):
        render_template("{{> secret}}", {})


@settings(max_examples=400)
@given(st.text(alphabet=st.sampled_from(list("{}#/^&>!=<%ab. \n")), max_size=40))
def test_any_template_renders_or_is_a_template_error(template):
    try:
        assert isinstance(render_template(template, {"a": [{"b": 1}], "b": "x"}, "n", "template"), str)
    except TemplateError as exc:
        assert exc.problems[0].node_id == "n"
