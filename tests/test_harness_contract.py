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


@pytest.mark.parametrize("kind, says", [
    ("nan-answer", "the harness's result is not JSON"),
    ("no-answer", "the harness's result has no 'answer'"),
    ("system-exit", "SystemExit"),
])
def test_a_contract_breach_is_a_harness_failure_of_its_own_model_with_its_spend_recorded(tmp_path, kind, says):
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.02, "plan": {"m0:alone/0": kind} if i == 0 else {}}
          for i in range(4)]
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
