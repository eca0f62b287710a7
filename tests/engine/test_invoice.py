"""Every model's spend equals the simulator's invoice, to the nano-dollar, on every API shape.

Real runs: the reference harness and calculator engine in a real process
pool, litellm over HTTP to the simulated provider on 127.0.0.1 (chat with
tools, chat in JSON mode, the Responses API, Anthropic Messages, Gemini),
prompts that repeat a conversation's prefix (cache reads), Anthropic's
``cache_control`` (cache writes), models that think (reasoning tokens), and
planted failures whose replies were billed all the same. The close line's
``spend_nusd`` is held against ``GET /_sim/invoice``, which the simulator
computes from the usage it sent by each vendor's billing rule.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runhelpers import events, of, verified
from simruns import run_on_sim, sim_design

# shape -> (the model, the arm whose conversation speaks it)
SHAPES = {
    "chat-tools": ("openai/sim-reasoner", "calculator"),
    "chat-json": ("openai/sim-reasoner", "alone"),
    "responses": ("openai/sim-reasoner", "calculator_explain"),
    "anthropic": ("anthropic/sim-claude", "calculator"),
    "gemini": ("gemini/sim-gemini", "calculator"),
}


def calls_of(run_dir: Path, model: str) -> list[dict]:
    return [
        call
        for path in sorted((run_dir / "models" / model / "records").glob("*/*/*.json"))
        for call in json.loads(path.read_text())["calls"]
        if call["kind"] in ("chat", "responses")
    ]


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_shapes_spend_in_its_close_line_equals_the_simulators_invoice_exactly(tmp_path, shape):
    litellm_model, arm = SHAPES[shape]
    served = litellm_model.split("/", 1)[1]
    run_dir = tmp_path / "run"
    result, invoice = run_on_sim(sim_design(tmp_path / "design", [("m", litellm_model)], [arm]), run_dir)
    assert result.status == "completed"
    verified(run_dir)
    (close,) = of(events(run_dir, "m"), "close")
    billed = invoice[served]
    tokens = billed["tokens"]
    # every kind of token this shape can bill was billed ...
    assert tokens["input"] > 0 and tokens["cached_input"] > 0 and tokens["output"] > 0
    if shape == "anthropic":
        assert tokens["cache_write"] > 0  # the harness marks its system prompt with cache_control
    else:
        assert tokens["reasoning"] > 0  # sim-reasoner and sim-gemini think, and say so apart
    # ... and the runner counted exactly what the vendor would bill
    assert close["spend_nusd"] == billed["nusd"] > 0
    (run_close,) = of(events(run_dir), "close")
    assert run_close["spend_total_nusd"] == billed["nusd"]
    calls = calls_of(run_dir, "m")
    assert sum(c["cost_nusd"] for c in calls) == billed["nusd"]
    assert {k: sum((c.get("tokens") or {}).get(k, 0) for c in calls) for k in tokens} == tokens
    # the billed failures are among them, counted at what they cost
    assert any(c["error"] and c["cost_nusd"] > 0 for c in calls), "a billed reply that raised is counted"
    kinds = {c["billing_shape"] for c in calls if "billing_shape" in c}
    if shape == "responses":
        assert kinds == {"chat", "responses"}
    else:
        assert kinds == {"anthropic" if shape == "anthropic" else "gemini" if shape == "gemini" else "chat"}
