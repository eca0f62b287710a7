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

from confirmatory.chain import dumps, sha256_hex
from confirmatory.records import load_layout
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
    for spec in layout.logs():
        if spec.relpath in ("anchors.jsonl", "anchor-pushes.jsonl"):
            continue
        objs = read(root / spec.relpath)
        write_chain(root / spec.relpath, objs, spec.seed)
        hs, head = [spec.seed], spec.seed
        for line in (root / spec.relpath).read_bytes().split(b"\n")[:-1]:
            head = sha256_hex(line)
            hs.append(head)
        heads[spec.relpath] = hs
    seeds = {s.relpath: s.seed for s in layout.logs()}
    anchors = read(root / "anchors.jsonl")
    for k, a in enumerate(anchors):
        if a.get("event") != "anchor":
            continue
        final = k == len(anchors) - 1
        for rel, fixed in a["logs"].items():
            n = len(heads[rel]) - 1 if final else min(fixed["lines"], len(heads[rel]) - 1)
            a["logs"][rel] = {"lines": n, "head": heads[rel][n]}
        a["manifests"] = {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest() for rel in a["manifests"]}
    write_chain(root / "anchors.jsonl", anchors, seeds["anchors.jsonl"])
    write_chain(root / "anchor-pushes.jsonl", read(root / "anchor-pushes.jsonl"), seeds["anchor-pushes.jsonl"])


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
        new = {**last, "pass": last["pass"] + 1, "start": last["end"] + 1e-4, "end": last["end"] + 2e-4,
               "cost_nusd": 0, "record": f"records/{house['household']}/{last['arm']}/{last['pass'] + 1}.json"}
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
    fails(run, 9)


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
