"""Fake runs, one or more per rule (docs/RULES.md, docs/RUN.md), each checked by the verifier.

Every run here is real: lane threads, a real engine pool of processes (or
none where a test needs none), fsynced hash-chained logs, a real sampler with
fake readers. Failures are planted through the fault plan in the household
payload (confirmatory.testing.fakes).
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from runhelpers import events, execute, in_background, make_run, of, record, verified

from confirmatory.engine.resume import request_resume

FAST = {"engine_factory": "confirmatory.testing.fakes:null_engine"}


def test_a_clean_run_completes_and_verifies(tmp_path):
    result, run_dir = execute(tmp_path, households=4, models=2)
    assert result.status == "completed"
    verified(run_dir)
    for m in ("m0", "m1"):
        ev = events(run_dir, m)
        assert len(of(ev, "attempt")) == 4 * 2
        assert all(h["finished"] for h in of(ev, "household"))
        assert {e["reason"] for e in of(ev, "lane-end")} == {"done"}
        for lane in (0, 1):
            mine = sorted((a["start"], a["end"]) for a in of(ev, "attempt", lane=lane))
            assert all(prev_end <= start for (_, prev_end), (start, _) in zip(mine, mine[1:]))


def test_a_provider_failure_is_rerun_in_the_next_pass(tmp_path):
    hh = [{"id": "hh-000", "plan": {"calculator/0": "provider"}}, {"id": "hh-001"}]
    result, run_dir = execute(tmp_path, households=hh, models=1)
    verified(run_dir)
    ev = of(events(run_dir, "m0"), "attempt", household="hh-000", arm="calculator")
    assert [(e["pass"], e["class"], e["action"]) for e in sorted(ev, key=lambda e: e["pass"])] == [
        (0, "provider", "rerun"),
        (1, "ok", "keep"),
    ]
    # The record it replaces was on disk before the rerun started.
    first = record(run_dir, "m0", "hh-000", "calculator", 0)
    second = record(run_dir, "m0", "hh-000", "calculator", 1)
    assert first["end"] <= second["start"]
    assert first["error"]["type"] == "litellm.exceptions.RateLimitError"


@pytest.mark.slow
def test_a_rerun_pass_waits_the_designs_rerun_wait_doubled_each_pass(tmp_path):
    """A provider that refused a call is not asked again at once: pass p
    starts rerun_wait_s * 2**(p-1) after pass p-1 ended (rules.rerun_wait_s)."""
    hh = [{"id": "hh-000", "plan": {"calculator/0": "provider", "calculator/1": "provider"}}]
    result, run_dir = execute(tmp_path, households=hh, models=1, rules={"rerun_wait_s": 0.4}, **FAST)
    verified(run_dir)
    ev = sorted(of(events(run_dir, "m0"), "attempt", household="hh-000"), key=lambda e: e["start"])
    passes = {}
    for e in ev:
        passes.setdefault(e["pass"], []).append(e)
    assert sorted(passes) == [0, 1, 2] and [e["arm"] for e in passes[2]] == ["calculator"]
    for p, want in ((1, 0.4), (2, 0.8)):
        gap = min(e["start"] for e in passes[p]) - max(e["end"] for e in passes[p - 1])
        assert gap >= want, (p, gap)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["rules"]["rerun_wait_s"] == 0.4


@pytest.mark.slow
def test_a_stop_ends_a_lanes_wait_before_a_rerun_pass_at_once(tmp_path):
    """A lane waiting 20 s before its rerun pass stops with its model:
    the household ends cut short at the stop, no rerun starts."""
    hh = [
        {"id": "hh-000", "plan": {"alone/0": "provider", "calculator/0": "provider"}},
        {"id": "hh-001", "slow_s": 1.0, "plan": {"alone/0": ["slow", "harness"], "calculator/0": ["slow", "harness"]}},
    ]
    result, run_dir = execute(tmp_path, households=hh, models=1, rules={"rerun_wait_s": 20}, **FAST)
    verified(run_dir)
    ev = events(run_dir, "m0")
    (stop,) = of(ev, "stop")
    assert stop["cause"] == "harness"
    assert not of(ev, "attempt", household="hh-000", **{"pass": 1})
    (waited,) = of(ev, "household", household="hh-000")
    assert waited["finished"] is False
    last_end = max(a["end"] for a in of(ev, "attempt", household="hh-000"))
    # it ended at the stop, not 20 s after its pass
    assert waited["t"] - stop["t"] < 5 and waited["t"] - last_end < 10, (waited, stop)


def test_an_arm_gets_at_most_two_reruns_and_the_last_attempt_stands(tmp_path):
    hh = [{"id": "hh-000", "plan": {"alone/*": "unavailable"}}]
    result, run_dir = execute(tmp_path, households=hh, models=1, **FAST)
    verified(run_dir)
    ev = sorted(of(events(run_dir, "m0"), "attempt", arm="alone"), key=lambda e: e["pass"])
    assert [(e["pass"], e["class"], e["action"]) for e in ev] == [
        (0, "provider", "rerun"),
        (1, "provider", "rerun"),
        (2, "provider", "keep"),
    ]


def test_a_model_failure_is_kept_and_not_rerun(tmp_path):
    hh = [{"id": "hh-000", "plan": {"alone/0": "model", "calculator/0": "truncated"}}]
    result, run_dir = execute(tmp_path, households=hh, models=1, **FAST)
    verified(run_dir)
    ev = of(events(run_dir, "m0"), "attempt")
    assert {(e["arm"], e["class"], e["action"]) for e in ev} == {
        ("alone", "model", "keep"),
        ("calculator", "model", "keep"),
    }


def test_an_operator_failure_pauses_until_a_fresh_resume_and_a_stale_one_is_rejected(tmp_path):
    hh = [{"id": "hh-000", "plan": {"calculator/0": "operator"}}, {"id": "hh-001"}, {"id": "hh-002"}]
    run = make_run(tmp_path, households=hh, models=1, **FAST)
    run.start()
    m = run.models["m0"]

    def operator():
        while not m.paused:
            time.sleep(0.01)
        pause_t = m.pause_t
        request_resume(run.run_dir, "m0", wall=pause_t - 30.0)  # written before the pause began
        while not any(e.get("event") == "resume" for e in events(run.run_dir, "m0")):
            time.sleep(0.01)
        assert m.paused, "a stale resume must not resume the model"
        request_resume(run.run_dir, "m0")

    helper = in_background(operator)
    result = run.wait()
    helper.join(5)
    verified(run.run_dir)
    ev = events(run.run_dir, "m0")
    resumes = of(ev, "resume")
    assert [r["accepted"] for r in resumes] == [False, True]
    pause = of(ev, "pause")[0]
    assert (pause["household"], pause["arm"], pause["pass"]) == ("hh-000", "calculator", 0)
    rerun = of(ev, "attempt", household="hh-000", arm="calculator", **{"pass": 1})
    assert rerun and rerun[0]["start"] > resumes[1]["t"]
    assert result.status == "completed"


@pytest.mark.slow
def test_a_harness_failure_stops_its_model_within_five_seconds(tmp_path):
    # m0's other households take 1 s an attempt and the failing conversation
    # takes 0.3 s to fail, so m0's other lane is in the middle of an attempt
    # (with more arms to run) when the trigger comes: an attempt started
    # after it is then the lane's doing, not the timing's. (With the trigger
    # a few ms in, a loaded machine let the other lane reach its first
    # attempt only after the stop, and a lane that ignored the stop passed.)
    slow = {f"m0:{arm}/0": "slow" for arm in ("alone", "calculator", "explain")}
    failing = {"m0:alone/0": ["slow", "harness"]}
    hh = [
        {"id": f"hh-{i:03d}", "slow_s": 0.3 if i == 0 else 1.0, "plan": failing if i == 0 else slow} for i in range(6)
    ]
    result, run_dir = execute(tmp_path, households=hh, models=2, arms=("alone", "calculator", "explain"), **FAST)
    verified(run_dir)
    ev = events(run_dir, "m0")
    (trigger,) = of(ev, "trigger")
    (stop,) = of(ev, "stop")
    assert trigger["cause"] == stop["cause"] == "harness" and stop["scope"] == "model"
    assert 0 <= stop["t"] - trigger["t"] < 5
    attempts = of(ev, "attempt")
    # The premise: another household's attempt was under way at the trigger.
    assert any(a["household"] != "hh-000" and a["start"] < trigger["t"] < a["end"] for a in attempts), attempts
    assert all(a["start"] < trigger["t"] for a in attempts)
    # The other model is not touched by m0's stop.
    assert not of(events(run_dir, "m1"), "stop")
    assert result.status == "stopped" and result.stop_cause == "harness"


def test_one_inconclusive_signature_in_more_than_five_households_stops_the_model(tmp_path):
    hh = [{"id": f"hh-{i:03d}", "plan": {"alone/*": "inconclusive"}} for i in range(9)]
    result, run_dir = execute(
        tmp_path, households=hh, models=1, arms=("alone",), rules={"max_reruns_per_arm": 0}, **FAST
    )
    verified(run_dir)
    ev = events(run_dir, "m0")
    triggers = of(ev, "trigger")
    assert triggers and {t["cause"] for t in triggers} == {"inconclusive"}
    assert of(ev, "stop", cause="inconclusive")
    inconclusive = of(ev, "attempt", **{"class": "inconclusive"})
    # When the first trigger came, more than 5 households had an inconclusive
    # attempt with that signature; the stop then kept the rest from running.
    first = min(t["t"] for t in triggers)
    assert len({a["household"] for a in inconclusive if a["end"] <= first}) >= 6
    assert len({a["household"] for a in inconclusive}) < 9


def test_an_attempt_past_its_deadline_is_abandoned_and_its_late_costs_counted(tmp_path):
    hh = [{"id": "hh-000", "plan": {"alone/0": "hang"}}, {"id": "hh-001"}]
    result, run_dir = execute(
        tmp_path, households=hh, models=1, arms=("alone",), rules={"attempt_deadline_s": 0.5}, **FAST
    )
    verified(run_dir)
    ev = events(run_dir, "m0")
    assert of(ev, "trigger", cause="deadline") and of(ev, "stop", cause="deadline")
    rec = record(run_dir, "m0", "hh-000", "alone", 0)
    assert rec["status"] == "deadline" and rec["error"]["type"] == "confirmatory.AttemptDeadline"
    late = of(ev, "late-cost")
    assert late, "the conversation spent after its deadline"
    (close,) = of(events(run_dir), "close")
    attempts = sum(a["cost_nusd"] for a in of(ev, "attempt"))
    assert close["spend_total_nusd"] == attempts + sum(e["cost_nusd"] for e in late)


def test_a_dead_engine_pool_stops_its_model_with_cause_pool(tmp_path):
    hh = [{"id": "hh-000", "plan": {"calculator/0": "pool-kill"}}, {"id": "hh-001"}, {"id": "hh-002"}]
    result, run_dir = execute(tmp_path, households=hh, models=1)
    verified(run_dir)
    ev = events(run_dir, "m0")
    assert of(ev, "stop", cause="pool")
    assert result.stop_cause == "pool"


def test_crossing_the_ceiling_mid_pass_ends_conversations_under_way(tmp_path):
    hh = [
        {"id": "hh-000", "plan": {"alone/0": "hang"}},
        {"id": "hh-001", "plan": {"alone/0": ["slow", "expensive"]}, "slow_s": 0.3, "expensive_usd": 2.0},
    ]
    result, run_dir = execute(
        tmp_path, households=hh, models=1, arms=("alone", "calculator"), overall_cap_usd=1.0, margin_usd=0.5, **FAST
    )
    verified(run_dir)
    assert result.status == "ceiling"
    run_ev = events(run_dir)
    (ceiling,) = of(run_ev, "ceiling")
    assert ceiling["total_nusd"] > ceiling["ceiling_nusd"]
    ev = events(run_dir, "m0")
    strip = lambda e: {k: v for k, v in e.items() if k not in ("seq", "prev")}  # noqa: E731
    assert [strip(e) for e in of(ev, "ceiling")] == [strip(ceiling)]
    hang = record(run_dir, "m0", "hh-000", "alone", 0)
    assert hang["status"] == "budget_stop"
    # The crossing is logged at its instant: inside the call that crossed it.
    crossing = record(run_dir, "m0", "hh-001", "alone", 0)
    assert crossing["start"] <= ceiling["t"] <= crossing["end"]
    assert all(a["start"] < ceiling["t"] for a in of(ev, "attempt"))
    assert all(d["t"] < ceiling["t"] for d in events(run_dir, "m0", "admission.jsonl") if d["event"] == "decision")


def test_admission_refuses_past_the_cap_and_then_refuses_forever(tmp_path):
    # Each household costs 0.002 (2 arms x 0.001); reserve 0.003; cap 0.008.
    result, run_dir = execute(
        tmp_path, households=8, models=[{"name": "m0", "cap_usd": 0.008, "reserve_usd": 0.003}], **FAST
    )
    verified(run_dir)
    decisions = sorted(of(events(run_dir, "m0", "admission.jsonl"), "decision"), key=lambda d: d["t"])
    admits = [d["admit"] for d in decisions]
    assert False in admits
    first_refusal = admits.index(False)
    assert not any(admits[first_refusal:])
    # Each decision saw exactly the spend of the households that had ended before it.
    ends = of(events(run_dir, "m0"), "household")
    for d in decisions:
        assert d["finished_nusd"] == sum(h["spend_nusd"] for h in ends if h["t"] < d["t"] and h["finished"])
    assert {e["reason"] for e in of(events(run_dir, "m0"), "lane-end")} == {"refused"}


def test_a_household_cut_short_by_a_stop_is_written_unfinished(tmp_path):
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.02, "plan": {"alone/0": "harness"} if i == 3 else {}} for i in range(8)]
    result, run_dir = execute(tmp_path, households=hh, models=1, **FAST)
    verified(run_dir)
    ev = events(run_dir, "m0")
    unfinished = [h for h in of(ev, "household") if not h["finished"]]
    assert any(h["household"] == "hh-003" for h in unfinished)


def test_an_interrupt_from_inside_a_provider_call_stops_every_lane(tmp_path):
    hh = [{"id": f"hh-{i:03d}", "plan": {"m0:alone/0": "interrupt"} if i == 1 else {}} for i in range(6)]
    result, run_dir = execute(tmp_path, households=hh, models=2, install_signals=True, **FAST)
    verified(run_dir)
    assert result.status == "stopped" and result.stop_cause == "interrupt"
    (stop,) = of(events(run_dir), "stop")
    assert stop["scope"] == "run" and stop["cause"] == "interrupt"
    for m in ("m0", "m1"):
        assert of(events(run_dir, m), "stop", cause="interrupt")
    # The conversation that received the signal ended at its next turn.
    rec = record(run_dir, "m0", "hh-001", "alone", 0)
    assert rec["status"] == "budget_stop"


def test_the_stop_line_names_the_first_of_two_signals(tmp_path):
    # Both signals are sent from the main thread, so both handlers have run
    # before the main loop's first look: the stop line must name the first
    # (SIGTERM), not the one handled last.
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.2} for i in range(4)]
    run = make_run(tmp_path, households=hh, models=1, install_signals=True, **FAST)
    run.start()
    assert callable(signal.getsignal(signal.SIGTERM)), "the run did not take SIGTERM"
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGINT)
    result = run.wait()
    verified(run.run_dir)
    assert result.status == "stopped" and result.stop_cause == "interrupt"
    (stop,) = of(events(run.run_dir), "stop")
    assert (stop["cause"], stop.get("detail")) == ("interrupt", f"signal {int(signal.SIGTERM)}"), stop


@pytest.mark.parametrize("lanes", [1, 2])
def test_each_lane_takes_its_households_in_draw_order(tmp_path, lanes):
    result, run_dir = execute(tmp_path, households=7, models=[{"name": "m0", "lanes": lanes}], **FAST)
    verified(run_dir)
    import json

    manifest = json.loads((run_dir / "models/m0/manifest.json").read_text())
    decisions = of(events(run_dir, "m0", "admission.jsonl"), "decision")
    for lane in range(lanes):
        mine = [d["household"] for d in sorted(decisions, key=lambda d: d["t"]) if d["lane"] == lane]
        assert mine == [h for k, h in enumerate(manifest["draw"]) if k % lanes == lane]


def _when_running(run, key, action, after=None):
    """Do ``action`` once attempt ``key`` of m0 is under way (and ``after`` once it has ended)."""
    m = run.models["m0"]

    def watch():
        while key not in m.running:
            time.sleep(0.002)
        action()
        while key in m.running:
            time.sleep(0.002)
        if after:
            after()

    return in_background(watch)


def test_memory_pressure_inside_an_attempt_makes_it_host_and_reruns_it(tmp_path):
    from confirmatory.testing.hostfakes import ScriptedReaders

    readers = ScriptedReaders([0.0])
    hh = [{"id": "hh-000", "plan": {"alone/0": "slow"}, "slow_s": 0.4}]
    run = make_run(tmp_path, households=hh, models=1, arms=("alone",), host_readers=readers, **FAST)
    run.start()
    watcher = _when_running(
        run, "hh-000/alone/0", lambda: readers.set_pressure(80.0), lambda: readers.set_pressure(0.0)
    )
    run.wait()
    watcher.join(5)
    verified(run.run_dir)
    first = of(events(run.run_dir, "m0"), "attempt", **{"pass": 0})[0]
    assert (first["class"], first["action"]) == ("host", "rerun")
    assert of(events(run.run_dir, "m0"), "attempt", **{"pass": 1})


def test_a_sampler_stalled_past_max_gap_during_an_attempt_makes_it_host(tmp_path):
    from confirmatory.testing.hostfakes import ScriptedReaders, Stall

    readers = ScriptedReaders([0.0])
    hh = [{"id": "hh-000", "plan": {"alone/0": "slow"}, "slow_s": 0.3}]
    run = make_run(
        tmp_path, households=hh, models=1, arms=("alone",), host_readers=readers, host={"max_gap_s": 0.5}, **FAST
    )
    run.start()
    watcher = _when_running(run, "hh-000/alone/0", lambda: readers.set_script(Stall(0.8), 0.0))
    run.wait()
    watcher.join(5)
    verified(run.run_dir)
    first = of(events(run.run_dir, "m0"), "attempt", **{"pass": 0})[0]
    assert (first["class"], first["action"]) == ("host", "rerun")
