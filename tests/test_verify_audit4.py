"""False accepts found by the fourth audit of verify: runs that break the
procedure, or records that lie about what happened, planted in generated
runs and re-chained (`reseal`). Each failed to fail before its fix.
"""

from __future__ import annotations

import json
import shutil

import pytest
from test_verify_procedure import fix_totals, messages, pristines, verify  # noqa: F401 - pristines: a fixture
from test_verify_violations import PLAN, edit_log, read, replay_decisions, reseal

from confirmatory.testing.rungen import Plan
from confirmatory.verify import verify_run

# a cap no household reaches, no pause and no harness stop: every lane runs
# its draw to the end and no model halts
OPEN_PLAN = Plan(households=16, anchor_every_s=120, cap_usd=5.0, harness=None, operator=None)
# ... and one whose spend crosses the run's ceiling
CEILING_PLAN = Plan(households=16, anchor_every_s=120, cap_usd=5.0, harness=None, operator=None, ceiling_usd=1.2)


@pytest.fixture
def fresh(pristines, tmp_path):
    def copy(plan=OPEN_PLAN):
        root = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        shutil.copytree(pristines(plan), root)
        return root
    return copy


def drop_household(root, model, h):
    """A household gone from the records: its decision, its lines, its records;
    and, as a careful forger would, every anchor's count of those logs lowered
    by the lines dropped before it (else an anchor counts, in their place,
    later lines dated after it)."""
    for rel in (f"models/{model}/run.jsonl", f"models/{model}/admission.jsonl"):
        gone = [k for k, o in enumerate(read(root / rel)) if o.get("household") == h]
        edit_log(root, rel, lambda objs: [o for o in objs if o.get("household") != h])

        def lower(objs, rel=rel, gone=gone):
            for a in objs:
                if a.get("event") == "anchor" and rel in a["logs"]:
                    n = a["logs"][rel]["lines"]
                    a["logs"][rel]["lines"] = n - sum(k < n for k in gone)
        edit_log(root, "anchors.jsonl", lower)
    shutil.rmtree(root / "models" / model / "records" / h, ignore_errors=True)


def test_the_pristine_runs_verify(fresh):
    for plan in (OPEN_PLAN, PLAN, CEILING_PLAN):
        report = verify(fresh(plan))
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
    assert messages(report, 3, "took no decision") == [
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


# -- invariant 7: the run's close status says how it ended ------------------------------------

def set_status(run, status):
    edit_log(run, "run.jsonl", lambda objs: [o.update(status=status) for o in objs if o.get("event") == "close"]
             and None)


def test_a_run_with_a_model_stopped_closed_as_completed_fails_invariant_7(fresh):
    """PLAN's gamma is stopped by a harness failure: the run closed
    `stopped`. Before, a close line saying `completed` (or `ceiling`)
    passed: only its being one of the three was checked."""
    for status in ("completed", "ceiling"):
        run = fresh(PLAN)
        set_status(run, status)
        report = verify(run)
        assert report.failed() == {7}, report.to_table()
        assert messages(report, 7) == [f"close status {status!r}; a stop of the run or a model: stopped"]


def test_a_run_that_never_crossed_the_ceiling_closed_as_ceiling_fails_invariant_7(fresh):
    run = fresh()
    set_status(run, "ceiling")
    report = verify(run)
    assert report.failed() == {7}, report.to_table()
    assert messages(report, 7) == ["close status 'ceiling'; nothing stopped the run: completed or stopped"]


def test_a_run_that_crossed_the_ceiling_closed_otherwise_fails_invariant_7(fresh):
    assert read(fresh(CEILING_PLAN) / "run.jsonl")[-1]["status"] == "ceiling"
    for status in ("completed", "stopped"):
        run = fresh(CEILING_PLAN)
        set_status(run, status)
        report = verify(run)
        assert report.failed() == {7}, report.to_table()
        assert messages(report, 7) == [f"close status {status!r}; the spend crossed the ceiling: ceiling"]


# -- invariant 3: a lane-end line says what ended its lane ------------------------------------

def set_lane_end(run, model, lane, reason):
    edit_log(run, f"models/{model}/run.jsonl", lambda objs: [
        o.update(reason=reason) for o in objs if o.get("event") == "lane-end" and o["lane"] == lane] and None)


@pytest.mark.parametrize(("plan", "model", "lane", "reason", "why"), [
    (PLAN, "alpha", 1, "done", "it did not run its draw to the end"),  # it was refused
    (OPEN_PLAN, "alpha", 1, "refused", "it was never refused"),
    (OPEN_PLAN, "alpha", 1, "stopped", "nothing stopped its model or the run"),
    (OPEN_PLAN, "alpha", 1, "ceiling", "the ceiling was not crossed"),
])
def test_a_lane_end_reason_that_is_not_what_ended_the_lane_fails_invariant_3(fresh, plan, model, lane, reason, why):
    """Before, a lane-end line's reason was only checked for being one of
    the four: a refused lane could say it was done, a done one stopped."""
    run = fresh(plan)
    set_lane_end(run, model, lane, reason)
    report = verify(run)
    assert report.failed() == {3}, report.to_table()
    assert messages(report, 3) == [f"lane {lane} ended {reason!r}, but {why}"]


def test_a_lane_end_line_missing_or_repeated_fails_invariant_3(fresh):
    run = fresh()
    rel = "models/alpha/run.jsonl"
    edit_log(run, rel, lambda objs: [o for o in objs if not (o.get("event") == "lane-end" and o["lane"] == 0)])
    report = verify(run)
    assert report.failed() == {3}, report.to_table()
    assert messages(report, 3) == ["lane 0 has no lane-end line"]
    run = fresh()
    edit_log(run, rel, lambda objs: objs[:-1] + [o for o in objs if o.get("event") == "lane-end"] + objs[-1:])
    report = verify(run)
    assert report.failed() == {3}, report.to_table()
    assert messages(report, 3) == ["second lane-end for lane 1", "second lane-end for lane 0"]


# -- invariant 3: every model has the one draw ------------------------------------------------

def test_a_model_whose_draw_left_out_households_fails_invariant_3(fresh, monkeypatch):
    # beta's draw and arm orders made again, by the study's seed, without two
    # of the households (as a team would to keep a model off them). Each draw
    # is its own seeded shuffle, and was checked only so; the other checks of
    # invariant 3 fail on this plant too (its lanes' households no longer
    # follow the new order), but none said that beta saw another study.
    from confirmatory.streams import arm_orders, draw_order

    monkeypatch.setattr("confirmatory.verify.report.KEEP_PER_INVARIANT", 10**6)  # every violation kept
    run = fresh(PLAN)
    path = run / "models/beta/manifest.json"
    mf = json.loads(path.read_bytes())
    kept = mf["draw"][:-2]
    mf["draw"] = draw_order(mf["seed"], kept)
    arms = sorted(next(iter(mf["arm_orders"].values())))
    mf["arm_orders"] = arm_orders(mf["seed"], "beta", mf["draw"], arms)
    from confirmatory.chain import dumps
    path.write_bytes(dumps(mf) + b"\n")
    reseal(run)
    report = verify_run(run, workers=1)
    shared = [(v.file, v.message) for v in report.result(3).first if "shares the one draw" in v.message]
    assert shared == [("models/beta/manifest.json", "draw is not alpha's (2 of alpha's households missing, 0 not "
                       "in it): every model shares the one draw")], report.to_table()


def test_the_models_of_a_generated_run_share_their_draw(fresh):
    run = fresh(PLAN)
    draws = {m: json.loads((run / f"models/{m}/manifest.json").read_bytes())["draw"] for m in ("alpha", "beta", "gamma")}
    assert draws["alpha"] == draws["beta"] == draws["gamma"]
    assert verify_run(run, workers=1).ok
