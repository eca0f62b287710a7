"""The reference harness against the real simulated provider, through litellm,
with the calculator in real engine worker processes."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from confirmatory.core.errors import BudgetStop, EscalatedTimeout, TruncationSurvived, UnparseableAnswer
from confirmatory.core.money import to_nusd
from confirmatory.demo import calculator, engine, harness
from confirmatory.design.model import Arm, Household, ModelSpec
from confirmatory.engine import llm
from confirmatory.engine.spend import AttemptSpend, Spend
from confirmatory.runtime.clock import Clock
from confirmatory.sim import SIM_PRICES, FaultPlan, SimProvider
from confirmatory.sim.behaviour import rule_of_thumb

ARMS = {
    "alone": Arm(name="alone", features={"tools": []}),
    "calculator": Arm(name="calculator", features={"tools": ["calculate"]}),
    "calculator_explain": Arm(name="calculator_explain", features={"tools": ["calculate"], "explain": True}),
}


def households() -> dict[str, Household]:
    text = resources.files("confirmatory.demo").joinpath("households.jsonl").read_text()
    rows = [json.loads(line) for line in text.splitlines()]
    return {r["id"]: Household(id=r["id"], payload=r) for r in rows}


HH = households()["hh-003"]
EXPECTED = calculator.calculate(HH.payload)["net_income"]


def model(served: str, url: str, *, timeout_s: float = 3.0, max_tokens: int = 400) -> ModelSpec:
    return ModelSpec(
        name=served,
        litellm_model=f"openai/{served}",
        cap_usd=1.0,
        reserve_usd=0.01,
        params={"temperature": 0.0, "max_tokens": max_tokens},
        timeout_s=timeout_s,
        api_base=url,
    )


@pytest.fixture(scope="module")
def pool():
    p = engine.start(2)
    yield p
    p.close()


@pytest.fixture(scope="module", autouse=True)
def prepared():
    llm.prepare([model(m, "http://127.0.0.1:1/v1") for m in SIM_PRICES], sim_prices=SIM_PRICES)


def serve(*faults: dict, hang_s: float = 5.0) -> SimProvider:
    return SimProvider(FaultPlan.from_table({"seed": 7, "hang_s": hang_s, "faults": list(faults)})).start()


def attempt(arm: str, *, stop: str | None = None, pass_index: int = 0) -> AttemptSpend:
    spend = Spend(ceiling_nusd=10**12, before_nusd=0, clock=Clock())
    return AttemptSpend(
        spend,
        model="m",
        household=HH.id,
        arm=arm,
        pass_index=pass_index,
        stop_reason=lambda: stop,
        on_late_cost=lambda nusd: None,
    )


def converse(served: str, arm: str, pool, *faults: dict, hang_s: float = 5.0, timeout_s: float = 3.0, stop=None):
    sim = serve(*faults, hang_s=hang_s)
    try:
        spend = attempt(arm, stop=stop)
        outcome: dict | BaseException
        try:
            outcome = harness.run(model(served, sim.url, timeout_s=timeout_s), HH, ARMS[arm], pool, spend, Clock())
        except BaseException as exc:  # the test inspects what was raised and what was recorded
            outcome = exc
        return outcome, spend.snapshot()[1], sim
    finally:
        sim.stop()


def kinds(calls):
    return [c["kind"] for c in calls]


def test_the_alone_arm_asks_once_for_json_and_records_a_priced_chat_call(pool):
    result, calls, sim = converse("sim-careful", "alone", pool)
    assert result == {"answer": {"net_income": rule_of_thumb({k: v for k, v in HH.payload.items()})}}
    assert kinds(calls) == ["chat"]
    assert calls[0]["cost_nusd"] > 0 and calls[0]["finish_reason"] == "stop"
    # The attempt key reached the provider in its header.
    assert sim.calls_of("sim-careful", f"{HH.id}/alone/0") == 1


def test_the_calculator_arm_runs_the_tool_in_the_engine_pool_and_answers_its_result(pool):
    result, calls, _ = converse("sim-careful", "calculator", pool)
    assert result == {"answer": {"net_income": EXPECTED}}
    assert kinds(calls) == ["chat", "tool", "chat"]
    assert calls[1]["cost_nusd"] == 0 and calls[1]["error"] is None


def test_the_explain_arm_adds_an_explain_call_and_a_responses_confirmation(pool):
    result, calls, _ = converse("sim-careful", "calculator_explain", pool)
    assert result["answer"] == {"net_income": EXPECTED}
    assert result["answer_before_explain"] == {"net_income": EXPECTED}
    assert kinds(calls) == ["chat", "tool", "chat", "explain", "responses"]
    assert calls[-1]["cost_nusd"] > 0
    assert all(c["start"] <= c["end"] for c in calls)


def test_a_truncated_turn_is_repeated_once_with_a_larger_limit(pool):
    result, calls, _ = converse("sim-careful", "calculator", pool, {"kind": "truncate", "call": 0})
    assert result == {"answer": {"net_income": EXPECTED}}
    assert kinds(calls) == ["chat", "chat", "tool", "chat"]
    assert calls[0]["finish_reason"] == "length" and not calls[0]["escalated_after_truncation"]
    assert calls[1]["escalated_after_truncation"] and calls[1]["finish_reason"] == "tool_calls"


def test_a_truncation_that_survives_the_escalation_is_the_models_fault(pool):
    result, calls, _ = converse("sim-careful", "alone", pool, {"kind": "truncate"})
    assert isinstance(result, TruncationSurvived)
    assert result.escalated_after_truncation
    assert [c["finish_reason"] for c in calls] == ["length", "length"]
    assert all(c["cost_nusd"] > 0 for c in calls)


def test_a_responses_turn_that_truncates_is_escalated_too(pool):
    # Calls: 0 chat (tool call), 1 chat (answer), 2 responses.
    result, calls, _ = converse("sim-careful", "calculator_explain", pool, {"kind": "truncate", "call": 2})
    assert result["answer"] == {"net_income": EXPECTED}
    assert kinds(calls)[-2:] == ["responses", "responses"]
    assert calls[-2]["finish_reason"] == "length" and calls[-1]["escalated_after_truncation"]


@pytest.mark.slow
def test_a_timeout_on_the_escalated_request_is_escalated_timeout(pool):
    result, calls, _ = converse(
        "sim-careful",
        "alone",
        pool,
        {"kind": "truncate", "call": 0},
        {"kind": "hang", "call": 1},
        hang_s=3.0,
        timeout_s=1.0,
    )
    assert isinstance(result, EscalatedTimeout)
    assert type(result.__cause__).__name__ == "Timeout"
    assert calls[1]["escalated_after_truncation"] and calls[1]["error"]["type"].endswith("Timeout")


def test_an_unparseable_final_answer_is_unparseable_answer_with_its_call_kept(pool):
    result, calls, _ = converse("sim-careful", "calculator", pool, {"kind": "bad_answer", "call": 1})
    assert isinstance(result, UnparseableAnswer)
    assert kinds(calls) == ["chat", "tool", "chat"] and calls[-1]["cost_nusd"] > 0


def test_a_provider_error_propagates_as_litellms_class_and_is_recorded(pool):
    result, calls, _ = converse("sim-careful", "calculator", pool, {"kind": "rate_limit", "call": 1})
    assert type(result).__name__ == "RateLimitError"
    assert kinds(calls) == ["chat", "tool", "chat"]
    assert calls[-1]["error"]["type"] == "litellm.exceptions.RateLimitError" and calls[-1]["cost_nusd"] == 0


@pytest.mark.parametrize(("call", "kind"), [(0, "chat"), (2, "responses")])
def test_a_billed_reply_without_choices_is_recorded_with_its_cost_as_a_provider_failure(pool, call, kind):
    # Calls of the explain arm: 0 chat (tool call), 1 chat (answer), 2 responses (confirmation).
    result, calls, _ = converse("sim-careful", "calculator_explain", pool, {"kind": "empty_choices", "call": call})
    assert type(result).__name__ == "APIError" and _class_of(result) == "provider"
    failed = calls[-1]
    assert failed["kind"] == kind and failed["error"]["type"] == "litellm.exceptions.APIError"
    assert failed["cost_nusd"] == to_nusd(result.cost_usd) > 0
    assert (failed["start"], failed["end"]) == (result.call_start, result.call_end)


def test_a_billed_chat_reply_with_null_choices_is_recorded_with_its_cost_as_a_provider_failure(pool):
    # litellm raises InternalServerError for it and loses the usage; the
    # record's call still carries what the reply cost.
    result, calls, _ = converse("sim-careful", "calculator_explain", pool, {"kind": "null_choices", "call": 0})
    assert type(result).__name__ == "InternalServerError" and _class_of(result) == "provider"
    failed = calls[-1]
    assert failed["kind"] == "chat" and failed["error"]["type"] == "litellm.exceptions.InternalServerError"
    assert failed["cost_nusd"] == to_nusd(result.cost_usd) > 0


def test_the_truncating_model_still_answers_after_escalations(pool):
    result, calls, _ = converse("sim-truncates", "calculator_explain", pool)
    assert result["answer"] == {"net_income": EXPECTED}
    escalations = [c for c in calls if c["escalated_after_truncation"]]
    assert all(c["finish_reason"] != "length" for c in escalations)


def test_a_conversation_the_runner_ended_makes_no_call(pool):
    result, calls, _ = converse("sim-careful", "calculator", pool, stop="ceiling")
    assert isinstance(result, BudgetStop) and calls == []


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"net_income": 41000.5}', 41000.5),
        ('Answer: {"net_income": 12}', 12.0),
        ('Sure.\n```json\n{"net_income": 3e4}\n```', 30000.0),
    ],
)
def test_a_final_answer_parses_from_json_prose_or_a_fenced_block(text, expected):
    assert harness.parse_answer(text) == {"net_income": expected}


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "about forty thousand",
        '{"net_income": "41000"}',
        '{"net_income": true}',
        '{"income": 5}',
        '{"net_income": NaN}',
    ],
)
def test_an_answer_without_a_finite_net_income_number_is_unparseable(text):
    with pytest.raises(UnparseableAnswer):
        harness.parse_answer(text)


def test_describe_lists_every_prompt_document_and_tool_schema_as_json():
    d = harness.describe()
    assert set(d) == {"prompts", "documents", "tool_schemas"}
    assert "calculate" in d["tool_schemas"] and "policy" in d["documents"]
    assert str(int(calculator.PERSONAL_ALLOWANCE)) in d["documents"]["policy"].replace(",", "")
    json.dumps(d)


# --- the bundled designs' fault plans do what their comments promise ---------

PROMISED = {
    "rate_limit": "provider",
    "unavailable": "provider",
    "server_error": "provider",
    "hang": "provider",
    "malformed": "provider",
    "truncate": "model",
    "bad_answer": "model",
    "auth": "operator",
    "empty_choices": "provider",
    "null_choices": "provider",
}


def _class_of(outcome) -> str:
    from confirmatory.core.errors import describe_exception
    from confirmatory.core.rules import classify

    if isinstance(outcome, BaseException):
        record = {"status": "error", "error": describe_exception(outcome)}
    else:
        record = {"status": "ok", "error": None}
    return classify(record, []).value


@pytest.mark.slow
@pytest.mark.parametrize("design_name", ["reference.toml", "operator-pause.toml"])
def test_each_planned_fault_gets_its_promised_class_and_its_rerun_goes_through(design_name, pool):
    from confirmatory.design.load import load_design

    loaded = load_design(resources.files("confirmatory.demo").joinpath(design_name))
    plan = FaultPlan.from_table(loaded.design.simulator)
    by_served = {m.served_name: m for m in loaded.design.models}
    by_id = {h.id: h for h in loaded.households}
    arms = {a.name: a for a in loaded.design.arms}
    assert plan.faults
    sim = SimProvider(plan).start()
    try:
        for fault in plan.faults:
            spec = by_served[fault.model].model_copy(update={"api_base": sim.url})
            seen = []
            for pass_index in (0, 1):
                spend = Spend(ceiling_nusd=10**12, before_nusd=0, clock=Clock())
                a = AttemptSpend(
                    spend,
                    model=spec.name,
                    household=fault.household,
                    arm=fault.arm,
                    pass_index=pass_index,
                    stop_reason=lambda: None,
                    on_late_cost=lambda n: None,
                )
                try:
                    outcome = harness.run(spec, by_id[fault.household], arms[fault.arm], pool, a, Clock())
                except Exception as exc:  # classified below
                    outcome = exc
                seen.append(_class_of(outcome))
            assert seen[0] == PROMISED[fault.kind.value], (fault, seen)
            # sim-sloppy garbles some answers of its own accord: that is a model keep, not a fault.
            assert seen[1] in (("ok", "model") if fault.model == "sim-sloppy" else ("ok",)), (fault, seen)
    finally:
        sim.stop()


def test_the_real_provider_design_loads_with_the_same_pins_and_no_api_base():
    from confirmatory.design.load import load_design

    demo = resources.files("confirmatory.demo")
    real = load_design(demo.joinpath("real-provider.toml"))
    ref = load_design(demo.joinpath("reference.toml"))
    assert real.pins == ref.pins and real.design.households == ref.design.households
    assert all(m.api_base is None and not m.litellm_model.startswith("openai/sim-") for m in real.design.models)
    assert real.design.simulator is None


def test_the_demo_names_a_fresh_run_directory_after_the_study(tmp_path):
    import datetime as dt

    from confirmatory.commands.demo import REFERENCE_DESIGN, default_run_dir

    when = dt.datetime(2026, 11, 29, 8, 30, 5, tzinfo=dt.UTC)
    assert (
        default_run_dir(REFERENCE_DESIGN, when, tmp_path) == tmp_path / "runs" / "reference-calculator-20261129T083005Z"
    )
