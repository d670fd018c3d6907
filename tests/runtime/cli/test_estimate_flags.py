"""``parley estimate`` flags: every value outside what makes sense is refused with exit code 2."""

from __future__ import annotations

import json

import pytest

from runtime.cli import main


@pytest.fixture()
def asset(tmp_path):
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"name": "a", "default_model": "m.gguf", "start_node": "reply",
                                "nodes": [{"id": "reply", "type": "GenerateAndSpeak"}]}), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("flags, message", [
    (["--gpu-memory", "inf"], "--gpu-memory inf: give the GPU's memory in GB"),
    (["--gpu-memory", "nan"], "--gpu-memory nan"),
    (["--gpu-memory", "-1"], "--gpu-memory -1"),
    (["--gpu-memory", "1e300"], "--gpu-memory 1e+300"),
    (["--gpu-layers", "-5"], "--gpu-layers -5: give -1 (all layers), 0 (none)"),
    (["--gpu-layers", "99999999999999"], "--gpu-layers 99999999999999"),
    (["--context", "reply=1e30"], "--context takes NODE=TOKENS"),
    (["--context", "reply=" + "9" * 31], "a context holds 0 (the model's own size) to 1,048,576 tokens"),
    (["--context", "reply=2000000"], "to 1,048,576 tokens"),
    (["--context", "reply=\u00b2"], "--context takes NODE=TOKENS"),
    (["--context", "=5"], "--context takes NODE=TOKENS"),
    (["--model", "a\0b"], "NUL character"),
    (["--kv-type", "q8_0"], ("--kv-type q8_0 needs flash attention, which is off (the runtime's default): "
                             "llama.cpp quantizes the V cache only with it; add --flash-attn on (or auto)")),
    (["--kv-type", "q4_0", "--flash-attn", "off"], "needs flash attention, which is off (--flash-attn off)"),
    (["--kv-type", "q4_0", "--no-flash-attn"], "needs flash attention, which is off (--no-flash-attn)"),
    (["--no-flash-attn", "--flash-attn", "on"], "--no-flash-attn contradicts --flash-attn on"),
])
def test_absurd_flag_values_are_refused_with_exit_2(asset, capsys, flags, message):
    """Defect 9: --gpu-memory inf raised OverflowError; --gpu-layers -5 and --context reply=1e30 (or its
    31 digits) gave absurd numbers."""
    assert main(["estimate", asset, *flags]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_sensible_values_still_estimate(asset, capsys):
    code = main(["estimate", asset, "--gpu-memory", "0", "--gpu-layers", "-1", "--context", "reply=1048576"])
    assert code == 1, "the model file is missing: a problem, exit 1"
    assert "reply.default_model" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--kv-type", "q8_0", "--flash-attn", "on"], ["--kv-type", "q4_0", "--flash-attn", "auto"],
                                   ["--no-flash-attn"], ["--flash-attn", "off", "--no-flash-attn"]])
def test_flash_attention_flags_that_llama_cpp_accepts_still_estimate(asset, capsys, flags):
    assert main(["estimate", asset, *flags]) == 1, "the model file is missing: a problem, exit 1"
    assert "reply.default_model" in capsys.readouterr().err


def test_an_unknown_flash_attention_mode_is_refused(asset, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["estimate", asset, "--flash-attn", "yes"])
    assert exc.value.code == 2 and "--flash-attn: invalid choice: 'yes'" in capsys.readouterr().err
