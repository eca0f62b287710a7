"""False accepts found by the fourth audit of verify: runs that break the
procedure, or records that lie about what happened, planted in generated
runs and re-chained (`reseal`). Each failed to fail before its fix.
"""

from __future__ import annotations

import json
import shutil

import pytest
from test_verify_procedure import fix_totals
from test_verify_violations import edit_log, read, replay_decisions, reseal

from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.verify import verify_run

# a cap no household reaches, no pause and no harness stop: every lane runs
# its draw to the end and no model halts
OPEN_PLAN = Plan(households=16, anchor_every_s=120, cap_usd=5.0, harness=None, operator=None)


@pytest.fixture(scope="module")
def pristines(tmp_path_factory):
    made = {}

    def get(plan):
        if plan not in made:
            made[plan] = tmp_path_factory.mktemp("audit4") / "run"
            generate_run(made[plan], plan)
        return made[plan]
    return get


@pytest.fixture
def fresh(pristines, tmp_path):
    def copy(plan=OPEN_PLAN):
        root = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        shutil.copytree(pristines(plan), root)
        return root
    return copy


def verify(root):
    reseal(root)
    return verify_run(root, workers=1)


def messages(report, invariant, part=""):
    return [v.message for v in report.result(invariant).first if part in v.message]


def drop_household(root, model, h):
    """A household gone from the records: its decision, its lines, its records."""
    edit_log(root, f"models/{model}/run.jsonl", lambda objs: [o for o in objs if o.get("household") != h])
    edit_log(root, f"models/{model}/admission.jsonl", lambda objs: [o for o in objs if o.get("household") != h])
    shutil.rmtree(root / "models" / model / "records" / h, ignore_errors=True)


def test_the_pristine_open_run_verifies(fresh):
    report = verify(fresh())
    assert report.ok, report.to_table()


# -- invariant 3: a lane runs its draw to the end unless something ends it ---------------------

def test_a_lanes_last_household_dropped_from_the_records_fails_invariant_3(fresh):
    """A study team drops the last household of a lane (its decision, its
    lines and records), re-counts the decisions and totals: before, every
    check held, since nothing asked why the lane stopped taking households."""
    run = fresh()
    draw = json.loads((run / "models/alpha/manifest.json").read_bytes())["draw"]
    last = draw[-1]
    lane = (len(draw) - 1) % 2
    drop_household(run, "alpha", last)
    replay_decisions(run, "alpha")
    fix_totals(run)
    report = verify(run)
    assert report.failed() == {3}, report.to_table()
    assert messages(report, 3) == [
        f"lane {lane} took no decision on {last!r} (draw index {len(draw) - 1}): it was never refused, its last "
        "household finished, and its model did not stop, nor the run, nor was the ceiling crossed"]


def test_a_model_whose_lanes_never_took_a_household_fails_invariant_3(fresh):
    run = fresh()
    draw = json.loads((run / "models/beta/manifest.json").read_bytes())["draw"]
    for h in draw:
        drop_household(run, "beta", h)
    fix_totals(run)
    report = verify(run)
    assert report.failed() == {3}, report.to_table()
    assert len(messages(report, 3, "took no decision")) == 2
