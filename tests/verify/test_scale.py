"""Damaged or forged runs on which verify once did more than linear work
(time or memory): each now takes a path that counts, looks up or lists once,
and must report what the plain path reported. Each test plants a small case
of the damage and pins the report's counts and messages; where the path
counts violations it does not keep, enough of them to pass the report's
limit.
"""

from __future__ import annotations

import json
import shutil
import tracemalloc

import pytest
import test_violations as tvv
from test_violations import PLAN, attempts, edit_log, read, reseal

from confirmatory.core import merkle
from confirmatory.records.layout import load_layout
from confirmatory.testing.rungen import generate_run
from confirmatory.verify import verify_run
from confirmatory.verify.report import KEEP_PER_INVARIANT

NAN = float("nan")
ALPHA = "models/alpha/run.jsonl"
PAUSE = {"event": "pause", "household": "h00001", "arm": "alone", "pass": 0}
RESUME = {"event": "resume", "accepted": True}


def _dumps_nan(obj: dict) -> bytes:
    """chain.dumps, but writing NaN (which the chain reader accepts)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale") / "run"
    generate_run(root, PLAN)
    return root


@pytest.fixture
def run(pristine, tmp_path, monkeypatch):
    monkeypatch.setattr(tvv, "dumps", _dumps_nan)
    root = tmp_path / "run"
    shutil.copytree(pristine, root)
    return root


def verify(root):
    reseal(root)
    return verify_run(root, workers=1)


def before_close(lines):
    """An edit that adds ``lines`` just before a log's close line."""

    def add(objs):
        objs[-1:-1] = lines

    return add


def messages(report, invariant, part=""):
    return [v.message for v in report.result(invariant).first if part in v.message]


def processing_order(objs):
    """The attempts in the order verify checks them: per household line, its
    attempts by (start, pass)."""
    pending, out = {}, []
    for o in objs:
        if o.get("event") == "attempt":
            pending.setdefault(o["household"], []).append(o)
        elif o.get("event") == "household":
            out += sorted(pending.pop(o["household"], []), key=lambda a: (a["start"], a["pass"]))
    return out


# -- 1. a NaN resume no longer turns the pauses' bisection into a scan ---------------


def test_a_nan_resume_among_the_accepted_ends_no_pause(run, pristine):
    """Accepted resumes at NaN, r1, r2, r3 (the NaN first: kept, it would be
    the running maximum of them all); a pause at r2 exactly ends at r3; a
    NaN pause ends at no resume and holds no attempt."""
    starts = sorted(a["start"] for a in attempts(read(run / ALPHA)))
    p1, r1, r2, r3 = starts[2] - 1e-3, starts[4] - 1e-3, starts[8] - 1e-3, starts[10] - 1e-3
    edit_log(
        run,
        ALPHA,
        before_close(
            [
                {**RESUME, "t": NAN, "request_t": p1},
                {**PAUSE, "t": p1},
                {**RESUME, "t": r1, "request_t": p1},
                {**RESUME, "t": r2, "request_t": p1},
                {**PAUSE, "t": r2},
                {**PAUSE, "t": NAN},
                {**RESUME, "t": r3, "request_t": r2},
            ]
        ),
    )
    report = verify(run)
    inside = [(s, p, r) for s in starts for p, r in ((p1, r1), (r2, r3)) if p < s < r]
    assert len(inside) == 4
    r6 = report.result(6)
    # and each planted pause line names no paused attempt (h00001 has none)
    assert len(messages(report, 6, "which has no attempt line with action pause")) == 3
    assert r6.violations == 4 + 3
    assert sorted(messages(report, 6, "during the pause")) == sorted(
        f"attempt starts at {s} during the pause from {p} to {r}" for s, p, r in inside
    )
    # every attempt is checked against every pause, the NaN one too
    checked = verify_run(pristine, workers=1).result(6).checked
    assert r6.checked == checked + 3 * len(starts) + 3  # + the three pause lines' own check


def test_a_nan_that_leaves_the_resumes_out_of_order_ends_a_pause_at_the_first_above_it(run):
    """Accepted resumes written late, NaN, early, latest: their sort leaves
    them so ([5, NaN, 3, 7] is not reordered), and a pause ends at the first
    of them above it in that list, as a scan found: the late one for a pause
    before the early one and for one between the two."""
    starts = sorted(a["start"] for a in attempts(read(run / ALPHA)))
    p, early, q, late, latest = (starts[k] - 1e-3 for k in (2, 4, 5, 8, 12))
    edit_log(
        run,
        ALPHA,
        before_close(
            [
                {**PAUSE, "t": p},
                {**PAUSE, "t": q},
                {**RESUME, "t": late, "request_t": p},
                {**RESUME, "t": NAN, "request_t": p},
                {**RESUME, "t": early, "request_t": p},
                {**RESUME, "t": latest, "request_t": p},
            ]
        ),
    )
    report = verify(run)
    inside = [(s, b) for b in (p, q) for s in starts if b < s < late]
    assert len(inside) == 6 + 3
    assert report.result(6).violations == len(inside) + 2  # + the two pause lines, for no paused attempt
    assert sorted(messages(report, 6, "during the pause")) == sorted(
        f"attempt starts at {s} during the pause from {b} to {late}" for s, b in inside
    )


# -- 2. an attempt in many pauses: counted once per pause, messages kept only -----


def test_attempts_in_many_pauses_never_resumed_count_once_for_each(run):
    """Thirty pauses never resumed, begun before the sixth attempt: every
    attempt after a pause is in it, so the violations pass the report's
    limit; the kept ones are the first, in order, and the rest counted."""
    objs = read(run / ALPHA)
    starts = sorted(a["start"] for a in attempts(objs))
    begun = [starts[5] - 1 - k * 1e-3 for k in range(30)]
    edit_log(run, ALPHA, before_close([{**PAUSE, "t": t} for t in begun]))
    report = verify(run)
    expected = [
        f"attempt starts at {a['start']} during the pause from {p} to inf"
        for a in processing_order(read(run / ALPHA))
        for p in sorted(begun)
        if p < a["start"]
    ]
    assert len(expected) > 3 * KEEP_PER_INVARIANT
    r6 = report.result(6)
    assert r6.violations == len(expected) + 30  # + each pause line, naming no paused attempt (reported last)
    assert [v.message for v in r6.first] == expected[:KEEP_PER_INVARIANT]


# -- 3. triggers whose cause is not a string: looked up, not compared with each stop ---


def _deep(depth):
    v = 0
    for _ in range(depth):
        v = {"a": v}
    return v


def test_triggers_with_causes_of_other_kinds_are_answered_as_their_causes_compare(run, pristine):
    """A trigger is answered by a stop after it whose cause equals its own
    (``==``): 1, 1.0 and True alike, lists and objects by their items
    whatever the order of an object's keys, a NaN inside a list equal to
    itself (the reader's one NaN) but a NaN cause equal to nothing; a cause
    too deep to key (an object 700 deep) is compared with every stop."""
    t0 = read(run / ALPHA)[-1]["t"] + 10
    checked = verify_run(pristine, workers=1).result(9).checked
    deep = _deep(700)
    cases = [  # (trigger cause, stop cause, the stop's time after the trigger's, answered)
        (1, 1, 1, True),
        (1.0, 1, 1, True),
        (True, 1, 1, True),
        (0, False, 1, True),
        (1, "1", 1, False),
        (2, 1, 1, False),
        (2, 2, -1, False),
        (None, None, 5, True),
        (None, None, 5.5, False),
        ([1, {"a": [2], "b": 0}], [1.0, {"b": False, "a": [2.0]}], 1, True),
        ({"a": 1}, {"a": 2}, 1, False),
        ([1, 2], [2, 1], 1, False),
        ([NAN], [NAN], 1, True),
        (NAN, NAN, 1, False),
        ({"x": [NAN]}, {"x": [NAN]}, 1, True),
        ([[[[0]]]] * 2, [[[[0.0]]]] * 2, 0, True),
        (deep, deep, 1, True),
        (deep, _deep(699), 1, False),
        (deep, deep, -1, False),
    ]
    for k in range(0, len(cases), 3):  # three at a time: the report keeps every violation of each
        shutil.copy(pristine / ALPHA, run / ALPHA)
        batch = cases[k : k + 3]
        lines = []
        for n, (tc, sc, dt, _) in enumerate(batch):
            t = t0 + 100 * n
            lines.append({"event": "trigger", "cause": tc, "household": "h00001", "arm": "alone", "pass": n, "t": t})
            lines.append({"event": "stop", "cause": sc, "scope": "model", "t": t + dt})
        edit_log(run, ALPHA, before_close(lines))
        report = verify(run)
        triggers = [o for o in read(run / ALPHA) if o.get("event") == "trigger"]
        r9 = report.result(9)
        unanswered = [
            f"trigger ({tr['cause']}) not followed by its stop within 5.0 s"
            for tr, (*_, ok) in zip(triggers, batch)
            if not ok
        ]
        assert messages(report, 9, "not followed by its stop") == unanswered, batch
        # per trigger: its cause's kind, its stop, its attempt (none); per
        # stop: its cause's kind (unless a string), its pair with a scope
        # (kinds: not counted as checks)
        kinds = sum(type(sc) is not str for _, sc, _, _ in batch)
        assert r9.violations == 3 * len(batch) + kinds + len(unanswered)
        assert r9.checked == checked + 3 * len(batch)
    # a line after a chain break is still a stop (the control lines are read
    # raw), and need not be canonical: its object's keys in another order
    shutil.copy(pristine / ALPHA, run / ALPHA)
    trigger = {
        "event": "trigger",
        "cause": {"a": 1, "b": [2]},
        "household": "h00001",
        "arm": "alone",
        "pass": 0,
        "t": t0,
    }
    edit_log(run, ALPHA, before_close([trigger]))
    reseal(run)
    with open(run / ALPHA, "ab") as fh:
        fh.write(b'{"t":%r,"scope":"model","event":"stop","cause":{"b":[2.0],"a":true}}\n' % (t0 + 1))
    report = verify_run(run, workers=1)
    assert messages(report, 9, "not followed") == []
    assert report.result(9).violations == 4
    assert any(v.message.startswith("chain: ") for v in report.result(8).first)


# -- 4. anchors lacking logs: counted over their own entries ------------------------


def _anchor_lines(root):
    """anchors.jsonl's lines without their chain fields, and its seed."""
    seed = next(s.seed for s in load_layout(root).logs() if s.relpath == "anchors.jsonl")
    return [{k: v for k, v in o.items() if k not in ("seq", "prev")} for o in read(root / "anchors.jsonl")], seed


def test_anchors_lacking_logs_are_each_counted_and_the_first_listed(run):
    """Forty more anchors before the final one, with no log, five logs, or
    a log the run lacks: each is one violation (forty past the report's
    limit); the kept ones list exactly the logs lacked, sorted."""
    anchored = [s.relpath for s in load_layout(run).logs() if s.relpath not in ("anchors.jsonl", "anchor-pushes.jsonl")]
    reseal(run)
    checked = verify_run(run, workers=1).result(8).checked
    objs, seed = _anchor_lines(run)
    final = objs.pop()
    # the final counts (no count goes down), without their roots (not checked: the counts below stay)
    five = {rel: {k: v for k, v in final["logs"][rel].items() if k != "root"} for rel in anchored[-5:]}
    odd = {"not/a/log": {"lines": 0, "head": "0" * 64}}
    shapes = [{}, five, {**five, **odd}, odd]
    objs += [
        {"event": "anchor", "t": final["t"], "final": False, "manifests": {}, "logs": shapes[k % 4]} for k in range(40)
    ]
    tvv.write_chain(run / "anchors.jsonl", [*objs, final], seed)
    pushes = read(run / "anchor-pushes.jsonl")
    pushes[-1]["anchor_seq"] = len(objs)  # the final anchor's line now
    tvv.write_chain(run / "anchor-pushes.jsonl", pushes, pushes[0]["prev"])
    report = verify_run(run, workers=1)
    r8 = report.result(8)
    lacked = [sorted(set(anchored) - set(shapes[k % 4])) for k in range(40)]
    assert all(lacked)
    first = len(objs) - 40
    kept = [(v.line, v.message) for v in r8.first]
    expected = []
    for k in range(40):
        expected.append((first + k, f"anchor lacks logs {lacked[k]}"))
        if "not/a/log" in shapes[k % 4]:
            expected.append((first + k, "anchors a log the run does not have: not/a/log"))
    assert kept == expected[:KEEP_PER_INVARIANT]
    assert r8.violations == len(expected) == 60
    # per anchor: its maps, its time, its logs, not final; per line count: that it does not go down
    assert r8.checked == checked + 40 * 4 + 20 * len(five)


# -- 5. run-level work done once, not per model -------------------------------------


def test_run_stops_missing_from_many_models_are_each_counted(run):
    """Twenty-five more model folders (manifest ``{}``) and a run stop
    copied into no model: every model fails, past the report's limit, each
    kept message naming both lists."""
    t = read(run / "run.jsonl")[-1]["t"] + 5
    edit_log(run, "run.jsonl", before_close([{"event": "stop", "cause": "interrupt", "scope": "run", "t": t}]))
    reseal(run)
    for k in range(25):
        d = run / "models" / f"x{k:02d}"
        d.mkdir()
        (d / "manifest.json").write_text("{}")
    report = verify_run(run, workers=1)
    names = list(load_layout(run).models)
    r9 = report.result(9)
    missing = [(v.file, v.message) for v in r9.first if "run-scope stops" in v.message]
    want = [("interrupt", str(t))]
    assert (
        missing
        == [(f"models/{n}/run.jsonl", f"run-scope stops [] are not run.jsonl's {want}") for n in names][: len(missing)]
    )
    assert missing and len(r9.first) == KEEP_PER_INVARIANT  # the rest counted, not kept
    assert r9.violations == len(names) == 28


def test_the_earliest_run_stop_is_found_once_as_each_model_would(run):
    """Run stops at NaN (first) and at t: gamma, whose own stop comes first,
    passes the NaN over and halts at t; alpha and beta, whose first stop
    time is the run's NaN, never halt (min keeps a NaN that comes first)."""
    gamma = "models/gamma/run.jsonl"
    starts = sorted(a["start"] for a in attempts(read(run / gamma)))
    own = next(o["t"] for o in read(run / gamma) if o.get("event") == "stop")
    t = starts[3]
    assert t < own
    stops = [
        {"event": "stop", "cause": "interrupt", "scope": "run", "t": NAN},
        {"event": "stop", "cause": "interrupt", "scope": "run", "t": t},
    ]
    edit_log(run, "run.jsonl", before_close(stops))
    report = verify(run)
    expected = [
        (gamma, f"attempt starts at {a['start']} after a stop or the ceiling ({t})")
        for a in processing_order(read(run / gamma))
        if a["start"] > t
    ]
    r6 = report.result(6)
    assert [(v.file, v.message) for v in r6.first] == expected[:KEEP_PER_INVARIANT]
    assert r6.violations == len(expected) > KEEP_PER_INVARIANT


def test_model_ceilings_are_compared_with_the_run_s_sorted_once(run):
    """run.jsonl's ceilings, in another order in beta's log and missing from
    alpha's and gamma's: those two differ, beta does not."""
    t = read(run / "run.jsonl")[-1]["t"] - 1
    ceilings = [{"event": "ceiling", "t": t - k, "total_nusd": 2, "ceiling_nusd": 1} for k in range(3)]
    edit_log(run, "run.jsonl", before_close(ceilings))
    edit_log(run, "models/beta/run.jsonl", before_close(ceilings[::-1]))
    report = verify(run)
    assert [v.file for v in report.result(7).first if v.message == "ceiling events differ from run.jsonl's"] == [
        "models/alpha/run.jsonl",
        "models/gamma/run.jsonl",
    ]


# -- 6. a repeated household line lists its folder once ------------------------------


def test_a_repeated_household_line_lists_and_reports_its_folder_once(run):
    """A household line written four times, and two files in its folder no
    attempt line names: the folder is listed once, for its first line (it
    was listed for each, and every file in it reported again for each
    repeat, which has no attempt lines); the repeats are reported by their
    own check."""
    objs = read(run / ALPHA)
    hl = next(o for o in objs if o.get("event") == "household")
    h = hl["household"]
    folder = run / "models/alpha/records" / h / "alone"
    for k in range(2):
        (folder / f"x{k}.json").write_bytes(b"{}\n")
    once = verify(run).result(1)

    def repeat(objs):
        i = next(i for i, o in enumerate(objs) if o.get("event") == "household" and o["household"] == h)
        objs[i + 1 : i + 1] = [dict(hl) for _ in range(3)]

    edit_log(run, ALPHA, repeat)
    report = verify(run)
    r1 = report.result(1)
    assert [(v.file, v.message) for v in r1.first] == [
        (f"models/alpha/records/{h}/alone/x{k}.json", "record file without an attempt line") for k in range(2)
    ]
    assert (r1.violations, r1.checked) == (2, once.checked)  # the repeats list nothing: no check more
    assert messages(report, 3, "second household line") == [f"second household line for {h}"] * 3


# -- 7. unanchored tails noted once -------------------------------------------------


def test_the_unanchored_tails_of_many_logs_are_noted_in_order(run):
    """The final anchor fixes every log but its last line: the note names
    each log's tail, in the logs' order; a line count of the wrong kind
    partway stops the check, and the tails before it are still noted."""
    reseal(run)
    objs, seed = _anchor_lines(run)
    final = objs[-1]
    order = [s.relpath for s in load_layout(run).logs() if s.relpath in final["logs"]]
    assert len(order) > 5
    for rel in order:
        n = final["logs"][rel]["lines"] - 1  # its root the right one for n lines: only the heads are wrong
        leaves = merkle.leaf_hashes((run / rel).read_bytes().split(b"\n")[:n])
        final["logs"][rel] = {"lines": n, "head": "0" * 64, "root": merkle.root(leaves).hex()}
    tvv.write_chain(run / "anchors.jsonl", objs, seed)
    report = verify_run(run, workers=1)
    assert report.unanchored_tail == len(order)
    assert report.result(8).note == f"unanchored tail: {len(order)} lines; " + "; ".join(f"{rel}: 1" for rel in order)
    final["logs"][order[3]]["lines"] = "three"
    tvv.write_chain(run / "anchors.jsonl", objs, seed)
    report = verify_run(run, workers=1)
    assert report.unanchored_tail == 3
    assert report.result(8).note == "unanchored tail: 3 lines; " + "; ".join(f"{rel}: 1" for rel in order[:3])
    assert [v.message for v in report.result(8).first if v.message.startswith("cannot be checked")] == [
        "cannot be checked: ValueError: invalid literal for int() with base 10: 'three' (a field of the wrong type?)"
    ]


# -- 8. a manifest's lane count builds nothing of its size --------------------------


def test_lanes_are_looked_up_as_numbers_without_a_table_of_every_lane(run, pristine):
    """A lane equal to a lane number (0.0, True) is that lane, and what
    verify expects of it is said as the number (an int); a lane past the
    count, below 0, of another kind or unhashable is not a lane; a manifest
    saying 10**7 lanes costs no memory of that size."""
    objs = read(run / ALPHA)
    draw = json.loads((run / "models/alpha/manifest.json").read_bytes())["draw"]
    first = next(o for o in objs if o.get("event") == "household")  # its lane's first line
    h, lane, k = first["household"], first["lane"], draw.index(first["household"])
    other = 1 - lane  # no line of it seen yet: expected its own number, the first of its draw

    def relabel(value):
        def edit(objs):
            next(o for o in objs if o.get("event") == "household")["lane"] = value

        edit_log(run, ALPHA, edit)
        return verify(run)

    for value in (float(other), bool(other)):
        report = relabel(value)
        took = messages(report, 3, " took ")
        assert took[0] == f"lane {value} took {h} (draw index {k}), expected draw index {other}", took
    for value in (2, -1, 0.5, "0", None, float("nan"), float("inf")):
        report = relabel(value)
        assert messages(report, 3, "not in the draw") == [f"household {h} on lane {value} is not in the draw"]
    report = relabel([0])
    assert messages(report, 1, "cannot be checked") == [
        "cannot be checked: TypeError: unhashable type: 'list' (a field of the wrong type?)"
    ]
    relabel(lane)

    # the admission replay: decisions on lane 1.0 and True are lane 1's; on
    # lane 2 none's, not even draw index 2's (lane 0's second)
    def decisions(objs):
        ones = [o for o in objs if o.get("event") == "decision" and o["lane"] == 1]
        ones[0]["lane"], ones[1]["lane"] = 1.0, True
        next(o for o in objs if o.get("event") == "decision" and o["household"] == draw[2])["lane"] = 2

    edit_log(run, "models/alpha/admission.jsonl", decisions)
    report = verify(run)
    made = sorted(
        (o["t"], o["seq"], o["lane"], o["household"])
        for o in read(run / "models/alpha/admission.jsonl")
        if o.get("event") == "decision"
    )
    after = next(h for *_, lane, h in made if lane == 0 and draw.index(h) > 2)  # lane 0 still expects index 2
    assert messages(report, 3, "decided on") == [
        f"lane 2 decided on {draw[2]} out of its draw order",
        f"lane 0 decided on {after} out of its draw order",
    ]
    # 10**7 lanes: each lane's first household is its number's, its second 10**7 further
    shutil.copy(pristine / "models/alpha/admission.jsonl", run / "models/alpha/admission.jsonl")
    p = run / "models/alpha/manifest.json"
    mf = json.loads(p.read_bytes())
    mf["lanes"] = 10**7
    p.write_bytes(tvv.dumps(mf) + b"\n")
    reseal(run)
    tracemalloc.start()
    try:
        report = verify_run(run, workers=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20
    seen, second = {}, None
    for o in objs:
        if o.get("event") == "household":
            if o["lane"] in seen:
                second = (
                    f"lane {o['lane']} took {o['household']} (draw index {draw.index(o['household'])}), "
                    f"expected draw index {seen[o['lane']] + 10**7}"
                )
                break
            seen[o["lane"]] = draw.index(o["household"])
    assert messages(report, 3, " took ")[0] == second
