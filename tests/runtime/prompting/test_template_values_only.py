"""Templates read values only: never a Python object's attributes or methods, and nothing is called."""

from __future__ import annotations

import json
import os
import sys

import pytest

from runtime.asset.model import Asset, new_node
from runtime.cli import main
from runtime.prompting.prompt import template_values
from runtime.prompting.templates import render_template

# The player's line as chevron's lambda sections would run it through str.format: the render
# function chevron passes in carries chevron's globals (os.path, hence os.environ; sys).
ATTACK = "{1.__globals__[path].os.environ[HOME]} {1.__globals__[sys].version}"


def _values(line: str = ATTACK) -> dict:
    return template_values(line, "be kind", {"knowledge": [{"id": "k1", "text": "the inn", "score": 0.5}],
                                             "mood": "calm"}, {"n": 3, "flag": True, "off": False, "ratio": 0.25})


@pytest.mark.parametrize("template", [
    "{{input.__class__}}",
    "{{#input.format}}{{/input.format}}",
    "{{#input.format}}anything{{/input.format}}",
    "{{input.upper}}",
    "{{vars.n.real}}{{vars.n.__class__.__mro__}}",
    "{{vars.keys}}{{#vars.items}}x{{/vars.items}}",
    "{{knowledge.append}}{{#knowledge.pop}}x{{/knowledge.pop}}",
    "{{slots.mood.__len__}}{{vars.flag.conjugate}}{{vars.ratio.hex}}",
    "{{instructions.__doc__}}",
])
def test_no_attribute_or_method_is_ever_reached(template):
    """Defect 13: {{input.__class__}} rendered <class 'str'>, and {{#input.format}} ran the player's line
    as a Python format string that read HOME and sys.version."""
    out = render_template(template, _values())
    assert out == ""
    assert os.environ.get("HOME", "/nowhere") not in out and sys.version not in out


def test_values_still_render_as_before():
    template = ("{{instructions}}|{{input}}|{{vars.n}} {{vars.flag}} {{vars.off}} {{vars.ratio}}|"
                "{{#knowledge}}{{text}} ({{score}}){{/knowledge}}|{{knowledge.0.id}}|{{slots.mood}}|"
                "{{#vars.flag}}on{{/vars.flag}}{{^vars.off}}off{{/vars.off}}|{{slots.missing}}")
    out = render_template(template, _values("hello <&>"))
    assert out == "be kind|hello <&>|3 True False 0.25|the inn (0.5)|k1|calm|onoff|"


def test_callables_among_the_values_are_never_called():
    called = []

    def sneaky(*args):
        called.append(args)
        return "CALLED"

    out = render_template("{{#f}}x{{/f}}{{f}}{{#obj.method}}y{{/obj.method}}", {"f": sneaky, "obj": object()})
    assert not called and "CALLED" not in out


def _asset_with(tmp_path, **templates):
    nodes = [new_node("GenerateAndSpeak", "reply", default_exit="fold", template=templates.get("reply", "")),
             new_node("Summarize", "fold", template=templates.get("fold", "{{transcript}}"))]
    path = tmp_path / "agent.json"
    asset = Asset(name="a", default_model="m.gguf", start_node="reply", nodes=nodes)
    path.write_text(json.dumps(asset.model_dump(mode="json")), encoding="utf-8")
    return path


def test_parley_validate_finds_broken_templates_and_partials(tmp_path, capsys):
    """Defect 13: broken templates were found only when a turn ran."""
    path = _asset_with(tmp_path, reply="{{#knowledge}}{{text}}", fold="{{> header}}")
    assert main(["validate", "--quiet", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path}:reply.template: error: bad Mustache template: Unexpected EOF" in out
    assert f"{path}:fold.template: error: partials ({{{{> header}}}}) are not supported" in out
    assert out.count("reply.template") == 1

    good = _asset_with(tmp_path, reply="{{#knowledge}}{{text}}{{/knowledge}}")
    assert main(["validate", "--quiet", str(good)]) == 0
