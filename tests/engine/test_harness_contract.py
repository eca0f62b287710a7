"""What a harness owes the runner, and what happens when it does not pay.

Each breach is planted through the fake harness's plan (confirmatory.testing.fakes)
in a real Run: the attempt becomes a `harness` failure of its own model only (the
other model goes on), its record is written with the spend it counted, and the
run's records verify.
"""

from __future__ import annotations

import json

import pytest
from runhelpers import events, execute, of, verified

FAST = {"engine_factory": "confirmatory.testing.fakes:null_engine"}


@pytest.mark.parametrize(
    "kind, says",
    [
        ("nan-answer", "the harness's result is not JSON"),
        ("no-answer", "the harness's result has no 'answer'"),
        ("system-exit", "SystemExit"),
        ("monotonic-times", "are not time.time() seconds within this attempt"),
    ],
)
def test_a_contract_breach_is_a_harness_failure_of_its_own_model_with_its_spend_recorded(tmp_path, kind, says):
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.02, "plan": {"m0:alone/0": kind} if i == 0 else {}} for i in range(4)]
    result, run_dir = execute(tmp_path, households=hh, models=2, arms=("alone",), **FAST)
    verified(run_dir)  # spend conserved: the record holds the call it counted
    assert result.status == "stopped" and result.stop_cause == "harness", result
    (stop,) = of(events(run_dir, "m0"), "stop")
    assert stop["cause"] == "harness" and stop["scope"] == "model"
    assert not of(events(run_dir, "m1"), "stop")  # the other model went on
    record = json.loads((run_dir / "models/m0/records/hh-000/alone/0.json").read_text())
    assert record["status"] == "error" and says in json.dumps(record["error"]), record["error"]
    assert record["answer"] is None and record["cost_nusd"] > 0 and record["calls"]
    assert not of(events(run_dir, "m0"), "late-cost")  # nothing lost on the way


# --- money the harness does not report -------------------------------------------------------
# Real parts: the runner, litellm over real HTTP to the simulated provider,
# harness modules written here (pinned by the design).

UNREPORTED = """
from confirmatory.engine import llm

def run(model, household, arm, pool, spend, clock):
    spend.checkpoint()
    llm.chat(model, [{"role": "user", "content": "What is 2 + 2?"}])  # its cost never reported
    return {"answer": None}
"""

DIRECT = """
import time
from confirmatory.engine import llm

def run(model, household, arm, pool, spend, clock):
    spend.checkpoint()
    lib = llm._lib()
    start = time.time()
    response = lib.completion(model=model.litellm_model, api_base=model.api_base, api_key="sim-no-key",
                              messages=[{"role": "user", "content": "What is 2 + 2?"}], num_retries=0)
    spend.add_call("chat", start, time.time(), cost_usd=response._hidden_params.get("response_cost"))
    return {"answer": None}
"""


def run_study(tmp_path, name, src):
    from runhelpers import minimal_design

    from confirmatory.anchors.witness import init_local_witness
    from confirmatory.cli.run import run_command

    study = tmp_path / "study"
    study.mkdir()
    design = minimal_design(study, f"{name}_{tmp_path.name[-8:].replace('-', '_')}", src)
    init_local_witness(tmp_path / "runs" / ".witness")
    run_dir = tmp_path / "runs" / "r"
    return run_command(design, run_dir, quiet=True), run_dir


def first_records(run_dir):
    out = {}
    for model in ("careful", "sloppy", "truncates"):
        (attempt,) = [a for a in of(events(run_dir, model), "attempt")][:1]
        out[model] = json.loads((run_dir / "models" / model / attempt["record"]).read_text())
    return out


@pytest.mark.slow
def test_a_reply_the_harness_did_not_report_is_counted_and_stops_its_model(tmp_path):
    rc, run_dir = run_study(tmp_path, "unreported", UNREPORTED)
    assert rc == 4  # stopped: every model's harness failed
    verified(run_dir)  # and every nano-dollar is in a record
    for model, record in first_records(run_dir).items():
        (call,) = record["calls"]
        assert call["cost_nusd"] > 0 and record["cost_nusd"] == call["cost_nusd"], model
        assert "did not report" in record["error"]["message"] and "HarnessContractError" in record["error"]["type"]
        stops = of(events(run_dir, model), "stop")  # one per lane whose attempt failed so
        assert stops and all(s["cause"] == "harness" and "did not report" in s["detail"] for s in stops)
    (close,) = of(events(run_dir), "close")
    counted = sum(a["cost_nusd"] for m in ("careful", "sloppy", "truncates") for a in of(events(run_dir, m), "attempt"))
    assert close["spend_total_nusd"] == counted > 0


@pytest.mark.slow
def test_a_harness_calling_litellm_directly_is_stopped_at_its_first_attempt(tmp_path):
    rc, run_dir = run_study(tmp_path, "direct", DIRECT)
    assert rc == 4
    verified(run_dir)
    for model, record in first_records(run_dir).items():
        assert "called litellm directly 1 time(s)" in record["error"]["message"], (model, record["error"])
        # what it did report is kept
        assert record["cost_nusd"] > 0 and record["calls"][0]["error"] is None
        assert len(of(events(run_dir, model), "attempt")) <= 2  # its lanes stop at once


THEN = """
from confirmatory.engine import llm
from confirmatory.core.errors import UnparseableAnswer

def run(model, household, arm, pool, spend, clock):
    spend.checkpoint()
    llm.chat(model, [{"role": "user", "content": "What is 2 + 2?"}])  # its cost never reported
    {then}
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "then, ended_with",
    [
        ("spend.checkpoint()", None),  # the next turn is refused: that refusal is the breach itself
        ("raise UnparseableAnswer('no number in the reply')", "confirmatory.core.errors.UnparseableAnswer"),
    ],
)
def test_the_breach_keeps_what_else_ended_the_conversation(tmp_path, then, ended_with):
    rc, run_dir = run_study(tmp_path, "then", THEN.replace("{then}", then))
    assert rc == 4
    verified(run_dir)
    for model, record in first_records(run_dir).items():
        message = record["error"]["message"]
        assert "did not report" in message, (model, message)
        if ended_with is None:
            assert "had ended with" not in message, message
        else:
            assert f"the conversation had ended with {ended_with}: no number in the reply" in message, message


OWN_BUDGET_STOP = """
from confirmatory import BudgetStop

def run(model, household, arm, pool, spend, clock):
    raise BudgetStop("the harness thinks the budget is spent")
"""


@pytest.mark.slow
def test_a_budget_stop_the_harness_raises_itself_is_a_harness_failure_not_a_runner_stop(tmp_path):
    """Only the runner ends a conversation (spend.checkpoint). A BudgetStop the
    harness raises with nothing stopped would make a record saying the runner
    ended it, which verify rejects: it is the harness's failure instead."""
    rc, run_dir = run_study(tmp_path, "own_budget_stop", OWN_BUDGET_STOP)
    assert rc == 4  # stopped: every model's harness failed
    verified(run_dir)
    for model, record in first_records(run_dir).items():
        assert record["status"] == "error", (model, record["status"])
        assert record["error"]["type"].endswith("HarnessContractError")
        assert "raised BudgetStop itself" in record["error"]["message"]
        assert all(s["cause"] == "harness" for s in of(events(run_dir, model), "stop"))


ERROR_AS_TEXT = """
import time

def run(model, household, arm, pool, spend, clock):
    t = time.time()
    spend.add_call("tool", t, time.time(), error={"message": "the tool failed"})
    return {"answer": None}
"""


def test_a_call_error_given_as_an_object_without_its_fields_is_a_harness_failure_and_kept_beside(tmp_path):
    """An error is an exception, None or an object with the contract's fields
    (RECORDS.md): what else a harness gives is kept beside the call, whose
    error says what was wrong, and its model stops; the records verify."""
    rc, run_dir = run_study(tmp_path, "error_as_text", ERROR_AS_TEXT)
    assert rc == 4
    verified(run_dir)
    for model, record in first_records(run_dir).items():
        (call,) = record["calls"]
        assert call["error"]["type"].endswith("HarnessContractError"), (model, call)
        assert "error must be an exception, None or an object" in call["error"]["message"]
        assert call["extra"]["reported_error"] == repr({"message": "the tool failed"})
        assert record["status"] == "error" and "HarnessContractError" in record["error"]["type"]


# --- a billed reply without choices, in a real run ----------------------------------------------
# The bundled minimal harness (its own source, pinned), litellm over real HTTP
# to the simulated provider, which plans one reply with "choices": [] and a
# billed usage for one attempt.

EMPTY_CHOICES = """
[[simulator.faults]]
kind = "empty_choices"
model = "sim-careful"
household = "m-01"
arm = "alone"
pass = 0
call = 0
"""


@pytest.mark.slow
def test_a_billed_reply_without_choices_is_rerun_as_a_provider_failure_and_its_cost_is_counted(tmp_path):
    import re

    from runhelpers import DEMO, minimal_design, record

    from confirmatory.anchors.witness import init_local_witness
    from confirmatory.cli.run import run_command
    from confirmatory.core.money import to_nusd
    from confirmatory.sim import SIM_PRICES

    study = tmp_path / "study"
    study.mkdir()
    design = minimal_design(
        study, f"choices_{tmp_path.name[-8:].replace('-', '_')}", (DEMO / "minimal_harness.py").read_text()
    )
    design.write_text(design.read_text() + EMPTY_CHOICES)
    init_local_witness(tmp_path / "runs" / ".witness")
    run_dir = tmp_path / "runs" / "r"
    assert run_command(design, run_dir, quiet=True) == 0  # completed: no model stopped
    verified(run_dir)

    failed, again = (record(run_dir, "careful", "m-01", "alone", p) for p in (0, 1))
    (call,) = failed["calls"]
    assert failed["status"] == "error" and failed["error"]["type"] == "litellm.exceptions.APIError"
    assert "the provider replied without choices" in failed["error"]["message"]
    # The reply's tokens, at the simulator's prices, are in the call and the record.
    tokens = re.search(r"\((\d+) input and (\d+) output tokens billed\)", failed["error"]["message"])
    price_in, price_out = SIM_PRICES["sim-careful"]
    cost = int(tokens.group(1)) * to_nusd(price_in) + int(tokens.group(2)) * to_nusd(price_out)
    assert call["cost_nusd"] == failed["cost_nusd"] == cost > 0
    assert again["status"] == "ok" and again["answer"] is not None

    attempts = [a for a in of(events(run_dir, "careful"), "attempt") if (a["household"], a["arm"]) == ("m-01", "alone")]
    assert [(a["pass"], a["class"], a["action"]) for a in attempts] == [(0, "provider", "rerun"), (1, "ok", "keep")]
    assert attempts[0]["cost_nusd"] == cost
    assert not of(events(run_dir, "careful"), "stop") and not of(events(run_dir, "careful"), "late-cost")
    # The total counts it: every attempt's cost, the failed one's included.
    (close,) = of(events(run_dir), "close")
    counted = sum(a["cost_nusd"] for m in ("careful", "sloppy", "truncates") for a in of(events(run_dir, m), "attempt"))
    assert close["spend_total_nusd"] == counted
