"""False accepts found by the fifth audit of verify: runs that break the
procedure, or records that lie about what happened, planted in generated
runs and re-chained (`reseal`). Each failed to fail before its fix.
"""

from __future__ import annotations


import pytest
from test_verify_violations import edit_log, pristine, read, reseal, run  # noqa: F401 - the generated run's fixtures

from confirmatory.verify import verify_run

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
    assert messages(report, 10) == [f"accepted resume at {acc['t'] + 0.5} ends no pause: its model was not paused "
                                    "then (no pause since the last accepted resume)"]


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
    assert messages(report, 10) == [f"rejected resume answers request {acc['request_t']} again: the runner "
                                    "answers each request once"]


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
    assert messages(report, 10) == [f"resume at {acc['t'] - 9} rejected, but the model was paused and the request "
                                    f"({acc['request_t'] - 10}) came after the pause at {pause_t}: the runner "
                                    "accepts it"]


def test_a_rejected_resume_of_no_request_fails_invariant_10(run):
    """A resume line answers a request of resume.jsonl, accepted or not: a
    rejected one in a model that never paused, of a request nobody made."""
    def forged(objs):
        objs.insert(2, {"event": "resume", "request_t": objs[1].get("t", 1.0), "accepted": False,
                        "t": objs[1].get("t", 1.0)})
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
        objs.insert(k, {"event": "evidence", "t": s["t"] - 0.01, "since": s["t"] - 0.01, "source": "forged",
                        "line": "oom-killer"})
    edit_log(run, "host.jsonl", forge)
    report = verify(run)
    assert report.failed() == {2}, report.to_table()
    assert messages(report, 2) == ["evidence line from source 'forged', which is not one of the design's evidence "
                                   "sources []: it would make the attempts it touches host (a rerun)"]


def test_a_sample_failed_line_without_its_error_fails_invariant_2(run):
    def failed(objs):
        objs.insert(3, {"event": "sample-failed", "t": objs[2]["t"] + 0.5, "error": 7})
    edit_log(run, "host.jsonl", failed)
    report = verify(run)
    assert report.failed() == {2}, report.to_table()
    assert messages(report, 2) == ["sample-failed line: error is 7, not a string"]


@pytest.mark.parametrize("line, at", [({"event": "guard", "line": "oom-killer"}, 3), ({"event": "open"}, 3)],
                         ids=["an-event-of-no-kind", "a-second-open-line"])
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
    assert found and all(m.startswith("the first anchor counts ") and m.endswith(
        "it was made after that model's first admission decision (the run anchors before any lane decides)")
        for m in found), found
    assert {m.split()[7].rstrip(":") for m in found} == {f"models/{m}/admission.jsonl" for m in ("alpha", "beta", "gamma")}


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
    assert found and all(f"the anchor at {t} counts line " in m and
                         m.endswith("after it (an anchor's t is taken after its counts)") for m in found), found
    assert any(m.startswith("host.jsonl: ") for m in found) and any(m.startswith("models/alpha/admission.jsonl: ") for m in found)
