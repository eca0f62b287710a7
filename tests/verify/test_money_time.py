"""Money and time that verify once accepted although they break the rules:
a ceiling event dated after the spend crossed it, or before, or one the
spend never reached (invariant 6), negative
costs (7), an attempt ending before it starts (5), records and calls without
their contract fields (1), attempts that outlived their deadline without
being abandoned or were "abandoned" short of it, and a budget_stop with
nothing stopped (2). Each is planted in a generated run and re-chained
(`reseal`), so it fails on the rule, not on the chains.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil

import pytest
from test_violations import PLAN, attempts, edit_log, read, replay_decisions, reseal, rewrite_record

from confirmatory.records.chain import dumps
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.verify import verify_run
from confirmatory.verify.clocks import ClockDrift

DEADLINE_PLAN = Plan(
    households=16, anchor_every_s=120, cap_usd=0.3, deadline=("alpha", 5), inconclusive=None, harness=None
)
LOG = "models/alpha/run.jsonl"


@pytest.fixture(scope="module")
def pristines(tmp_path_factory):
    made = {}

    def get(plan):
        if repr(plan) not in made:
            root = tmp_path_factory.mktemp("money") / "run"
            generate_run(root, plan)
            made[repr(plan)] = root
        return made[repr(plan)]

    return get


@pytest.fixture
def fresh(pristines, tmp_path):
    def copy(plan=PLAN):
        root = tmp_path / "run"
        shutil.copytree(pristines(plan), root)
        return root

    return copy


def fails_with(root, invariant, text):
    """The resealed run fails ``invariant`` with a violation saying ``text``."""
    reseal(root)
    report = verify_run(root, workers=1)
    assert invariant in report.failed(), report.to_table()
    messages = [v.message for v in report.result(invariant).first]
    assert any(text in m for m in messages), messages
    return report


def passes(root):
    reseal(root)
    report = verify_run(root, workers=1)
    assert report.ok, report.to_table()


def fix_totals(root):
    """Every model's close spend and the run's close total recomputed (conservation kept)."""
    man = json.loads((root / "manifest.json").read_bytes())
    total = man["spend_before_nusd"]
    for m in man["models"]:
        rel = f"models/{m}/run.jsonl"

        def close(objs):
            share = sum(o["cost_nusd"] for o in objs if o.get("event") in ("attempt", "late-cost"))
            for o in objs:
                if o.get("event") == "close":
                    o["spend_nusd"] = share
            return objs

        edit_log(root, rel, close)
        total += sum(o["cost_nusd"] for o in read(root / rel) if o.get("event") in ("attempt", "late-cost"))

    def run_close(objs):
        for o in objs:
            if o.get("event") == "close":
                o["spend_total_nusd"] = total

    edit_log(root, "run.jsonl", run_close)


def set_household_spend(objs, h):
    for o in objs:
        if o.get("event") == "household" and o["household"] == h:
            o["spend_nusd"] = sum(x["cost_nusd"] for x in attempts(objs, household=h))


def set_design(root, edit_text, edit_manifest):
    text = edit_text((root / "design.toml").read_text())
    (root / "design.toml").write_text(text)
    man = json.loads((root / "manifest.json").read_bytes())
    edit_manifest(man)
    man["design_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    (root / "manifest.json").write_bytes(dumps(man) + b"\n")
    return man


def test_the_generated_run_verifies(fresh):
    passes(fresh())


def test_the_generated_deadline_run_verifies(fresh):
    passes(fresh(DEADLINE_PLAN))


# -- invariant 6: the ceiling's crossing --------------------------------------------------


def _ceiling_at(root, ceiling, t_of, total_of=None):
    """The ceiling lowered to ``ceiling`` and one ceiling event, dated ``t_of(calls, man)`` where
    calls are every call's (end, cost) in time order. Its total is ``total_of(calls, man)``,
    by default what the runner writes: the running total at the count that crossed."""
    man = set_design(
        root,
        lambda s: s.replace("overall_cap_usd = 1000.0", f"overall_cap_usd = {ceiling / 1e9}"),
        lambda m: m.update(ceiling_nusd=ceiling),
    )
    calls = []
    for m in man["models"]:
        for a in attempts(read(root / f"models/{m}/run.jsonl")):
            rec = json.loads((root / "models" / m / a["record"]).read_bytes())
            calls += [(c["end"], c["cost_nusd"]) for c in rec["calls"]]
    calls.sort()
    total = (total_of or (lambda calls, man: _crossing(calls, man, ceiling)[1]))(calls, man)
    line = {"event": "ceiling", "t": t_of(calls, man), "total_nusd": total, "ceiling_nusd": ceiling}
    for rel in ["run.jsonl"] + [f"models/{m}/run.jsonl" for m in man["models"]]:
        edit_log(root, rel, lambda objs: objs[:-1] + [line] + objs[-1:])
    # a run that crossed its ceiling closes so (Run._finish)
    edit_log(
        root, "run.jsonl", lambda objs: [o.update(status="ceiling") for o in objs if o.get("event") == "close"] and None
    )
    return line


def _crossing(calls, man, ceiling):
    """The crossing call's end and the running total it took above the ceiling."""
    total = man["spend_before_nusd"]
    for end, cost in calls:
        total += cost
        if total > ceiling:
            return end, total
    raise AssertionError("the spend never crosses")


def test_a_ceiling_event_dated_after_the_spend_crossed_fails_invariant_6(fresh):
    root = fresh()
    # the ceiling is passed about mid-run; the event is dated after the last call ended
    ceiling = 1_000_000_000
    _ceiling_at(root, ceiling, lambda calls, man: calls[-1][0] + 0.5)
    fails_with(root, 6, "were counted before the ceiling event's t")


def test_a_ceiling_event_two_seconds_after_the_crossing_call_fails_invariant_6(fresh, monkeypatch):
    monkeypatch.setattr("confirmatory.verify.report.KEEP_PER_INVARIANT", 10**6)  # every violation kept
    root = fresh()
    ceiling = 1_000_000_000
    # 2 s after the crossing call's end: that call ended more than the 1 s
    # slack before the event, and with the calls before it is over the ceiling
    _ceiling_at(root, ceiling, lambda calls, man: _crossing(calls, man, ceiling)[0] + 2.0)
    fails_with(root, 6, "were counted before the ceiling event's t")


def test_the_ceiling_check_counts_only_calls_before_the_event_less_the_slack(fresh, monkeypatch):
    # the event 0.9 s after the crossing call's end (within the 1 s slack):
    # nothing counted before it passes the ceiling, and what it says was
    # counted had been (the attempts after it fail their own checks, not these)
    monkeypatch.setattr("confirmatory.verify.report.KEEP_PER_INVARIANT", 10**6)  # every violation kept
    root = fresh()
    ceiling = 1_000_000_000
    _ceiling_at(root, ceiling, lambda calls, man: _crossing(calls, man, ceiling)[0] + 0.9)
    reseal(root)
    report = verify_run(root, workers=1)
    messages = [v.message for v in report.result(6).first]
    assert not any("counted before the ceiling" in m or "had been counted" in m for m in messages), messages


def test_a_ceiling_event_the_spend_never_reached_fails_invariant_6(fresh):
    # A stop under the ceiling's pretext: the spend stays under the ceiling,
    # yet a ceiling event after the last call says it was passed. Before,
    # only the event's own total was compared with the ceiling.
    root = fresh()
    final = json.loads((root / "run.jsonl").read_text().splitlines()[-1])["spend_total_nusd"]
    ceiling = final + 10**6
    _ceiling_at(root, ceiling, lambda calls, man: calls[-1][0] + 0.5, lambda calls, man: ceiling + 1)
    report = fails_with(root, 6, "had been counted")
    assert 7 not in report.failed(), report.to_table()  # the totals themselves conserve


def test_a_ceiling_event_dated_before_its_crossing_call_fails_invariant_6(fresh, monkeypatch):
    # the right total, but dated 2 s before the call that took the spend
    # over the ceiling ended: the run stopped before its budget said so
    monkeypatch.setattr("confirmatory.verify.report.KEEP_PER_INVARIANT", 10**6)  # every violation kept
    root = fresh()
    ceiling = 1_000_000_000
    _ceiling_at(root, ceiling, lambda calls, man: _crossing(calls, man, ceiling)[0] - 2.0)
    fails_with(root, 6, "had been counted")


# -- invariants 7 and 5: costs never negative, an attempt never ends before it starts ------


def test_a_negative_call_cost_fails_invariant_7(fresh):
    root = fresh()
    objs = read(root / LOG)
    a = attempts(objs, household="h00000", arm="alone")[0]

    def neg(rec):
        rec["calls"][0]["cost_nusd"] = -1_000_000
        rec["cost_nusd"] = sum(c["cost_nusd"] for c in rec["calls"])

    rewrite_record(root, "alpha", a, neg)
    a["cost_nusd"] = json.loads((root / "models/alpha" / a["record"]).read_bytes())["cost_nusd"]
    set_household_spend(objs, "h00000")
    (root / LOG).write_bytes(b"".join(dumps(o) + b"\n" for o in objs))
    replay_decisions(root, "alpha")
    fix_totals(root)
    fails_with(root, 7, "call cost_nusd -1000000 is negative")


def test_a_negative_late_cost_fails_invariant_7(fresh):
    root = fresh(DEADLINE_PLAN)
    edit_log(root, LOG, lambda objs: [{**o, "cost_nusd": -777} if o.get("event") == "late-cost" else o for o in objs])
    fix_totals(root)
    fails_with(root, 7, "cost_nusd is -777, not a non-negative integer")


def test_an_attempt_that_ends_before_it_starts_fails_invariant_5(fresh):
    root = fresh()
    objs = read(root / LOG)
    a = attempts(objs, household="h00000", arm="alone")[0]
    s = a["start"]

    def back(rec):
        rec["end"] = s - 0.5
        rec["calls"] = [{**rec["calls"][0], "start": s - 0.9, "end": s - 0.8, "cost_nusd": rec["cost_nusd"]}]

    rewrite_record(root, "alpha", a, back)
    a["end"] = s - 0.5
    (root / LOG).write_bytes(b"".join(dumps(o) + b"\n" for o in objs))
    fails_with(root, 5, "before its start")


# -- invariant 1: a record's and its calls' contract fields --------------------------------


def _edit_record(root, fn):
    objs = read(root / LOG)
    a = attempts(objs, household="h00000", arm="alone")[0]
    rewrite_record(root, "alpha", a, fn)
    (root / LOG).write_bytes(b"".join(dumps(o) + b"\n" for o in objs))
    return a


@pytest.mark.parametrize("name", ["calls", "error", "answer", "status", "model"])
def test_a_record_without_a_contract_field_fails_invariant_1(fresh, name):
    root = fresh()
    _edit_record(root, lambda rec: rec.pop(name))
    fails_with(root, 1, f"record lacks {name}")


def test_a_record_without_calls_error_and_answer_fails_invariant_1(fresh):
    root = fresh()
    objs = read(root / LOG)
    a = attempts(objs, household="h00000", arm="alone")[0]

    def strip(rec):
        for k in ("calls", "error", "answer"):
            rec.pop(k)
        rec["cost_nusd"] = 0

    rewrite_record(root, "alpha", a, strip)
    a["cost_nusd"] = 0
    set_household_spend(objs, "h00000")
    (root / LOG).write_bytes(b"".join(dumps(o) + b"\n" for o in objs))
    replay_decisions(root, "alpha")
    fix_totals(root)
    fails_with(root, 1, "record lacks error, calls, answer")


@pytest.mark.parametrize("name", ["model", "household", "arm", "pass", "lane", "start", "end", "cost_nusd"])
def test_a_record_that_disagrees_with_its_attempt_line_on_one_field_fails_invariant_1(fresh, name):
    """Each field a record shares with its attempt line, changed in the
    record alone (its line's hash follows it): the record is no longer the
    attempt's. Also with the record lacking another field, which verify
    reads by another path."""
    for lacking in (None, "answer"):
        root = fresh()

        def change(rec):
            v = rec[name]
            rec[name] = v + "x" if isinstance(v, str) else v + 1
            if lacking:  # noqa: B023
                rec.pop(lacking)  # noqa: B023

        _edit_record(root, change)
        fails_with(root, 1, "record disagrees with its attempt line")
        shutil.rmtree(root)


@pytest.mark.parametrize("name", ["kind", "start", "end", "cost_nusd", "finish_reason", "error"])
def test_a_call_without_a_contract_field_fails_invariant_1(fresh, name):
    root = fresh()
    _edit_record(root, lambda rec: rec["calls"][0].pop(name))
    fails_with(root, 1, f"call lacks {name}")


def test_a_call_of_no_known_kind_fails_invariant_1(fresh):
    root = fresh()
    _edit_record(root, lambda rec: rec["calls"][0].update(kind="telepathy"))
    fails_with(root, 1, "call kind 'telepathy' is not one of")


def test_a_call_that_is_not_an_object_fails_invariant_1(fresh):
    root = fresh()
    _edit_record(root, lambda rec: rec["calls"].append(["chat"]))
    fails_with(root, 1, "a call that is not an object")


def test_an_error_without_its_fields_fails_invariant_1(fresh):
    root = fresh()
    objs = read(root / LOG)
    a = [x for x in attempts(objs) if x["signature"] is not None][0]

    def strip(rec):
        rec["error"].pop("mro")

    rewrite_record(root, "alpha", a, strip)
    (root / LOG).write_bytes(b"".join(dumps(o) + b"\n" for o in objs))
    fails_with(root, 1, "record error is not null or an object with type, mro")


# -- invariant 2: the deadline ----------------------------------------------------------


def test_attempts_past_a_short_deadline_not_abandoned_fail_invariant_2(fresh):
    root = fresh()
    set_design(
        root,
        lambda s: s.replace("attempt_deadline_s = 3600", "attempt_deadline_s = 10"),
        lambda m: m["rules"].update(attempt_deadline_s=10),
    )
    fails_with(root, 2, "past the deadline of 10 s")


def test_attempts_within_the_deadline_and_its_slack_pass(fresh):
    # rungen's attempts last 4-20 s: a 20 s deadline leaves them (its 5 s of
    # watcher slack included) clear of it
    root = fresh()
    set_design(
        root,
        lambda s: s.replace("attempt_deadline_s = 3600", "attempt_deadline_s = 16"),
        lambda m: m["rules"].update(attempt_deadline_s=16),
    )
    passes(root)


def test_a_forward_clock_drift_in_host_samples_widens_the_deadline(fresh):
    # the wall clock ran 10 s ahead of the monotonic one (host.jsonl's wall -
    # mono rises by 10): a 10 s deadline's watcher may have let 20 s pass
    root = fresh()
    set_design(
        root,
        lambda s: s.replace("attempt_deadline_s = 3600", "attempt_deadline_s = 10"),
        lambda m: m["rules"].update(attempt_deadline_s=10),
    )
    samples = [k for k, o in enumerate(read(root / "host.jsonl")) if o.get("event") == "sample"]
    cut = samples[len(samples) // 2]
    edit_log(
        root,
        "host.jsonl",
        lambda objs: [
            {**o, "mono": o["mono"] - 10.0} if k >= cut and o.get("event") == "sample" else o
            for k, o in enumerate(objs)
        ],
    )
    passes(root)
    # ... and so when host.jsonl is read by span workers, whose drifts are joined
    report = verify_run(root, workers=3)
    assert report.ok, report.to_table()


def test_a_deadline_record_short_of_the_deadline_fails_invariant_2(fresh):
    root = fresh(DEADLINE_PLAN)
    objs = read(root / LOG)
    a = [o for o in attempts(objs) if o["action"] == "stop"][0]
    new_end = round(max(o["end"] for o in attempts(objs) if o is not a) + 3.0, 6)

    def shorten(rec):
        rec["end"] = new_end
        for i, c in enumerate(rec["calls"]):
            c["start"], c["end"] = a["start"] + 1 + 100 * i, a["start"] + 100 * (i + 1)

    rewrite_record(root, "alpha", a, shorten)
    for o in objs:
        if o is a:
            o["end"] = new_end
        elif o.get("event") in ("trigger", "stop", "late-cost"):
            o["t"] = new_end + {"trigger": 0.001, "stop": 0.002, "late-cost": 0.003}[o["event"]]
        elif o.get("event") == "household" and o["household"] == a["household"]:
            o["t"] = new_end + 0.004
    (root / LOG).write_bytes(b"".join(dumps(o) + b"\n" for o in objs))
    fails_with(root, 2, "under the deadline of 3600 s")


# -- invariant 2: budget_stop needs a halt ---------------------------------------------------


def test_a_budget_stop_with_nothing_stopped_fails_invariant_2(fresh):
    root = fresh()
    objs = read(root / LOG)
    a = attempts(objs, household="h00013", arm="alone", **{"pass": 0})[0]

    def relabel(rec):
        rec["status"] = "budget_stop"
        rec["error"] = None
        for c in rec["calls"]:
            c["error"] = None

    rewrite_record(root, "alpha", a, relabel)
    a.update({"class": "stopped", "action": "keep", "signature": None})
    (root / "models/alpha/records/h00013/alone/1.json").unlink()
    objs = [o for o in objs if not (o.get("event") == "attempt" and o["household"] == "h00013" and o["pass"] == 1)]
    set_household_spend(objs, "h00013")
    (root / LOG).write_bytes(b"".join(dumps(o) + b"\n" for o in objs))
    replay_decisions(root, "alpha")
    fix_totals(root)
    fails_with(root, 2, "budget_stop at")


def test_a_budget_stop_within_a_second_before_its_models_stop_passes_that_check(fresh):
    # a stop set by another thread (stop_model) is written a moment after the
    # conversation saw it: a budget_stop ending 0.5 s before its model's stop
    # line is what the runner can write
    root = fresh()
    rel = "models/gamma/run.jsonl"
    objs = read(root / rel)
    a = attempts(objs, household="h00006", arm="alone", **{"pass": 0})[0]
    assert a["class"] == "ok"

    def relabel(rec):
        rec["status"] = "budget_stop"

    rewrite_record(root, "gamma", a, relabel)
    a.update({"class": "stopped", "action": "keep"})
    objs.insert(-1, {"event": "stop", "cause": "pool", "scope": "model", "t": a["end"] + 0.5})
    (root / rel).write_bytes(b"".join(dumps(o) + b"\n" for o in objs))
    reseal(root)
    report = verify_run(root, workers=1)
    assert not any("budget_stop at" in v.message for v in report.result(2).first), report.to_table()
    # 1.5 s before it: nothing had stopped the model when it ended
    objs[-2]["t"] = a["end"] + 1.5
    (root / rel).write_bytes(b"".join(dumps(o) + b"\n" for o in objs))
    fails_with(root, 2, "budget_stop at")


# -- the host samples' clock drift, joined from spans -----------------------------------------


def test_clock_drift_joined_from_spans_is_the_drift_of_the_whole():
    rng = random.Random(7)
    for _ in range(200):
        pts = [(rng.uniform(0, 100), rng.uniform(0, 100)) for _ in range(rng.randint(0, 12))]
        whole = ClockDrift()
        for w, m in pts:
            whole.add(w, m)
        want = max(
            [0.0] + [(pts[k][0] - pts[k][1]) - (pts[j][0] - pts[j][1]) for k in range(len(pts)) for j in range(k)]
        )
        assert whole.rise == pytest.approx(want)
        cuts = sorted(rng.sample(range(len(pts) + 1), min(3, len(pts) + 1)))
        joined = ClockDrift()
        for a, b in zip([0, *cuts], [*cuts, len(pts)]):
            part = ClockDrift()
            for w, m in pts[a:b]:
                part.add(w, m)
            joined = joined.then(part)
        assert joined.rise == pytest.approx(want)


def test_the_unseen_part_of_a_step_back_joined_from_spans_is_the_wholes():
    # the largest monotonic gap before a sample that reports a step back, in
    # line order, whatever spans the samples are cut into (their seams too)
    rng = random.Random(11)
    for _ in range(300):
        n = rng.randint(0, 12)
        mono = sorted(rng.uniform(0, 100) for _ in range(n))
        back = [rng.choice((0.0, 0.0, rng.uniform(0.01, 5))) for _ in range(n)]
        want = max([0.0] + [mono[k] - mono[k - 1] for k in range(1, n) if back[k] > 0])
        whole = ClockDrift()
        for m, b in zip(mono, back):
            whole.add(1e9 + m, m, b)
        assert whole.unseen == pytest.approx(want)
        cuts = sorted(rng.sample(range(n + 1), min(3, n + 1)))
        joined = ClockDrift()
        for a, b in zip([0, *cuts], [*cuts, n]):
            part = ClockDrift()
            for m, s in zip(mono[a:b], back[a:b]):
                part.add(1e9 + m, m, s)
            joined = joined.then(part)
        assert joined.unseen == pytest.approx(want)
