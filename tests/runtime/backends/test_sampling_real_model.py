"""Issue 23, friction 10, on the real sample model: a node's repeat penalty reaches llama.cpp's
sampler (a greedy reply that loops without it stops with it), and the loop gets the runaway
warning in the node's diagnostics."""

from __future__ import annotations

import pytest

from runtime.agent import Agent
from runtime.asset.model import Asset, new_node
from runtime.backends.llama import LlamaBackend
from tests.runtime.conversations import node_diag

pytestmark = pytest.mark.model

# Greedy, SmolLM2-135M answers this with "Hello, hello, hello, ..." up to the cap.
LOOPING_LINE = "Write the word 'hello' one hundred times."


@pytest.fixture(scope="module")
def backend():
    b = LlamaBackend()
    yield b
    b.close()


def _turn(backend, model, repeat_penalty: float):
    node = new_node("Generate", "reply", system_prompt="You are a guard.", temperature=0.0, max_tokens=48,
                    context_size=1024, repeat_penalty=repeat_penalty)
    result = Agent(Asset(default_model=str(model), start_node="reply", nodes=[node]), backend).run_turn(LOOPING_LINE)
    return result.reply, node_diag(result.diagnostics, "reply").warnings


def test_a_greedy_loop_gets_the_runaway_warning_and_a_repeat_penalty_stops_it(backend, sample_model):
    looped, warnings = _turn(backend, sample_model, 1.0)
    assert looped.lower().count("hello") >= 10
    assert any("repeated itself up to max_tokens (48 tokens)" in w for w in warnings), warnings

    penalized, warnings = _turn(backend, sample_model, 1.3)
    assert penalized != looped and penalized.lower().count("hello") < 5  # greedy: only the penalty differs
    assert not any("repeated itself" in w or "cut at max_tokens" in w for w in warnings), warnings
