"""Procedure violations planted in otherwise valid records, freshly re-chained
and re-anchored: each fails the invariant it breaks, by number.

`reseal` is what a forger with write access would do after editing: recompute
every chain from its manifest's seed and rewrite every anchor to match. So
what fails below fails on the rules, not on the chains.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from confirmatory.core import merkle, rules
from confirmatory.records.chain import dumps, sha256_hex
from confirmatory.records.layout import load_layout
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.verify import verify_run

PLAN = Plan(households=16, anchor_every_s=120, cap_usd=0.3)


def read(path):
    return [json.loads(x) for x in path.read_bytes().split(b"\n")[:-1]]


def write_chain(path, objs, seed):
    out, head = [], seed
    for i, obj in enumerate(objs):
        line = dumps({**obj, "seq": i, "prev": head})
        out.append(line + b"\n")
        head = sha256_hex(line)
    path.write_bytes(b"".join(out))
    return len(objs), head


def reseal(root):
    """Re-chain every log from its manifest's seed and rewrite every anchor to match."""
    layout = load_layout(root)
    heads: dict[str, list[str]] = {}
    leaves: dict[str, list[bytes]] = {}
    for spec in layout.logs():
        if spec.relpath in ("anchors.jsonl", "anchor-pushes.jsonl"):
            continue
        objs = read(root / spec.relpath)
        write_chain(root / spec.relpath, objs, spec.seed)
        hs, head = [spec.seed], spec.seed
        lines = (root / spec.relpath).read_bytes().split(b"\n")[:-1]
        for line in lines:
            head = sha256_hex(line)
            hs.append(head)
        heads[spec.relpath] = hs
        leaves[spec.relpath] = merkle.leaf_hashes(lines)
    seeds = {s.relpath: s.seed for s in layout.logs()}
    anchors = read(root / "anchors.jsonl")
    for k, a in enumerate(anchors):
        if a.get("event") != "anchor":
            continue
        final = k == len(anchors) - 1
        for rel, fixed in a["logs"].items():
            n = len(heads[rel]) - 1 if final else min(fixed["lines"], len(heads[rel]) - 1)
            a["logs"][rel] = {"lines": n, "head": heads[rel][n], "root": merkle.root(leaves[rel][:n]).hex()}
        a["manifests"] = {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest() for rel in a["manifests"]}
    write_chain(root / "anchors.jsonl", anchors, seeds["anchors.jsonl"])
    write_chain(root / "anchor-pushes.jsonl", read(root / "anchor-pushes.jsonl"), seeds["anchor-pushes.jsonl"])


def replay_decisions(root, model, halt_t=float("inf")):
    """Rewrite a model's decisions' state and admit as the replay computes them
    from the household ends (what a forger does after moving one): so that
    only the procedure's checks, not the replay's, can fail."""
    run = read(root / f"models/{model}/run.jsonl")
    mf = json.loads((root / f"models/{model}/manifest.json").read_bytes())
    leaves = sorted(
        (o["t"] if o["finished"] is True else halt_t, o["spend_nusd"] if o["finished"] is True else 0)
        for o in run
        if o.get("event") == "household"
    )
    adm = read(root / f"models/{model}/admission.jsonl")
    decs = sorted((o for o in adm if o.get("event") == "decision"), key=lambda o: o["t"])
    i = fin = left = admitted = 0
    refused = False
    for d in decs:
        while i < len(leaves) and leaves[i][0] < d["t"]:
            fin += leaves[i][1]
            left += 1
            i += 1
        d["finished_nusd"], d["under_way"] = fin, admitted - left
        d["admit"] = rules.admit(
            refused_before=refused,
            finished_nusd=fin,
            under_way=admitted - left,
            reserve_nusd=mf["reserve_nusd"],
            cap_nusd=mf["cap_nusd"],
        )
        admitted += d["admit"]
        refused = refused or not d["admit"]
    opens = [o for o in adm if o.get("event") != "decision"]
    (root / f"models/{model}/admission.jsonl").write_bytes(b"".join(dumps(o) + b"\n" for o in opens + decs))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("violations") / "run"
    generate_run(root, PLAN)
    return root


@pytest.fixture
def run(pristine, tmp_path):
    root = tmp_path / "run"
    shutil.copytree(pristine, root)
    return root


def edit_log(root, rel, fn):
    objs = read(root / rel)
    objs = fn(objs) or objs
    (root / rel).write_bytes(b"".join(dumps(o) + b"\n" for o in objs))


def attempts(objs, **match):
    return [o for o in objs if o.get("event") == "attempt" and all(o.get(k) == v for k, v in match.items())]


def rewrite_record(root, model, attempt, fn):
    path = root / "models" / model / attempt["record"]
    rec = json.loads(path.read_bytes())
    fn(rec)
    data = dumps(rec) + b"\n"
    path.write_bytes(data)
    attempt["record_sha256"] = hashlib.sha256(data).hexdigest()


def fails(root, invariant):
    reseal(root)
    report = verify_run(root)
    assert invariant in report.failed(), report.to_table()
    return report


def test_the_resealed_pristine_run_still_verifies(run):
    reseal(run)
    assert verify_run(run).ok


def test_an_attempt_line_deleted_leaves_its_record_without_a_line_invariant_1(run):
    edit_log(run, "models/alpha/run.jsonl", lambda objs: [o for o in objs if o is not attempts(objs)[3]])
    fails(run, 1)


def test_a_class_that_does_not_match_new_host_evidence_fails_invariant_2(run):
    rel = "models/alpha/run.jsonl"
    ok = [o for o in attempts(read(run / rel), **{"class": "ok"})][5]

    def add_pressure(objs):
        t = (ok["start"] + ok["end"]) / 2
        i = next(k for k, o in enumerate(objs) if o["t"] > t)
        sample = {**objs[1], "t": t, "mem_pressure": 93.0}
        return objs[:i] + [sample] + objs[i:]

    edit_log(run, "host.jsonl", add_pressure)
    fails(run, 2)


def test_a_relabelled_class_fails_invariant_2(run):
    def relabel(objs):
        attempts(objs, **{"class": "host"})[0]["class"] = "provider"

    edit_log(run, "models/alpha/run.jsonl", relabel)
    fails(run, 2)


def test_an_extra_rerun_fails_invariant_3(run):
    rel = "models/alpha/run.jsonl"

    def extra(objs):
        house = next(o for o in objs if o.get("event") == "household" and o["finished"])
        last = attempts(objs, household=house["household"])[-1]
        new = {
            **last,
            "pass": last["pass"] + 1,
            "start": last["end"] + 1e-4,
            "end": last["end"] + 2e-4,
            "cost_nusd": 0,
            "record": f"records/{house['household']}/{last['arm']}/{last['pass'] + 1}.json",
        }
        rec = json.loads((run / "models/alpha" / last["record"]).read_bytes())
        rec.update(cost_nusd=0, start=new["start"], end=new["end"], calls=[], **{"pass": new["pass"]})
        data = dumps(rec) + b"\n"
        (run / "models/alpha" / new["record"]).write_bytes(data)
        new["record_sha256"] = hashlib.sha256(data).hexdigest()
        objs.insert(objs.index(last) + 1, new)

    edit_log(run, rel, extra)
    fails(run, 3)


def test_a_household_taken_on_the_wrong_lane_fails_invariant_3(run):
    def move(objs):
        house = next(o for o in objs if o.get("event") == "household")
        house["lane"] = 1 - house["lane"]

    edit_log(run, "models/beta/run.jsonl", move)
    fails(run, 3)


def test_a_decision_that_breaks_the_admission_rule_fails_invariant_4(run):
    def admit_refused(objs):
        next(o for o in objs if o.get("event") == "decision" and not o["admit"])["admit"] = True

    edit_log(run, "models/alpha/admission.jsonl", admit_refused)
    fails(run, 4)


def test_a_decision_with_a_wrong_under_way_count_fails_invariant_4(run):
    def miscount(objs):
        [o for o in objs if o.get("event") == "decision"][4]["under_way"] += 1

    edit_log(run, "models/beta/admission.jsonl", miscount)
    fails(run, 4)


def test_a_call_outside_its_attempt_fails_invariant_5(run):
    rel = "models/gamma/run.jsonl"

    def early_call(objs):
        a = attempts(objs)[2]

        def shift(rec):
            rec["calls"][0]["start"] = a["start"] - 5

        rewrite_record(run, "gamma", a, shift)

    edit_log(run, rel, early_call)
    fails(run, 5)


def test_an_attempt_after_a_run_stop_fails_invariant_6(run):
    first = attempts(read(run / "models/alpha/run.jsonl"))[0]

    def stop(objs):
        objs.insert(1, {"event": "stop", "cause": "interrupt", "scope": "run", "t": first["end"]})

    edit_log(run, "run.jsonl", stop)
    fails(run, 6)


def test_an_attempt_during_a_pause_fails_invariant_6(run):
    def early_resume(objs):
        pause = next(o for o in objs if o.get("event") == "pause")
        accepted = next(o for o in objs if o.get("event") == "resume" and o["accepted"])
        accepted["t"] = accepted["t"] + 3600  # the pause lasted longer than the attempts waited
        accepted["request_t"] = pause["t"] + 1

    edit_log(run, "models/beta/run.jsonl", early_resume)

    def request(objs):
        objs[-1]["t"] = next(o for o in read(run / "models/beta/run.jsonl") if o.get("event") == "pause")["t"] + 1

    edit_log(run, "resume.jsonl", request)
    fails(run, 6)


def test_an_attempt_inside_two_pauses_fails_invariant_6_for_each(run):
    """Two pauses, neither resumed before the attempts after them: each
    attempt that starts then is reported once per pause it falls in (the
    pauses it can fall in are looked up, not scanned)."""

    def pause_twice(objs):
        pause = next(o for o in objs if o.get("event") == "pause")
        accepted = next(o for o in objs if o.get("event") == "resume" and o["accepted"])
        accepted["t"] = accepted["t"] + 3600
        accepted["request_t"] = pause["t"] + 1
        objs.insert(objs.index(pause), {**pause, "t": pause["t"] - 5})

    edit_log(run, "models/beta/run.jsonl", pause_twice)

    def request(objs):
        objs[-1]["t"] = next(o for o in read(run / "models/beta/run.jsonl") if o.get("event") == "pause")["t"] + 6

    edit_log(run, "resume.jsonl", request)
    first = fails(run, 6).result(6).first
    per_line = {}
    for v in first:
        if "during the pause" in v.message:
            per_line.setdefault(v.line, []).append(v.message)
    per_line.pop(first[-1].line, None)  # its pair may be cut by the report's limit
    assert per_line and all(len(m) == 2 for m in per_line.values()), per_line


def test_a_total_that_does_not_conserve_spend_fails_invariant_7(run):
    def more(objs):
        objs[-1]["spend_total_nusd"] += 1

    edit_log(run, "run.jsonl", more)
    fails(run, 7)


def test_a_late_cost_dropped_from_a_model_close_fails_invariant_7(run):
    def less(objs):
        next(o for o in objs if o.get("event") == "close")["spend_nusd"] -= 1

    edit_log(run, "models/gamma/run.jsonl", less)
    fails(run, 7)


def test_a_final_push_that_failed_fails_invariant_8(run):
    def failed(objs):
        objs[-1]["rc"] = 1

    edit_log(run, "anchor-pushes.jsonl", failed)
    fails(run, 8)


def test_a_trigger_without_its_stop_fails_invariant_9(run):
    edit_log(run, "models/gamma/run.jsonl", lambda objs: [o for o in objs if o.get("event") != "stop"])
    fails(run, 9)


def test_a_stop_long_after_its_trigger_fails_invariant_9(run):
    def late(objs):
        next(o for o in objs if o.get("event") == "stop")["t"] += 60

    edit_log(run, "models/gamma/run.jsonl", late)
    table = fails(run, 9).to_table()
    # both ends of the pairing: the stop has no trigger within follow s before
    # it, and the trigger no stop within follow s after it
    assert "without its trigger within" in table and "not followed by its stop within" in table


def test_an_accepted_resume_requested_before_the_latest_pause_fails_invariant_10(run):
    """A second pause between the request and the resume: the request
    predates the pause the resume ends (the latest before it)."""
    second = {}

    def pause_again(objs):
        accepted = next(o for o in objs if o.get("event") == "resume" and o["accepted"])
        pause = next(o for o in objs if o.get("event") == "pause")
        assert accepted["request_t"] < accepted["t"]
        second["t"] = (accepted["request_t"] + accepted["t"]) / 2
        objs.insert(objs.index(accepted), {**pause, "t": second["t"]})

    edit_log(run, "models/beta/run.jsonl", pause_again)
    assert f"the pause began at {second['t']}" in fails(run, 10).to_table()


def test_an_accepted_resume_requested_before_its_pause_fails_invariant_10(run):
    def stale(objs):
        rejected = next(o for o in objs if o.get("event") == "resume" and not o["accepted"])
        rejected["accepted"] = True

    edit_log(run, "models/beta/run.jsonl", stale)
    fails(run, 10)


def test_manifest_pins_that_differ_from_the_design_fail_invariant_11(run):
    man = json.loads((run / "manifest.json").read_bytes())
    man["harness"]["pins"]["harness.py"] = "1" * 64
    (run / "manifest.json").write_bytes(dumps(man) + b"\n")
    report = fails(run, 11)
    assert report.failed() == {11}


def test_workers_that_differ_from_the_design_fail_invariant_11(run):
    path = run / "design.toml"
    path.write_bytes(path.read_bytes().replace(b"workers_per_model = 2", b"workers_per_model = 4"))
    man = json.loads((run / "manifest.json").read_bytes())
    man["design_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (run / "manifest.json").write_bytes(dumps(man) + b"\n")
    fails(run, 11)


# -- gaps a forger could use, each closed (found by an audit of verify) ------------


def test_a_stop_with_a_nested_event_field_is_still_a_stop_invariant_6(run):
    """The control scan skips attempt/household lines without parsing them; a
    stop whose extra field holds {"event": "household"} must not be skipped."""

    def hidden(objs):
        later = sorted(attempts(objs), key=lambda a: a["start"])[3]
        objs.insert(
            1,
            {
                "event": "stop",
                "cause": "pool",
                "scope": "model",
                "t": later["start"] - 0.001,
                "detail": {"event": "household"},
            },
        )

    edit_log(run, "models/alpha/run.jsonl", hidden)
    fails(run, 6)


def test_a_stop_whose_t_is_not_a_number_fails_invariant_9(run):
    def text(objs):
        stop = next(o for o in objs if o.get("event") == "stop")
        stop["t"] = str(stop["t"])

    edit_log(run, "models/gamma/run.jsonl", text)
    assert "stop line without a numeric t" in fails(run, 9).to_table()


def test_a_line_of_no_known_event_fails_invariant_1(run):
    edit_log(run, "models/alpha/run.jsonl", lambda objs: objs.insert(2, {"note": {"event": "attempt"}, "t": 1.0}))
    assert "line of no known event" in fails(run, 1).to_table()


def test_a_trigger_is_not_answered_by_a_stop_before_it_invariant_9(run):
    """A second trigger of the same cause, after the only stop: no stop follows it."""

    def again(objs):
        tr = next(o for o in objs if o.get("event") == "trigger")
        objs.append({**tr, "t": tr["t"] + 30})

    edit_log(run, "models/gamma/run.jsonl", again)
    assert "not followed by its stop" in fails(run, 9).to_table()


def test_a_run_stop_without_a_cause_fails_invariant_9(run):
    end = max(a["end"] for a in attempts(read(run / "models/alpha/run.jsonl")))

    def stop(objs):
        objs.insert(len(objs) - 1, {"event": "stop", "scope": "run", "t": end + 1})

    edit_log(run, "run.jsonl", stop)
    table = fails(run, 9).to_table()
    assert "is not a known run-scope pair" in table and "are not run.jsonl's" in table


def test_a_run_stop_missing_from_a_model_log_fails_invariant_9(run):
    end = max(a["end"] for m in ("alpha", "beta", "gamma") for a in attempts(read(run / f"models/{m}/run.jsonl")))
    line = {"event": "stop", "cause": "interrupt", "scope": "run", "t": end + 1}
    edit_log(run, "run.jsonl", lambda objs: objs.insert(len(objs) - 1, line))
    for m in ("alpha", "beta"):  # gamma's copy is missing
        edit_log(run, f"models/{m}/run.jsonl", lambda objs: objs.insert(len(objs) - 1, dict(line)))
    assert "models/gamma/run.jsonl" in fails(run, 9).to_table()


def _host_sample(t, back):
    return {
        "event": "sample",
        "t": t,
        "wall": t,
        "mono": 1.0,
        "mem_pressure": 0.0,
        "mem_available": 8 << 30,
        "swap_used": 0,
        "load1": 0.5,
        "clock_back_max_s": back,
    }


def test_a_call_ending_more_than_the_slack_before_its_start_fails_invariant_5(run):
    """A call's end may precede its start only by a step back and the call
    slack (1 s): one reversed by more, both ends inside its attempt, fails."""
    rel = "models/gamma/run.jsonl"
    a = next(x for x in attempts(read(run / rel)) if x["end"] - x["start"] > 2.5)

    def reversed_call(objs):
        target = next(o for o in objs if o is not None and o.get("record") == a["record"])
        rewrite_record(run, "gamma", target, lambda rec: rec["calls"][0].update(start=a["end"], end=a["start"]))

    edit_log(run, rel, reversed_call)
    fails(run, 5)


def test_a_backward_clock_step_reported_after_an_attempt_does_not_excuse_its_calls_invariant_5(run):
    rel = "models/gamma/run.jsonl"
    a = attempts(read(run / rel))[2]

    def early_call(objs):
        target = next(o for o in objs if o is not None and o.get("record") == a["record"])
        rewrite_record(run, "gamma", target, lambda rec: rec["calls"][0].update(start=a["start"] - 50))

    edit_log(run, rel, early_call)
    last_t = read(run / "host.jsonl")[-1]["t"]
    edit_log(run, "host.jsonl", lambda objs: objs.append(_host_sample(last_t + 1, 1e6)))
    fails(run, 5)


def test_a_backward_clock_step_reported_by_the_sample_completing_an_attempt_excuses_its_calls(run):
    """The control of the test above: the same step, reported by the sample
    right after the attempt (as a real step back would be), widens the slack."""
    rel = "models/gamma/run.jsonl"
    a = attempts(read(run / rel))[2]

    def early_call(objs):
        target = next(o for o in objs if o.get("record") == a["record"])
        rewrite_record(run, "gamma", target, lambda rec: rec["calls"][0].update(start=a["start"] - 50))

    edit_log(run, rel, early_call)

    def report_step(objs):
        nxt = next(o for o in objs if o.get("event") == "sample" and o["t"] > a["end"])
        nxt["clock_back_max_s"] = 60.0

    edit_log(run, "host.jsonl", report_step)
    reseal(run)
    assert 5 not in verify_run(run).failed()


def test_a_clean_attempt_relabelled_host_on_a_short_host_prefix_fails_invariant_2(run):
    """`host_lines` is the attempt's own claim of how much host.jsonl its lane
    had seen; a prefix without the sample after the attempt is allowed only
    at a halt, in the lane's last pass."""
    rel = "models/alpha/run.jsonl"

    def forge(objs):
        a = sorted(attempts(objs, **{"class": "ok", "pass": 0}), key=lambda a: a["start"])[2]
        a.update({"class": "host", "action": "rerun", "host_lines": 1})

    edit_log(run, rel, forge)
    assert "classified without a host sample after the attempt" in fails(run, 2).to_table()


def test_records_in_a_dot_named_household_folder_are_not_ignored_invariant_1(run):
    a = attempts(read(run / "models/alpha/run.jsonl"))[0]
    beside = f"records/{a['household']}/{a['arm']}/.{a['pass'] + 1}.json"
    for target in ("records/.hh-999/alone/0.json", beside):
        path = run / "models/alpha" / target
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(run / "models/alpha" / a["record"], path)
    table = fails(run, 1).to_table()
    assert "records/.hh-999" in table and beside in table


def test_money_written_as_a_float_fails_invariant_7(run):
    def floats(objs):
        h = next(o for o in objs if o.get("event") == "household")
        h["spend_nusd"] = float(h["spend_nusd"])

    edit_log(run, "models/alpha/run.jsonl", floats)
    fails(run, 7)


ODD_VALUES = ("text", None, [], {}, True, -1, 1e308, 0.5)


# 20 cases in the quick tier, all 120 in the full suite
@pytest.mark.parametrize("case", [c if c < 20 else pytest.param(c, marks=pytest.mark.slow) for c in range(120)])
def test_verify_reports_and_never_raises_on_a_field_of_the_wrong_type(pristine, tmp_path, case):
    """Valid JSON, re-chained, with one field of any line of any log holding a
    value of another type: verify must still report (and the report must
    fail or at least not crash); before this test a stop with a text `t`
    raised TypeError."""
    import random

    rng = random.Random(case)
    root = tmp_path / "run"
    shutil.copytree(pristine, root)
    rels = ["run.jsonl", "host.jsonl", "resume.jsonl", "anchor-pushes.jsonl"] + [
        f"models/{m}/{log}" for m in ("alpha", "beta", "gamma") for log in ("run.jsonl", "admission.jsonl")
    ]
    rel = rng.choice(rels)
    objs = read(root / rel)
    obj = objs[rng.randrange(1, len(objs))] if len(objs) > 1 else objs[0]
    key = rng.choice(sorted(k for k in obj if k not in ("seq", "prev")))
    obj[key] = rng.choice([v for v in ODD_VALUES if type(v) is not type(obj[key])])
    (root / rel).write_bytes(b"".join(dumps(o) + b"\n" for o in objs))
    reseal(root)
    report = verify_run(root)  # must not raise
    assert report.to_table()


@pytest.mark.parametrize(
    "rel, event, field, value, invariant",
    [
        ("models/alpha/run.jsonl", "lane-end", "reason", "bored", 3),
        ("models/alpha/run.jsonl", "lane-end", "lane", "0", 3),
        ("models/beta/run.jsonl", "resume", "accepted", "yes", 10),
        ("models/gamma/run.jsonl", "trigger", "pass", 0.5, 9),
        ("anchor-pushes.jsonl", "push", "rc", "0", 8),
    ],
)
def test_a_control_or_push_line_field_of_the_wrong_kind_fails_its_invariant(run, rel, event, field, value, invariant):
    def odd(objs):
        next(o for o in objs if o.get("event") == event)[field] = value

    edit_log(run, rel, odd)
    assert f"{field} is {value!r}" in fails(run, invariant).to_table() or event == "push"


@pytest.mark.parametrize(
    "rel, event, invariant",
    [
        ("models/alpha/admission.jsonl", "decision", 4),
        ("resume.jsonl", "resume-request", 10),
        ("anchor-pushes.jsonl", "push", 8),
    ],
)
def test_a_line_of_no_known_event_in_any_log_fails(run, rel, event, invariant):
    def rename(objs):
        next(o for o in objs if o.get("event") == event)["event"] = "note"

    edit_log(run, rel, rename)
    assert "line of no known event ('note')" in fails(run, invariant).to_table()


@pytest.mark.parametrize(
    "field, value",
    [
        ("load1", "0.7"),
        ("wall", None),
        ("mono", [1.0]),
        ("mem_available", 1.5),
        ("swap_used", True),
        ("mem_pressure", "high"),
        ("clock_back_max_s", False),
        ("t", "late"),
        ("reads_began", "x"),
        ("load1", "missing"),
    ],
)
def test_a_host_sample_field_of_the_wrong_kind_fails_invariant_2(run, field, value):
    """Every field of a host sample is of its kind (RECORDS.md host.jsonl,
    docs/HOST.md): numbers, the byte counts integers; none missing. Also
    those no rule reads (wall, mono, load1, the byte counts), in one process
    and with host.jsonl checked in spans by workers."""

    def odd(objs):
        sample = [o for o in objs if o.get("event") == "sample"][3]
        if value == "missing":
            del sample[field]
        else:
            sample[field] = value

    edit_log(run, "host.jsonl", odd)
    reseal(run)
    said = f"{field} missing" if value == "missing" else f"{field} is {value!r}"
    for workers in (1, 2):
        report = verify_run(run, workers=workers)
        assert 2 in report.failed() and said in report.to_table(), report.to_table()


def test_host_samples_of_every_kind_the_contract_allows_pass(run):
    """The control: integers where a number is asked, no `reads_began`."""

    def plain(objs):
        samples = [o for o in objs if o.get("event") == "sample"]
        samples[2].update(wall=int(samples[2]["wall"]), mono=7, load1=0, mem_pressure=0)
        samples[3].pop("reads_began", None)

    edit_log(run, "host.jsonl", plain)
    reseal(run)
    for workers in (1, 2):
        assert 2 not in verify_run(run, workers=workers).failed()


@pytest.mark.parametrize("size", [(1 << 16) - 1, 1 << 16, (1 << 16) + 1, 3 << 20])
def test_a_record_of_any_size_is_read_whole(run, size):
    """verify reads a record in one read when it is shorter than the first
    read's buffer (64 KiB): files at, past and far past that size are read to
    their end, so they verify, and a byte added at the end still fails."""
    rel = "models/alpha/run.jsonl"
    objs = read(run / rel)
    target = attempts(objs)[2]

    def pad(rec):
        rec["padding"] = ""
        rec["padding"] = "x" * (size - len(dumps(rec)) - 1)  # "+ 1": the record file's newline

    rewrite_record(run, "alpha", target, pad)
    assert (run / "models" / "alpha" / target["record"]).stat().st_size == size
    (run / rel).write_bytes(b"".join(dumps(o) + b"\n" for o in objs))
    reseal(run)
    assert verify_run(run).ok, verify_run(run).to_table()
    with open(run / "models" / "alpha" / target["record"], "ab") as fh:
        fh.write(b" ")
    report = verify_run(run)
    assert 1 in report.failed() and "does not hash" in report.to_table(), report.to_table()


# -- more gaps: forged resumes, host lines and anchors, each closed ----------------

BETA = "models/beta/run.jsonl"  # PLAN pauses beta: a stale request rejected, then one accepted


def verify(root):
    reseal(root)
    return verify_run(root, workers=1)


def messages(report, invariant, part=""):
    return [v.message for v in report.result(invariant).first if part in v.message]


def accepted_resume(objs):
    return next(o for o in objs if o.get("event") == "resume" and o["accepted"] is True)


def add_request(root, model, t):
    edit_log(root, "resume.jsonl", lambda objs: objs.append({"event": "resume-request", "model": model, "t": t}))


# -- resumes (invariant 10) ---------------------------------------------------------


def test_the_pristine_run_verifies(run):
    assert verify(run).ok


def test_a_second_accepted_resume_of_one_pause_fails_invariant_10(run):
    """The runner accepts a resume only while its model is paused (a pause
    since the last accepted resume): a second accepted resume, with a request
    of its own after the pause, ends no pause."""
    acc = accepted_resume(read(run / BETA))

    def again(objs):
        a = accepted_resume(objs)
        objs.insert(objs.index(a) + 1, {**a, "request_t": a["request_t"] + 0.25, "t": a["t"] + 0.5})

    edit_log(run, BETA, again)
    add_request(run, "beta", acc["request_t"] + 0.25)
    report = verify(run)
    assert report.failed() == {10}, report.to_table()
    assert messages(report, 10) == [
        f"accepted resume at {acc['t'] + 0.5} ends no pause: its model was not paused "
        "then (no pause since the last accepted resume)"
    ]


def test_one_request_answered_twice_fails_invariant_10(run):
    """Each request of resume.jsonl is answered once: two resume lines of one
    request (the second one rejected, so that only this check can see it)."""
    acc = accepted_resume(read(run / BETA))

    def twice(objs):
        a = accepted_resume(objs)
        objs.insert(objs.index(a) + 1, {**a, "accepted": False, "t": a["t"] + 0.5})

    edit_log(run, BETA, twice)
    report = verify(run)
    assert report.failed() == {10}, report.to_table()
    assert messages(report, 10) == [
        f"rejected resume answers request {acc['request_t']} again: the runner answers each request once"
    ]


def test_a_resume_rejected_while_the_rule_accepts_it_fails_invariant_10(run):
    """A request after the pause, answered while the model was paused, is
    accepted (`Run._check_resume`); a line saying it was refused kept the
    model paused against the rule."""
    acc = accepted_resume(read(run / BETA))
    pause_t = next(o for o in read(run / BETA) if o.get("event") == "pause")["t"]

    def refused(objs):
        a = accepted_resume(objs)
        objs.insert(objs.index(a), {**a, "accepted": False, "request_t": a["request_t"] - 10, "t": a["t"] - 9})

    edit_log(run, BETA, refused)
    add_request(run, "beta", acc["request_t"] - 10)
    report = verify(run)
    assert report.failed() == {10}, report.to_table()
    assert messages(report, 10) == [
        f"resume at {acc['t'] - 9} rejected, but the model was paused and the request "
        f"({acc['request_t'] - 10}) came after the pause at {pause_t}: the runner "
        "accepts it"
    ]


def test_a_rejected_resume_of_no_request_fails_invariant_10(run):
    """A resume line answers a request of resume.jsonl, accepted or not: a
    rejected one in a model that never paused, of a request nobody made."""

    def forged(objs):
        objs.insert(
            2, {"event": "resume", "request_t": objs[1].get("t", 1.0), "accepted": False, "t": objs[1].get("t", 1.0)}
        )

    edit_log(run, "models/alpha/run.jsonl", forged)
    report = verify(run)
    assert report.failed() == {10}, report.to_table()
    assert len(messages(report, 10, "rejected resume request")) == 1
    assert messages(report, 10)[0].endswith("is not in resume.jsonl")


# -- host evidence (invariant 2) ----------------------------------------------------


def test_an_evidence_line_of_a_source_the_design_lacks_fails_invariant_2(run):
    """PLAN's design has no evidence source. The sample above the pressure
    threshold (its attempts host, rerun) replaced by a calm one and an
    evidence line at its time from a made-up source: the same attempts are
    host by the rule, so every class still matches; only the source gives
    the forgery away."""
    host = read(run / "host.jsonl")
    k = next(i for i, o in enumerate(host) if o.get("event") == "sample" and o["mem_pressure"] > 10)
    s = host[k]

    def forge(objs):
        objs[k] = {**s, "mem_pressure": 0.5}
        objs.insert(
            k,
            {"event": "evidence", "t": s["t"] - 0.01, "since": s["t"] - 0.01, "source": "forged", "line": "oom-killer"},
        )

    edit_log(run, "host.jsonl", forge)
    report = verify(run)
    assert report.failed() == {2}, report.to_table()
    assert messages(report, 2) == [
        "evidence line from source 'forged', which is not one of the design's evidence "
        "sources []: it would make the attempts it touches host (a rerun)"
    ]


def test_a_sample_failed_line_without_its_error_fails_invariant_2(run):
    def failed(objs):
        objs.insert(3, {"event": "sample-failed", "t": objs[2]["t"] + 0.5, "error": 7})

    edit_log(run, "host.jsonl", failed)
    report = verify(run)
    assert report.failed() == {2}, report.to_table()
    assert messages(report, 2) == ["sample-failed line: error is 7, not a string"]


@pytest.mark.parametrize(
    "line, at",
    [({"event": "guard", "line": "oom-killer"}, 3), ({"event": "open"}, 3)],
    ids=["an-event-of-no-kind", "a-second-open-line"],
)
def test_a_host_line_the_monitor_never_writes_fails_invariant_2(run, line, at):
    # host.jsonl's lines were read by kind, and a line of no kind the monitor
    # writes (or a second open line) was skipped; the models' logs fail one
    def plant(objs):
        objs.insert(at, {**line, "t": objs[at - 1]["t"] + 0.5})

    edit_log(run, "host.jsonl", plant)
    report = verify(run)
    assert report.failed() == {2}, report.to_table()
    assert messages(report, 2) == [f"line of no known event ({line['event']!r}) at line {at}"]


# -- anchors (invariant 8) ----------------------------------------------------------


def test_a_first_anchor_made_after_the_first_decisions_fails_invariant_8(run):
    """The Run anchors before any lane decides (ANCHORS.md): the first anchor
    dropped (and the pushes renumbered, the push of the dropped one gone),
    the run's first anchor counts decisions."""

    def drop_first(objs):
        del objs[1]

    edit_log(run, "anchors.jsonl", drop_first)

    def renumber(objs):
        return [objs[0], *({**o, "anchor_seq": o["anchor_seq"] - 1} for o in objs[1:] if o["anchor_seq"] > 1)]

    edit_log(run, "anchor-pushes.jsonl", renumber)
    report = verify(run)
    assert report.failed() == {8}, report.to_table()
    found = messages(report, 8)
    assert found and all(
        m.startswith("the first anchor counts ")
        and m.endswith(
            "it was made after that model's first admission decision (the run anchors before any lane decides)"
        )
        for m in found
    ), found
    assert {m.split()[7].rstrip(":") for m in found} == {
        f"models/{m}/admission.jsonl" for m in ("alpha", "beta", "gamma")
    }


def test_an_anchor_dated_before_lines_it_counts_fails_invariant_8(run):
    """An anchor's t is taken after its counts: one set back to just after
    the anchor before it (times still never go back) counts lines dated
    after it (its push, later, still follows it)."""
    anchors = read(run / "anchors.jsonl")
    k = len(anchors) // 2
    t = anchors[k - 1]["t"] + 0.001

    def set_back(objs):
        objs[k]["t"] = t

    edit_log(run, "anchors.jsonl", set_back)
    report = verify(run)
    assert report.failed() == {8}, report.to_table()
    found = messages(report, 8)
    assert found and all(
        f"the anchor at {t} counts line " in m and m.endswith("after it (an anchor's t is taken after its counts)")
        for m in found
    ), found
    assert any(m.startswith("host.jsonl: ") for m in found) and any(
        m.startswith("models/alpha/admission.jsonl: ") for m in found
    )
