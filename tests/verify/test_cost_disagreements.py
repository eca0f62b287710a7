"""A wrong litellm price moves nothing the run counts; verify and the report list the disagreement.

A real run of the reference harness on the simulated provider (litellm over
HTTP to 127.0.0.1) in which litellm's cost map for the model, registered
again once the runner froze its table, prices cache reads at ten times the
simulator's price. Every other price is right, so exactly the calls that read
from the cache disagree. The spend still equals the simulator's invoice;
each such call carries a ``cost_disagreement``; verify (text and --json) and
the report's spend section list them, by the attempt line that names the
record, and the run verifies.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from runhelpers import events, of
from simruns import run_on_sim, sim_design

from confirmatory.core.simulated import SIM_PRICE_TABLE
from confirmatory.engine import llm
from confirmatory.report import build_page
from confirmatory.verify import verify_run
from confirmatory.verify.disagreements import cost_disagreements, listing_lines

MODEL = "openai/sim-reasoner"


@pytest.fixture()
def litellm_map():
    lib = llm._lib()
    saved = copy.deepcopy(lib.model_cost)
    yield lib
    lib.model_cost.clear()
    lib.model_cost.update(saved)


def plant_wrong_cached_price() -> None:
    table = SIM_PRICE_TABLE["sim-reasoner"]
    llm._lib().register_model(
        {
            MODEL: {
                "input_cost_per_token": table["input"] / 1e6,
                "output_cost_per_token": table["output"] / 1e6,
                "cache_read_input_token_cost": 10 * table["cached_input"] / 1e6,  # wrong: ten times the bill's
                "cache_creation_input_token_cost": table["cache_write"] / 1e6,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
    )


def model_calls(run_dir: Path) -> list[tuple[str, int, dict]]:
    out = []
    for path in sorted((run_dir / "models" / "m" / "records").glob("*/*/*.json")):
        for i, call in enumerate(json.loads(path.read_text())["calls"]):
            if call["kind"] in ("chat", "responses"):
                out.append((path.relative_to(run_dir).as_posix(), i, call))
    return out


@pytest.mark.slow
def test_a_wrong_litellm_cached_price_moves_no_spend_and_verify_and_the_report_list_each_call(tmp_path, litellm_map):
    run_dir = tmp_path / "run"
    design = sim_design(tmp_path / "design", [("m", MODEL)], ["calculator"], households=4, faults=[])
    result, invoice = run_on_sim(design, run_dir, after_prepare=plant_wrong_cached_price)
    assert result.status == "completed"
    (close,) = of(events(run_dir, "m"), "close")
    assert close["spend_nusd"] == invoice["sim-reasoner"]["nusd"]  # the spend did not move
    calls = model_calls(run_dir)
    cached = [(rel, i, c) for rel, i, c in calls if c["tokens"]["cached_input"] > 0]
    assert cached and len(cached) < len(calls)  # the first call of each conversation reads no cache
    for _rel, _i, c in calls:
        assert c["cost_nusd"] == c["runner_cost_nusd"]
        if c["tokens"]["cached_input"]:
            # litellm over-charges exactly the cache reads: nine tenths more of their price
            extra = 9 * c["tokens"]["cached_input"] * round(SIM_PRICE_TABLE["sim-reasoner"]["cached_input"] * 1000)
            assert c["litellm_cost_nusd"] == c["runner_cost_nusd"] + extra
            assert c["cost_disagreement"]["runner_nusd"] == c["runner_cost_nusd"]
        else:
            assert c["cost_disagreement"] is None and c["litellm_cost_nusd"] == c["runner_cost_nusd"]

    report = verify_run(run_dir)
    assert report.ok, report.to_table(shown=10)  # a disagreement is not a violation
    listing = json.loads(report.to_json())["figures"]["cost_disagreements"]
    assert listing["count"] == len(cached)
    assert [(c["record"], c["call"]) for c in listing["calls"]] == [(rel, i) for rel, i, _ in cached]
    runlog = (run_dir / "models" / "m" / "run.jsonl").read_text().splitlines()
    for c in listing["calls"]:
        file, n = c["where"].rsplit(":", 1)
        assert file == "models/m/run.jsonl"
        line = json.loads(runlog[int(n) - 1])  # 1-based, as editors count
        assert line["event"] == "attempt" and f"models/m/{line['record']}" == c["record"]
    text = report.to_table()
    assert f"cost disagreements (not violations: the spend counts the runner's cost): {len(cached)} call(s)" in text
    assert listing["calls"][0]["where"] in text

    page, _ = build_page(run_dir, tmp_path / "page.html")
    assert f'class="cost-disagreements" data-count="{len(cached)}"' in page
    assert listing["calls"][0]["where"] in page


def test_a_run_whose_calls_all_agree_lists_none(tmp_path):
    record = tmp_path / "models" / "m" / "records" / "hh" / "alone" / "0.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"calls": [{"kind": "chat", "cost_disagreement": None}]}))
    listing = cost_disagreements(tmp_path, ["m"])
    assert listing == {"count": 0, "calls": []}
    assert listing_lines(listing) == [
        "cost disagreements: none (litellm's cost is within 1 % of the runner's on every call)"
    ]
    gap = {"runner_nusd": 5, "litellm_nusd": None, "reason": "litellm gave no cost"}
    record.write_text(json.dumps({"calls": [{"kind": "tool"}, {"kind": "chat", "cost_disagreement": gap}]}))
    (listed,) = cost_disagreements(tmp_path, ["m"])["calls"]
    # no run.jsonl names the record: the record itself is where
    assert listed["where"] == listed["record"] == "models/m/records/hh/alone/0.json" and listed["call"] == 1
    assert "litellm none" in listing_lines({"count": 1, "calls": [listed]})[1]
