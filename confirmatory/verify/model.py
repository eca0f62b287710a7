"""One model's records: the streaming pass over ``models/<m>/run.jsonl``.

Owns `ModelCheck` and the control lines. Control events (stops, triggers,
pauses, resumes, the ceiling, closes, late costs) are few; they are picked
out first by a raw scan that skips attempt and household lines without
parsing them, so that when the chain-checked pass meets an attempt every
stop and pause it must respect is already known; each carries a time and its
contract fields (`CONTROL_FIELDS`), checked under its invariant. Attempt
lines are buffered per household until its household line (attempt lines
are written first), checked as a household, and dropped: what stays is a
few numbers per household for the admission replay (`timeline`). The checks
are ModelCheck's by family: `procedure` (the draw, the lanes and passes,
pauses, late costs: invariants 3, 6, 7), `attempts` (each record and its
calls: 1, 5, 7; each attempt's times: 2, 6, 9), `classes` (the rules' class,
action and signature: 2).
"""

from __future__ import annotations

import bisect
import io
import itertools
import json
import os
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confirmatory.core import rules
from confirmatory.records.chain import open_regular
from confirmatory.records.layout import model_log, record_relpath
from confirmatory.verify.attempts import AttemptChecks
from confirmatory.verify.classes import ClassChecks
from confirmatory.verify.clocks import (
    CALL_SLACK_S,
    DEADLINE_DRIFT,
    _num,
    stepped_back_through,
)
from confirmatory.verify.context import RunContext
from confirmatory.verify.procedure import ProcedureChecks
from confirmatory.verify.report import UNDER_WAY
from confirmatory.verify.state import ModelState, line_hkey

# The events of a model's run.jsonl besides attempt and household lines, and
# the invariant that reads each one's time.
CONTROL_EVENTS = {
    "open": 8,
    "late-cost": 7,
    "trigger": 9,
    "stop": 9,
    "ceiling": 6,
    "pause": 6,
    "resume": 10,
    "lane-end": 3,
    "close": 7,
    "call-cost": 7,
    "continuation": 8,
}
_Kind = tuple[Callable[[Any], bool], str]  # a field's test, and what it must be
_INT: _Kind = (lambda v: type(v) is int, "an integer")
_STR: _Kind = (lambda v: type(v) is str, "a string")
_NUMBER: _Kind = (lambda v: type(v) in (int, float), "a number")
_COST: _Kind = (lambda v: type(v) is int and v >= 0, "a non-negative integer")  # spend.Spend.add refuses less
# The contract fields of each control event beyond `t` (RECORDS.md), and their kinds.
CONTROL_FIELDS: dict[str, dict[str, _Kind]] = {
    "late-cost": {"household": _STR, "arm": _STR, "pass": _INT, "cost_nusd": _COST},
    "trigger": {
        "cause": (lambda v: v in rules.TRIGGER_CAUSES, f"one of {list(rules.TRIGGER_CAUSES)}"),
        "household": _STR,
        "arm": _STR,
        "pass": _INT,
    },
    "stop": {"cause": _STR, "scope": (lambda v: v in ("model", "run"), "model or run")},
    "ceiling": {"total_nusd": _INT, "ceiling_nusd": _INT},
    "pause": {"household": _STR, "arm": _STR, "pass": _INT},
    "resume": {"request_t": _NUMBER, "accepted": (lambda v: type(v) is bool, "true or false")},
    "lane-end": {
        "lane": _INT,
        "reason": (lambda v: v in ("done", "refused", "stopped", "ceiling"), "done, refused, stopped or ceiling"),
    },
    "close": {"spend_nusd": _INT},
    "call-cost": {"household": _STR, "arm": _STR, "pass": _INT, "cost_nusd": _COST},
    "continuation": {"continuation": _INT, "crash_t": _NUMBER, "lost_nusd": _COST},
}
_SKIP = (b'"event":"attempt"', b'"event":"household"')


def control_events(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Every line that is not an attempt or household line, with its position."""
    out = []
    try:
        with io.BufferedReader(open_regular(path)) as fh:
            for i, raw in enumerate(fh):
                # Only a line whose one "event" key is attempt/household is
                # skipped: a control line with a nested "event" is parsed.
                if (_SKIP[0] in raw or _SKIP[1] in raw) and raw.count(b'"event":') == 1:
                    continue
                try:
                    obj = json.loads(raw)
                except (ValueError, RecursionError):  # the chain pass reports the line
                    continue
                if isinstance(obj, dict):
                    out.append((i, obj))
    except OSError:
        pass
    return out


class ModelCheck(ProcedureChecks, AttemptChecks, ClassChecks):
    """One model's checks, over its run.jsonl read once; each family of them is a
    base class (`procedure`, `attempts`, `classes`), all on this one state."""

    def __init__(self, name: str, ctx: RunContext) -> None:
        self.ctx, self.f = ctx, ctx.findings
        self.log = model_log(name, "run.jsonl")
        self.root = ctx.layout.root / "models" / name
        self.root_s = str(self.root)
        mf = ctx.layout.models[name].obj if isinstance(ctx.layout.models[name].obj, dict) else {}
        self.st = ModelState(name, mf, control_events(ctx.layout.root / self.log))
        self.lanes = int(mf.get("lanes") or 1)
        self.draw = list(mf.get("draw") or [])
        self.index = {h: k for k, h in enumerate(self.draw)}
        self.orders = mf.get("arm_orders") or {}
        # next draw index expected per lane, for the lanes seen (lane k's first is k)
        self.lane_next: dict[int, int] = {}
        self.lane_end: defaultdict[Any, float] = defaultdict(lambda: float("-inf"))
        self.incon: list[tuple[Any, ...]] = []
        self.decided: dict[tuple[Any, ...], rules.Decision] = {}
        self.short: list[tuple[Any, ...]] = []  # attempts judged on a prefix without their completing sample
        self.lane_last: dict[int, tuple[str, int]] = {}  # lane -> (household, pass) of its last attempt
        self.any_back = ctx.host.back_max > 0  # most runs: no backward step at all, no lookup per attempt
        self.completion = ctx.host.completion
        self.host_is = ctx.host.is_host
        self.root_fd: int | None = None  # the model folder, while the stream is read
        self.listed: set[str] = set()  # the households whose records folder was listed
        self.recorded: dict[str, set[str]] = {}  # household -> the records its attempt lines name (every round)
        self._times()
        # the pauses' beginnings, and the latest end of any pause begun by
        # each: an attempt's start is looked up, not compared with every pause
        # (a NaN begins or ends no pause: it is before and after nothing)
        self.pauses_kept = sorted(((p, r) for p, r in self.st.pauses if p == p), key=lambda pr: pr[0])
        self.pause_at = [p for p, _ in self.pauses_kept]
        # each pause ends where the running maximum of the accepted resumes
        # first passes it (_times), so the ends rise with the beginnings,
        # whatever order an edited log's resumes are in: the pauses a start
        # falls in are a run of them, found by bisection
        self.pause_until = [r for _, r in self.pauses_kept]
        self._money_times()
        self._procedure_keys()
        # the spend journal: (household run, arm, pass) -> [nano-dollars, first seq]
        self.journal: dict[tuple[str, Any, Any], list[Any]] = {}
        for seq, o in self.st.control:
            if o.get("event") == "call-cost" and type(o.get("cost_nusd")) is int:
                entry = self.journal.setdefault(
                    (line_hkey(o), o.get("arm"), o.get("pass")), [0, seq, o.get("household"), o.get("round", 0)]
                )
                entry[0] += o["cost_nusd"]

    def _money_times(self) -> None:
        """The bounds `attempt` compares with, set once: the ceiling's cut,
        the deadline's, and the halts a budget_stop needs."""
        ctx, st, rl = self.ctx, self.st, self.ctx.rules
        # The runner counts a call's cost when the harness reports it, as the
        # call ends (docs/HARNESS.md), and notes the crossing (the ceiling
        # event's t) at the first count that takes the total above the
        # ceiling (spend.Spend.add). A call ending more than the call-time
        # slack before that t (widened by the backward clock steps reported
        # through the sample after it: the run's clock can then be ahead of
        # the raw times) was counted before it; their sum is checked in
        # money.check_totals. No ceiling: no call is counted (-inf).
        ct = ctx.ceiling_t
        # A call counted by the crossing ended no later than its count (the
        # harness reports a call as it ends) and so no later than the event's
        # t: the run's clock is never behind the wall clock (clock.Clock). A
        # call ending up to the slack after it is taken as counted (the upper
        # bound of what the event may say was counted; a non-numeric end
        # fails invariant 5 and is taken too).
        if _num(ct) and ct == ct and ct != float("inf"):
            self.ceiling_cut = ct - CALL_SLACK_S - self.back_through(ct)
            self.ceiling_top = ct + CALL_SLACK_S
        else:
            self.ceiling_cut = float("-inf")
            self.ceiling_top = float("inf")
        deadline = rl.attempt_deadline_s
        self.deadline_s = deadline
        self.deadline_short = CALL_SLACK_S + DEADLINE_DRIFT * deadline
        # past the deadline: the main loop's watcher polls every 50 ms, but
        # its tick writes records and stops (fsyncs): stop_follow_s, the
        # contract's allowance for its acting on a trigger; and the wall
        # clock's lead over the monotonic one that host.jsonl's samples show
        # (clocks.ClockDrift)
        self.deadline_over = deadline + rl.stop_follow_s + ctx.clock_drift.rise + DEADLINE_DRIFT * deadline
        self.run_stop_first = min((t for t in ctx.run_stop_ts if t == t), default=float("inf"))
        # a budget_stop needs its model's stop or trigger (Run.trigger sets the
        # stop at the trigger's t and writes the stop line after it), a run
        # stop or the ceiling, by its end (1 s: a stop_model by another thread
        # writes its line a moment after setting it)
        self.halt_any = min(st.halt_t, st.trigger_t, *st.ended_halts)

    def _times(self) -> None:
        st, ctx = self.st, self.ctx

        # a crash's stop, and a runner error's before a continuation, end nothing its continuation runs
        def ended(o: dict[str, Any]) -> bool:  # (a cause of another kind, unhashable, ends nothing)
            return o.get("cause") == "crash" or (
                o.get("cause") == "runner-error" and ("runner-error", o["t"]) in ctx.ended_stops
            )

        stops = [o["t"] for _, o in st.events("stop") if isinstance(o.get("t"), (int, float)) and not ended(o)]
        st.ended_halts = [o["t"] for _, o in st.events("stop") if isinstance(o.get("t"), (int, float)) and ended(o)]
        ceilings = [o["t"] for _, o in st.events("ceiling") if isinstance(o.get("t"), (int, float))]
        st.halt_t = min([*stops, *ceilings, *ctx.run_stop_ts, ctx.ceiling_t])
        st.trigger_t = min(
            [o["t"] for _, o in st.events("trigger") if isinstance(o.get("t"), (int, float))], default=float("inf")
        )
        # Each pause ends at the first accepted resume in their sorted list
        # that is after it. A NaN is after no pause (never > t): left out
        # once sorted. The first resume above t is where their running
        # maximum first exceeds t, so it is bisected there: the sorted list
        # itself when it is in order, and what a scan of it finds when a NaN
        # left it out of order (a sort of [5, NaN, 3] leaves it as it is).
        resumes = [
            r
            for r in sorted(o["t"] for _, o in st.events("resume") if o.get("accepted") is True and _num(o.get("t")))
            if r == r
        ]
        highest = list(itertools.accumulate(resumes, max))
        for t in sorted(o["t"] for _, o in st.events("pause") if _num(o.get("t"))):
            k = bisect.bisect_right(highest, t) if t == t else len(resumes)  # a NaN pause: never resumed
            st.pauses.append((t, resumes[k] if k < len(resumes) else float("inf")))

    # -- the stream ---------------------------------------------------------------
    def run(self) -> ModelState:
        try:
            self.root_fd = os.open(self.root_s, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            self.root_fd = None  # records are then looked up by path (and found missing)
        try:
            return self._run()
        finally:
            if self.root_fd is not None:
                os.close(self.root_fd)
                self.root_fd = None

    def _run(self) -> ModelState:
        self.check_draw()
        pending: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        control = {seq for seq, _ in self.st.control}
        for seq, obj in self.ctx.logs.lines(self.log):
            ev = obj.get("event")
            if ev == "attempt":
                pending[str(obj.get("household"))].append((seq, obj))
            elif ev == "household":
                self.household(seq, obj, pending.pop(str(obj.get("household")), []))
            elif seq not in control or type(ev) is not str or ev not in CONTROL_EVENTS:
                # the control scan skips only attempt and household lines
                self.f.fail(1, self.log, seq, f"line of no known event ({ev!r})")
        for h, lines in pending.items():
            for _, o in lines:  # lined: what was journaled for it is counted by its line, not lost
                self.journal.pop((line_hkey(o), o.get("arm"), o.get("pass")), None)
            if self.ctx.logs.stage == UNDER_WAY:  # the crash's if h was under way (verification._check_one)
                self.st.cut_short_records.append(
                    (h, self.log, lines[0][0], f"attempt lines of {h} without a household line")
                )
            else:
                self.f.fail(1, self.log, lines[0][0], f"attempt lines of {h} without a household line")
        for h, named in self.recorded.items():
            self.dir_matches(h, named, 0)
        self.journal_left()
        self.orphans()
        self.unexplained_pauses()
        self.late_costs()
        self.inconclusive()
        self.short_prefixes()
        self.control_times()
        return self.st

    def journaled(self, seq: int, a: dict[str, Any], cost: int) -> None:
        """Invariant 7: an attempt's record counts at least what was journaled
        for it (a call-cost line is written before its cost counts), less
        what it spent after its deadline (late costs)."""
        entry = self.journal.pop((line_hkey(a), a["arm"], a["pass"]), None)
        if entry is None:
            return
        late = sum(
            o.get("cost_nusd") or 0
            for _, o in self.late_named.get(line_hkey(a), ())
            if o.get("arm") == a["arm"] and o.get("pass") == a["pass"]
        )
        self.f.check(7)
        if entry[0] > cost + late:
            self.f.fail(
                7,
                self.log,
                seq,
                f"attempt {line_hkey(a)}/{a['arm']}/{a['pass']} counts {cost} "
                f"nano-dollars (and {late} late), but {entry[0]} were journaled for it",
            )

    def journal_left(self) -> None:
        """Invariant 7: the journaled cost of the attempts that have no line
        (a crash killed them in flight) is the lost cost of the continuation
        that followed the crash, each continuation its own; after the last
        one, it is the crash's in a run cut short, else a violation."""
        conts = sorted((seq, o) for seq, o in self.st.events("continuation"))
        sums = [0] * (len(conts) + 1)
        for key, (nusd, seq, household, rnd) in self.journal.items():
            if self._record_on_disk(household, key[1], key[2], rnd):
                # its record was written before the crash, its attempt line not
                # yet (the continuation that lines it counts its cost): not lost
                continue
            late = [o for _, o in self.late_named.get(key[0], ()) if (o.get("arm"), o.get("pass")) == key[1:]]
            if late:
                # a lost record: its cost is in late costs that say why (late_costs)
                self.f.check(7)
                if nusd > sum(o.get("cost_nusd") or 0 for o in late):
                    self.f.fail(
                        7,
                        self.log,
                        seq,
                        f"{nusd} nano-dollars journaled for {key[0]}/{key[1]}/{key[2]}, "
                        "whose record was lost, are more than its late costs",
                    )
                continue
            k = next((i for i, (cseq, _) in enumerate(conts) if seq < cseq), len(conts))
            sums[k] += nusd
        for (cseq, o), lost in zip(conts, sums):
            self.f.check(7)
            if o.get("lost_nusd") != lost:
                self.f.fail(
                    7,
                    self.log,
                    cseq,
                    f"continuation says {o.get('lost_nusd')!r} nano-dollars were lost "
                    f"with the attempts the crash killed; their journal says {lost}",
                )
        if sums[-1]:
            where = f"{sums[-1]} nano-dollars journaled for attempts that have no attempt line"
            if self.ctx.logs.stage == UNDER_WAY:
                self.f.explain(7, self.log, None, f"{where}: in flight when the run was cut short")
            else:
                self.f.fail(7, self.log, None, where)

    def _record_on_disk(self, household: Any, arm: Any, pass_index: Any, rnd: Any) -> bool:
        try:
            rel = record_relpath(household, arm, pass_index, rnd)
        except (TypeError, ValueError):
            return False
        return os.path.lexists(self.root / rel)

    def control_times(self) -> None:
        """Every control event carries a time and its contract fields, each of
        its kind (RECORDS.md); a line without them is left out of the checks
        that read them, so it fails here, under its invariant."""
        for seq, obj in self.st.control:
            ev = obj.get("event")
            inv = CONTROL_EVENTS.get(ev, 1) if type(ev) is str else 1
            t = obj.get("t")
            if not (type(t) is float or type(t) is int):
                self.f.fail(inv, self.log, seq, f"{ev} line without a numeric t ({t!r})")
            for name, (ok, kind) in CONTROL_FIELDS.get(ev, {}).items() if type(ev) is str else ():
                if not ok(obj.get(name)):
                    self.f.fail(inv, self.log, seq, f"{ev} line: {name} is {obj.get(name)!r}, not {kind}")

    def back_through(self, t: float) -> float:
        return stepped_back_through(self.ctx, t)

    def past_deadline_excused(self, start: float, end: float) -> bool:
        """Whether an attempt that ran past its deadline (on the records'
        clock) may have been missed by the watcher: the run stopped before
        its deadline (on a runner error the main loop joins the lanes and no
        longer watches), or the host evidence overlaps it (a suspended
        machine's wall clock runs on while the monotonic one stands, and
        leaves a gap between samples; a forward step does so too)."""
        if self.run_stop_first <= start + self.deadline_over:
            return True
        try:
            return self.host_is(start, end, None)
        except ValueError:  # a host log the rule cannot read (classify reports it)
            return False
