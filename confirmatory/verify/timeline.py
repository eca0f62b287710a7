"""One model's events in time order: invariants 4, 9, 10 and the decision halves of 3 and 6.

Owns the admission replay: decisions (admission.jsonl) and household ends
(run.jsonl) merged by their times, which were taken under one lock and are
therefore strictly ordered; a household cut short by a stop stays under way
until that stop. Also the trigger/stop pairing and the resume rule.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from operator import itemgetter
from typing import Any, TypeGuard, cast

from confirmatory.core import rules
from confirmatory.records.layout import model_log
from confirmatory.verify.clocks import CALL_SLACK_S, stepped_back_through
from confirmatory.verify.context import RunContext
from confirmatory.verify.procedure import lane_in
from confirmatory.verify.report import UNDER_WAY
from confirmatory.verify.state import ModelState, hkey, line_hkey

DECISION_FIELDS = ("lane", "household", "t", "admit", "finished_nusd", "under_way", "reserve_nusd", "cap_nusd")
_DECISION_FIELD_SET = frozenset(DECISION_FIELDS)
_DECISION_MONEY = ("finished_nusd", "reserve_nusd", "cap_nusd", "under_way")
_decision_values = itemgetter(*DECISION_FIELDS)  # a decision kept as the tuple of its fields


def check_admission(ctx: RunContext, st: ModelState) -> None:
    f, log = ctx.findings, model_log(st.name, "admission.jsonl")
    mf: Any = st.manifest  # the model manifest's values, of any kind (JSON)
    lanes = int(mf.get("lanes") or 1)
    index = {h: k for k, h in enumerate(mf.get("draw") or [])}
    decisions = []
    for seq, d in ctx.logs.lines(log):
        if d.get("event") == "continuation":
            continue
        if d.get("event") != "decision":
            f.expect(4, seq == 0 and d.get("event") == "open", log, seq, f"line of no known event ({d.get('event')!r})")
            continue
        if f.expect(
            4,
            d.keys() >= _DECISION_FIELD_SET
            and all(type(d[k]) is int for k in _DECISION_MONEY)
            and type(d["t"]) in (int, float),
            log,
            seq,
            "decision lacks fields, or its money is not integers or its t not a number",
        ):
            # kept compact: one small tuple per household is what memory grows with
            decisions.append((d["t"], seq, _decision_values(d)))
    # by (t, seq): seq is unique, so the tuples' own order is that one
    # (their fields are never compared)
    decisions.sort()
    # (t, kind, ...) events: a household leaves "under way" at its end if it
    # finished, else at the first stop of its model or the run (never, if none).
    cut_until = st.halt_t
    leaves = []
    for e in st.ends.values():
        # cut short by a crash: under way until the crash's stop, then its
        # spend counts as finished (docs/RUN.md "Continuing a crashed run")
        done = e.finished or e.crash
        leaves.append((e.t if done else cut_until, e.spend if done else 0, 1))
    for _, o in st.events("continuation"):
        # what a crash lost with the households it cut short (calls in flight,
        # journaled, no record) is their finished spend from the crash on
        lost, crash_t = o.get("lost_nusd"), o.get("crash_t")
        if type(lost) is int and lost and _num(crash_t):
            leaves.append((crash_t, lost, 0))
    leaves.sort()
    i, finished_nusd, left = 0, 0, 0
    admitted, refused = 0, False
    decided: dict[str, int] = {}
    rounds: dict[str, int] = {}
    cut_short: list[tuple[int, int, str]] = []  # (lane, seq, household) admitted with no household line
    lane_next: dict[int, int] = {}  # for the lanes seen (lane k's first is k)
    lane_closed: set[int] = set()
    checked = f.checked
    reserve_nusd, cap_nusd, ceiling_t = mf.get("reserve_nusd"), mf.get("cap_nusd"), ctx.ceiling_t
    # each lane's household admitted last and its end: the lane asks about
    # its next one only once that one has ended, finished (DESIGN.md "Lanes")
    lane_prev: dict[Any, Any] = {}  # lane -> (household, HouseholdEnd), None while under way
    # the households' end times: a decision's t is never one (RECORDS.md:
    # taken under one lock, strictly ordered)
    ended_at = {e.t: h for h, e in st.ends.items() if _num(e.t)}
    for t, seq, d in decisions:
        while i < len(leaves) and leaves[i][0] < t:
            finished_nusd += leaves[i][1]
            left += leaves[i][2]
            i += 1
        under_way = admitted - left
        lane, h, _, admit, d_finished, d_under_way, d_reserve, d_cap = d  # DECISION_FIELDS
        expect = rules.admit(
            refused_before=refused,
            finished_nusd=finished_nusd,
            under_way=under_way,
            reserve_nusd=reserve_nusd,
            cap_nusd=cap_nusd,
        )
        state_ok = (d_finished, d_under_way, d_reserve, d_cap) == (finished_nusd, under_way, reserve_nusd, cap_nusd)
        # counted checks; a message is built only for a violation
        checked[4] += 3
        checked[6] += 1
        checked[3] += 1
        if not state_ok:
            f.fail(
                4,
                log,
                seq,
                f"decision state {d_finished}/{d_under_way} is not the replayed {finished_nusd}/{under_way}",
            )
        if admit is not expect:
            f.fail(4, log, seq, f"admit={admit}, the rule gives {expect}")
        if t > ceiling_t:
            f.fail(6, log, seq, f"decision at {t} after the ceiling's crossing")
        for crash_t, resumed_t in ctx.crash_windows:
            if crash_t < t < resumed_t:
                f.fail(
                    6,
                    log,
                    seq,
                    f"decision at {t}, while its runner was dead (from the crash at {crash_t} to "
                    f"the continuation at {resumed_t})",
                )
        k = index.get(h)
        ok = k is not None and lane not in lane_closed and lane_in(lane, lanes) and k == lane_next.get(lane, int(lane))
        if not ok:
            f.fail(3, log, seq, f"lane {lane} decided on {h} out of its draw order")
        checked[4] += 1
        if t in ended_at:
            f.fail(
                4,
                log,
                seq,
                f"decision at {t}, the end time of household {ended_at[t]}: a decision and a "
                "household's end are strictly ordered",
            )
        prev = lane_prev.get(lane)
        if prev is not None:
            ph, pe = prev
            checked[3] += 1
            if not (_num(pe.t) and pe.t < t):
                f.fail(
                    3,
                    log,
                    seq,
                    f"lane {lane} decided on {h} at {t}, before its previous household {ph} ended ({pe.t!r})",
                )
            elif not pe.finished and not (pe.crash and ph == h):
                f.fail(
                    3,
                    log,
                    seq,
                    f"lane {lane} decided on {h} after its household {ph} was cut short "
                    "(a lane ends with a household it did not finish)",
                )
        rnd = rounds.get(h, -1) + 1  # the household's run this decision admits (a crash may repeat it)
        rounds[h] = rnd
        end = st.ends.get(hkey(h, rnd))
        if k is not None and lane_in(lane, lanes):
            lane_next[lane] = k if (end is not None and end.crash) else k + lanes
        if h in decided:
            before = st.ends.get(hkey(h, rnd - 1))
            if before is None or not before.crash:
                f.fail(4, log, seq, f"second decision on {h}")
        decided[h] = seq
        if admit:
            admitted += 1
            lane_prev[lane] = None if end is None else (h, end)
            checked[4] += 1
            if end is None and ctx.logs.stage == UNDER_WAY:
                cut_short.append((lane, seq, h))  # the crash's, if nothing came after it on its lane
            elif end is None:
                f.fail(4, log, seq, f"admitted {h} never ended (no household line)")
            if end is not None and end.first_start is not None:
                checked[3] += 1
                if not t < end.first_start:
                    f.fail(3, log, seq, f"{h} started before its decision")
        else:
            refused = True
            lane_closed.add(lane)
    # A household under way when the run was cut short is its lane's last
    # decision; one its lane decided past is a household that never ended.
    last_on_lane = {}
    for _, seq, d in decisions:
        last_on_lane[d[0]] = seq  # DECISION_FIELDS: lane first
    for lane, seq, h in cut_short:
        if last_on_lane.get(lane) == seq:
            f.explain(4, log, seq, f"admitted {h} was under way when the run was cut short (no household line)")
            f.under_way.setdefault(st.name, []).append(h)
        else:
            f.fail(4, log, seq, f"admitted {h} never ended (no household line)")
    lanes_end(ctx, st, index, lanes, lane_next, lane_prev, lane_closed)
    admitted_set = {d[1] for _, _, d in decisions if d[3]}  # (household, admit)
    checked[4] += len(st.ends)
    for h, e in st.ends.items():
        if h.partition("@")[0] not in admitted_set:
            f.fail(4, model_log(st.name, "run.jsonl"), e.seq, f"household {h} ran without an admission")


def lanes_end(
    ctx: RunContext,
    st: ModelState,
    index: dict[Any, int],
    lanes: int,
    lane_next: dict[int, int],
    lane_prev: dict[Any, Any],
    lane_closed: set[int],
) -> None:
    """Invariant 3: a lane takes its households until its draw runs out
    (`Lane.run_lane`) and ends early only when it was refused, when a
    household of it ended unfinished, or when its model halted (its next
    decision then finds a stop or the ceiling: `Lane.decide` writes no line).
    So a lane whose last household finished, with households of its draw left
    and no refusal, needs a stop of its model or the run, a trigger or the
    ceiling; else its last households were dropped from the records. (The
    halt is not bounded in time: a lane waits to ask while a pass of its model
    is being classified, which the records do not date.)

    Each lane writes one lane-end line, whose reason is what ended it: done
    (its draw ran out), refused, stopped (a stop or trigger of its model or
    the run), ceiling. A lane of the draw without one is accepted only in a
    run that stopped (a lane's last line that failed stops the run)."""
    f, n = ctx.findings, len(index)
    log = model_log(st.name, "run.jsonl")
    draw = cast(list[Any], st.manifest.get("draw")) if isinstance(st.manifest.get("draw"), list) else []

    def ran_out(lane: Any) -> bool:  # its last household finished (or none ran) and its draw is done
        prev = lane_prev.get(lane, ())
        return (
            lane not in lane_closed
            and (prev == () or (prev is not None and prev[1].finished))
            and lane_next.get(lane, lane) >= n
        )

    stopped = bool(st.events("stop")) or bool(ctx.run_stop_ts) or st.trigger_t < float("inf")
    crossed = ctx.ceiling_t < float("inf")
    said: dict[Any, Any] = {}
    reason: Any  # the line's, of any kind (the control fields check it)
    for seq, o in st.events("lane-end"):
        lane, reason = o.get("lane"), o.get("reason")
        f.check(3)
        try:
            known = type(lane) is int and lane_in(lane, lanes)
        except TypeError:
            known = False
        if not known:
            f.fail(3, log, seq, f"lane-end of lane {lane!r}, not a lane of the model")
            continue
        if lane in said:
            f.fail(3, log, seq, f"second lane-end for lane {lane}")
            continue
        said[lane] = reason
        ok = (
            {
                "done": lambda: ran_out(lane),  # noqa: B023 - called at once
                "refused": lambda: lane in lane_closed,  # noqa: B023 - called at once
                "stopped": lambda: stopped,
                "ceiling": lambda: crossed,
            }.get(reason)
            if type(reason) is str
            else None
        )
        if ok is not None and not ok():  # (a reason of no kind fails with the control fields)
            f.fail(
                3,
                log,
                seq,
                f"lane {lane} ended {reason!r}, but "
                + {
                    "done": "it did not run its draw to the end",
                    "refused": "it was never refused",
                    "stopped": "nothing stopped its model or the run",
                    "ceiling": "the ceiling was not crossed",
                }[reason],
            )
    halted = min(st.halt_t, st.trigger_t) < float("inf")
    for lane in range(min(lanes, n)):
        if lane not in said and not ctx.run_stop_ts and ctx.logs.stage == UNDER_WAY:
            f.explain(3, log, None, f"lane {lane} has no lane-end line: the run was cut short")
        elif lane not in said and not ctx.run_stop_ts:
            if f.keeps(3):
                f.fail(3, log, None, f"lane {lane} has no lane-end line")
            else:
                f.tally(3, 1)
        if halted or lane in lane_closed:
            continue  # refused: the lane ends there
        prev = lane_prev.get(lane, ())
        if prev is None or (prev and not prev[1].finished):
            continue  # admitted and never ended (failed above), or cut short (checked with its household)
        nxt = lane_next.get(lane, lane)
        f.check(3)
        if nxt < n and lane not in said and ctx.logs.stage == UNDER_WAY:
            f.explain(
                3,
                model_log(st.name, "admission.jsonl"),
                None,
                f"lane {lane} had not decided on {draw[nxt] if nxt < len(draw) else nxt!r} yet (draw index "
                f"{nxt}) when the run was cut short",
            )
        elif nxt < n:
            if f.keeps(3):
                f.fail(
                    3,
                    model_log(st.name, "admission.jsonl"),
                    None,
                    f"lane {lane} took no decision on {draw[nxt] if nxt < len(draw) else nxt!r} (draw index "
                    f"{nxt}): it was never refused, its last household finished, and its model did not stop, "
                    "nor the run, nor was the ceiling crossed",
                )
            else:
                f.tally(3, 1)


def check_stops(ctx: RunContext, st: ModelState) -> None:
    f, log, follow = ctx.findings, model_log(st.name, "run.jsonl"), ctx.rules.stop_follow_s
    # (a line without a numeric t fails in ModelCheck.control_times; here it
    # can neither answer nor be answered)
    stops = [(q, o) for q, o in st.events("stop") if _num(o.get("t"))]
    triggers = [(q, o) for q, o in st.events("trigger") if _num(o.get("t"))]
    # each cause's times in order (a NaN is before and after nothing): a stop
    # is answered by the latest trigger not after it, a trigger by the first
    # stop not before it (the only candidates: tr + follow rises with tr),
    # looked up by bisection, not by a scan per line
    trigger_ts = _times_by_cause(triggers)
    # the stops' times per cause, by its key (`cause_key`). A cause too deep
    # to key is left out: equal causes have one shape, keyed at one depth
    # (here, as the triggers' below), so it equals only a trigger's that is
    # not keyed either, and that one is compared with every stop.
    stop_ts: dict[Any, list[Any]] = {}
    for _, s in stops:
        ck = cause_key(s.get("cause"))
        if ck is not _UNKEYED and s["t"] == s["t"]:
            stop_ts.setdefault(ck, []).append(s["t"])
    for ts in stop_ts.values():
        ts.sort()
    for seq, s in st.events("stop"):
        cause = s.get("cause")
        f.expect(
            9,
            type(cause) is str and cause in rules.STOP_SCOPE and s.get("scope") == rules.STOP_SCOPE[cause],
            log,
            seq,
            f"stop cause {cause!r} / scope {s.get('scope')!r} is not a known pair",
        )
        if cause in rules.TRIGGER_CAUSES:
            ok = _num(s.get("t")) and s["t"] == s["t"]
            if ok:
                ts = trigger_ts.get(cause, [])
                k = bisect.bisect_right(ts, s["t"]) - 1
                ok = k >= 0 and s["t"] <= ts[k] + follow
            f.expect(9, ok, log, seq, f"stop ({cause}) without its trigger within {follow} s before it")
    t: Any  # the line's, of any kind (_num checks it)
    for seq, tr in st.events("trigger"):
        # (a cause that is not a string fails its field check; it is looked
        # up as it compares, by its key)
        cause, t = tr.get("cause"), tr.get("t")
        ck = cause_key(cause)
        if ck is _UNKEYED:  # too deep to key: compared as it is, with every stop
            ok = _num(t) and any(s.get("cause") == cause and t <= s["t"] <= t + follow for _, s in stops)
        else:
            # a NaN cause equals no stop's, not even a NaN (as a key it would find itself)
            ok = _num(t) and t == t and not (type(cause) is float and cause != cause)
            if ok:
                ts = stop_ts.get(ck, [])
                k = bisect.bisect_left(ts, t)
                ok = k < len(ts) and ts[k] <= t + follow
        f.expect(9, ok, log, seq, f"trigger ({cause}) not followed by its stop within {follow} s")
        key = (line_hkey(tr), tr.get("arm"), tr.get("pass"))
        attempt = st.stop_attempts.pop(key, None)
        f.expect(9, attempt is not None, log, seq, f"trigger for {key} names no attempt with action stop")
        if attempt is not None:
            # the trigger comes of classifying its attempt (Run.trigger, from
            # Lane._consequence, Lane.classify_with or Run._abandon): dated at
            # or after its end, with the rules' stop cause for it (a class the
            # rules give no stop is invariant 2's)
            _, _, end, want = attempt
            f.checked[9] += 2
            if _num(t) and _num(end) and not t >= end:
                f.fail(9, log, seq, f"trigger at {t} before its attempt {key} ended ({end})")
            if want is not None and cause != want:
                f.fail(9, log, seq, f"trigger cause {cause!r}, the rules give {want!r} for its attempt {key}")
    for key, (seq, *_) in st.stop_attempts.items():
        f.fail(9, log, seq, f"attempt {key} has action stop but no trigger")


def _num(t: Any) -> TypeGuard[float]:
    return type(t) is float or type(t) is int


_UNKEYED = object()


def cause_key(cause: Any) -> Any:
    """``cause`` as a hashable key, equal to another's where the causes are
    equal (``==``): lists as tuples, objects as frozensets of their items
    (1, 1.0 and True alike, as with ``==``); _UNKEYED for one too deep to key."""
    try:
        key = _key(cause)
        hash(key)
    except (RecursionError, TypeError):
        return _UNKEYED
    return key


def _key(v: Any) -> Any:
    if type(v) is list:
        return tuple(map(_key, v))
    if type(v) is dict:
        return frozenset((k, _key(x)) for k, x in v.items())
    return v


def _times_by_cause(lines: list[tuple[int, dict[str, Any]]]) -> dict[str, list[Any]]:
    """The times of the lines with a string cause, per cause, in order, without NaN."""
    out: dict[str, list[Any]] = {}
    for _, o in lines:
        if type(o.get("cause")) is str and o["t"] == o["t"]:
            out.setdefault(o["cause"], []).append(o["t"])
    for ts in out.values():
        ts.sort()
    return out


def check_run_stops(ctx: RunContext, states: list[ModelState]) -> None:
    """Run-scope stops: each names a known cause, and each is copied, the same,
    into every model's run.jsonl (and no model has a run-scope stop the run lacks)."""
    f = ctx.findings
    stops = [(seq, o) for seq, o in ctx.run_events if o.get("event") == "stop"]
    for seq, s in stops:
        cause = s.get("cause")
        f.expect(
            9,
            s.get("scope") == "run" and type(cause) is str and rules.STOP_SCOPE.get(cause) == "run",
            "run.jsonl",
            seq,
            f"stop cause {cause!r} / scope {s.get('scope')!r} is not a known run-scope pair",
        )
        f.expect(9, _num(s.get("t")), "run.jsonl", seq, f"stop without a numeric t ({s.get('t')!r})")
    key: Callable[[dict[str, Any]], tuple[str, str]] = lambda o: (str(o.get("cause")), str(o.get("t")))  # noqa: E731
    want = sorted(key(o) for _, o in stops)
    for st in states:
        mine = sorted(key(o) for _, o in st.events("stop") if o.get("scope") == "run")
        f.check(9)
        # the message (both lists) only for a violation the report keeps:
        # run.jsonl's stops would be written out again for every model
        if mine != want and ctx.logs.stage == UNDER_WAY and set(mine) <= set(want):
            # the run was cut short between run.jsonl's stop and this log's copy
            # (or this log could no longer be written): a continuation copies it
            f.explain(
                9,
                model_log(st.name, "run.jsonl"),
                None,
                f"run-scope stops {sorted(set(want) - set(mine))} of "
                "run.jsonl not yet copied here: the run was cut short",
            )
        elif mine != want:
            if f.keeps(9):
                f.fail(9, model_log(st.name, "run.jsonl"), None, f"run-scope stops {mine} are not run.jsonl's {want}")
            else:
                f.tally(9, 1)


def check_resumes(ctx: RunContext, st: ModelState) -> None:
    f, log = ctx.findings, model_log(st.name, "run.jsonl")
    # (a NaN begins no pause: left out, the others sort into an order)
    pauses = sorted(p["t"] for _, p in st.events("pause") if _num(p.get("t")) and p["t"] == p["t"])
    t: Any  # the lines', of any kind (_num checks it)
    for seq, r in st.events("resume"):
        if r.get("accepted") is not True:
            continue
        t, req = r.get("t"), r.get("request_t")
        k = bisect.bisect_left(pauses, t) if _num(t) and t == t else 0
        began = pauses[k - 1] if k else None  # the latest pause before the resume
        # The request's t is the resume command's raw wall time (another
        # process); the resume's, the run's clock, taken after reading it. A
        # wall clock stepped back in between, before the run's clock read
        # the later time, dates the request after its acceptance (a real run
        # did, by 3 ms): allowed the call slack and the steps reported
        # through the sample after the acceptance, as a call's raw times are.
        late = CALL_SLACK_S + (stepped_back_through(ctx, t) if _num(t) and t == t else 0.0)
        ok = began is not None and _num(req) and began < req <= t + late
        f.expect(10, ok, log, seq, f"accepted resume requested at {req}, the pause began at {began}")
    # The runner answers each request of resume.jsonl once, with one resume
    # line in its model's log (`Run._check_resume`): every resume line,
    # accepted or not, answers a request of its model, and no request is
    # answered twice.
    answered: dict[tuple[str, Any], int] = {}
    for seq, r in st.events("resume"):
        req, what = r.get("request_t"), "accepted" if r.get("accepted") is True else "rejected"
        key = (st.name, req)
        f.check(10)
        if not (_num(req) and key in ctx.resume_requests):
            f.fail(10, log, seq, f"{what} resume request {req} is not in resume.jsonl")
            continue
        answered[key] = answered.get(key, 0) + 1
        if answered[key] > ctx.resume_requests[key]:
            f.fail(10, log, seq, f"{what} resume answers request {req} again: the runner answers each request once")
    # ... and accepts it exactly when the model is paused (a pause since the
    # last accepted resume) and the request came after the latest pause: the
    # pauses and resumes replayed in time order (their t's are taken under one
    # lock, strictly ordered; a t that is not a number fails with the control
    # fields). A resume that ends no pause, or a refused request the rule
    # accepts, fails; the state follows each line as it says, so one wrong
    # line is reported once.
    timeline = sorted(
        [(p["t"], 0, seq, p) for seq, p in st.events("pause") if _num(p.get("t")) and p["t"] == p["t"]]
        + [(r["t"], 1, seq, r) for seq, r in st.events("resume") if _num(r.get("t")) and r["t"] == r["t"]],
        key=itemgetter(0, 1, 2),
    )
    pause_t: Any  # the latest pause's t (None before the first, read only while paused)
    paused, pause_t = False, None
    for t, kind, seq, o in timeline:
        if kind == 0:
            paused, pause_t = True, t
            continue
        accepted, req = o.get("accepted"), o.get("request_t")
        f.check(10)
        if accepted is True:
            if not paused:
                f.fail(
                    10,
                    log,
                    seq,
                    f"accepted resume at {t} ends no pause: its model was not paused then "
                    f"(no pause since the last accepted resume)",
                )
            paused = False
        elif accepted is False and paused and _num(req) and req > pause_t:
            f.fail(
                10,
                log,
                seq,
                f"resume at {t} rejected, but the model was paused and the request ({req}) came "
                f"after the pause at {pause_t}: the runner accepts it",
            )
