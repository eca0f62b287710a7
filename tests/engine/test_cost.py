"""The runner counts its own cost of each call; litellm's is a cross-check that never moves the spend.

Real parts: litellm over real HTTP to the simulated provider on 127.0.0.1,
the reference harness, a real ``Spend`` and ``AttemptSpend``, the design
loader and ``check`` on real design files. The planted fault each test
catches is in tests/mutants.py ("the ceiling counts litellm's cost").
"""

from __future__ import annotations

import copy
import time

import pytest

from confirmatory.demo import harness
from confirmatory.design.model import Arm, Household, ModelSpec
from confirmatory.engine import llm
from confirmatory.engine.check import check_command
from confirmatory.engine.spend import AttemptSpend, Spend
from confirmatory.runtime.clock import Clock
from confirmatory.sim import SIM_PRICES, FaultPlan, SimProvider
from confirmatory.testing.designs import write_design

MODEL = "openai/sim-careful"
# sim-careful's price, nano-dollars per token (input, output): SIM_PRICES
IN_NUSD, OUT_NUSD = 1000, 4000


@pytest.fixture()
def sim():
    lib = llm._lib()
    with SimProvider(FaultPlan.from_table({"seed": 3})) as provider:
        llm.prepare([llm.AdHocModel(name="careful", litellm_model=MODEL, api_base=provider.url)], SIM_PRICES)
        saved = copy.deepcopy(lib.model_cost.get("sim-careful"))
        try:
            yield provider
        finally:
            # the simulator's price back (a planted price is process-wide)
            llm.prepare([llm.AdHocModel(name="careful", litellm_model=MODEL, api_base=provider.url)], SIM_PRICES)
            assert lib.model_cost.get("sim-careful") == saved


def plant_wrong_litellm_price() -> None:
    """litellm's map for the model, registered again after the runner froze
    its table: every price ten times the simulator's."""
    llm._lib().register_model(
        {
            MODEL: {
                "input_cost_per_token": 1e-5,
                "output_cost_per_token": 4e-5,
                "cache_read_input_token_cost": 1e-5,
                "cache_creation_input_token_cost": 1e-5,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
    )


def attempt_spend() -> tuple[Spend, AttemptSpend]:
    spend = Spend(ceiling_nusd=10**12, before_nusd=0, clock=Clock())
    return spend, AttemptSpend(
        spend,
        model="careful",
        household="hh-x",
        arm="alone",
        pass_index=0,
        stop_reason=lambda: None,
        on_late_cost=lambda nusd: None,
    )


def spec(url: str) -> ModelSpec:
    return ModelSpec(
        name="careful",
        litellm_model=MODEL,
        cap_usd=1.0,
        reserve_usd=0.01,
        params={"temperature": 0.0, "max_tokens": 400},
        timeout_s=10.0,
        api_base=url,
    )


def test_a_wrong_litellm_price_does_not_move_the_spend_and_each_call_records_the_disagreement(sim):
    plant_wrong_litellm_price()
    spend, attempt = attempt_spend()
    household = Household(id="hh-x", payload={"id": "hh-x", "adults": [{"employment_income": 24000}]})
    arm = Arm(name="alone", features={"tools": []})
    with attempt.bound():
        harness.run(spec(sim.url), household, arm, None, attempt, Clock())
    cost, calls = attempt.snapshot()
    model_calls = [c for c in calls if c["kind"] in ("chat", "responses")]
    assert model_calls, calls
    for c in model_calls:
        tokens = c["tokens"]
        assert c["billing_shape"] == "chat"
        assert c["runner_cost_nusd"] == tokens["input"] * IN_NUSD + tokens["output"] * OUT_NUSD
        assert c["cost_nusd"] == c["runner_cost_nusd"]  # the runner's cost is the one counted
        assert c["litellm_cost_nusd"] == 10 * c["runner_cost_nusd"]
        assert c["cost_disagreement"]["litellm_nusd"] == c["litellm_cost_nusd"]
    # the spend equals what the simulator billed, token by token
    used = sim.usage()["sim-careful"]
    billed = used["prompt_tokens"] * IN_NUSD + used["completion_tokens"] * OUT_NUSD
    assert spend.total_nusd == cost == billed


def test_a_responses_call_is_counted_at_the_runners_price_and_agrees_when_litellm_is_right(sim):
    spend, attempt = attempt_spend()
    with attempt.bound():
        reply = llm.responses(spec(sim.url), 'Household:\n{"adults": []}\nWhat is its net income?')
        attempt.add_call("responses", reply.start, reply.end, cost_usd=reply.cost_usd)
    (call,) = attempt.snapshot()[1]
    assert call["billing_shape"] == "responses"
    assert call["cost_disagreement"] is None  # litellm's map is the simulator's: they agree
    assert call["runner_cost_nusd"] == call["litellm_cost_nusd"] == reply.cost_nusd == spend.total_nusd > 0
    used = sim.usage()["sim-careful"]
    assert spend.total_nusd == used["prompt_tokens"] * IN_NUSD + used["completion_tokens"] * OUT_NUSD


def test_a_call_reported_at_other_times_keeps_no_billing_of_another_reply(sim):
    _spend, attempt = attempt_spend()
    with attempt.bound():
        reply = llm.chat(spec(sim.url), [{"role": "user", "content": "Household:\n{}\nWhat?"}])
        attempt.add_call("chat", reply.start, reply.end, cost_usd=reply.cost_usd)
        attempt.add_call("tool", time.time(), time.time())
    chat, tool = attempt.snapshot()[1]
    assert "tokens" in chat and "tokens" not in tool


@pytest.mark.parametrize(
    ("litellm_model", "table", "refusal"),
    [
        (
            # (another model than the next test's: a registered price is process-wide)
            "anthropic/claude-3-5-haiku-20241022",
            {"input": 0.8, "output": 4.0, "cached_input": 0.08},
            "can bill cache_write tokens and the table has no cache_write price",
        ),
        (
            "gemini/gemini-2.5-pro",
            {"input": 1.25, "output": 10.0},
            "can bill cached_input tokens and the table has no cached_input price",
        ),
        ("openai/gpt-4o", None, "has no price table; give one with input, cached_input, output"),
    ],
)
def test_check_refuses_a_table_lacking_a_kind_its_api_bills(
    tmp_path, capsys, monkeypatch, litellm_model, table, refusal
):
    design = write_design(
        tmp_path / "design",
        households=2,
        anchors={"command": ["true"]},
        models=[
            {
                "name": "m0",
                "litellm_model": litellm_model,
                "api_base": "https://api.example.test/v1",
                "price_usd_per_mtok": table,
            }
        ],
    )
    assert check_command(design) == 3
    err = capsys.readouterr().err
    assert "models[0].price_usd_per_mtok: " in err and refusal in err


def test_check_accepts_price_litellm_and_prints_the_table_it_would_freeze(tmp_path, capsys):
    design = write_design(
        tmp_path / "design",
        households=2,
        anchors={"command": ["true"]},
        models=[
            {
                "name": "m0",
                "litellm_model": "anthropic/claude-sonnet-4-5-20250929",
                "api_base": "https://api.example.test/v1",
                "price_usd_per_mtok": None,
                "price": "litellm",
            }
        ],
    )
    check_command(design)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "price (USD" in x)
    assert line.strip() == (
        'price (USD per million tokens, litellm\'s map now (price = "litellm")): '
        "input 3, cached_input 0.3, cache_write 3.75, output 15"
    )
