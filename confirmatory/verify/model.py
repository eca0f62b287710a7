"""One model's records: invariants 1, 2, 3, 5, 6 and the per-attempt half of 7 and 9.

Owns the streaming pass over ``models/<m>/run.jsonl``. Control events (stops,
triggers, pauses, resumes, the ceiling, closes, late costs) are few; they are
picked out first by a raw scan that skips attempt and household lines without
parsing them, so that when the chain-checked pass meets an attempt every stop
and pause it must respect is already known. Attempt lines are buffered per
household until its household line (attempt lines are written first), checked
as a household, and dropped: what stays is a few numbers per household for
the admission replay (`timeline`).
"""

from __future__ import annotations

import bisect
import errno
import io
import itertools
import json
import operator
import os
import re
import stat
from hashlib import sha256
from collections import defaultdict
from dataclasses import dataclass, field

from confirmatory import rules
from confirmatory.chain import NotRegularFile, open_regular, parse_document
from confirmatory.records import (CALL_FIELDS, CALL_KINDS, ERROR_FIELDS, RECORD_FIELDS, is_error_object, model_log,
                                 record_relpath)
from confirmatory.streams import arm_orders, draw_order
from confirmatory.verify.context import RunContext

CALL_SLACK_S = 1.0
# The events of a model's run.jsonl besides attempt and household lines, and
# the invariant that reads each one's time.
CONTROL_EVENTS = {"open": 8, "late-cost": 7, "trigger": 9, "stop": 9, "ceiling": 6, "pause": 6, "resume": 10,
                  "lane-end": 3, "close": 7}
_INT = (lambda v: type(v) is int, "an integer")
_STR = (lambda v: type(v) is str, "a string")
_NUMBER = (lambda v: type(v) in (int, float), "a number")
_COST = (lambda v: type(v) is int and v >= 0, "a non-negative integer")  # spend.Spend.add refuses less
# The contract fields of each control event beyond `t` (RECORDS.md), and their kinds.
CONTROL_FIELDS = {
    "late-cost": {"household": _STR, "arm": _STR, "pass": _INT, "cost_nusd": _COST},
    "trigger": {"cause": (lambda v: v in rules.TRIGGER_CAUSES, f"one of {list(rules.TRIGGER_CAUSES)}"),
                "household": _STR, "arm": _STR, "pass": _INT},
    "stop": {"cause": _STR, "scope": (lambda v: v in ("model", "run"), "model or run")},
    "ceiling": {"total_nusd": _INT, "ceiling_nusd": _INT},
    "pause": {"household": _STR, "arm": _STR, "pass": _INT},
    "resume": {"request_t": _NUMBER, "accepted": (lambda v: type(v) is bool, "true or false")},
    "lane-end": {"lane": _INT, "reason": (lambda v: v in ("done", "refused", "stopped", "ceiling"),
                                          "done, refused, stopped or ceiling")},
    "close": {"spend_nusd": _INT},
}
_TMP_NAME = re.compile(r"\..+\.\d+\.\d+\.tmp")  # chain.write_json_durable's temporary file
ATTEMPT_FIELDS = ("lane", "household", "arm", "pass", "start", "end", "cost_nusd", "record",
                  "record_sha256", "class", "action", "signature")
_RECORD_FIELD_SET, _CALL_FIELD_SET = frozenset(RECORD_FIELDS), frozenset(CALL_FIELDS)
# How far a watched attempt's clock duration may fall short of the deadline
# (a deadline record) or pass it (any other record): see ModelCheck.attempt.
# The watcher measures on time.monotonic; the records' times are the wall
# clock's, which NTP slews by at most 500 ppm (twice that allowed).
DEADLINE_DRIFT = 0.001
DECIDED_KEPT = 4096
# What a rerun pass's wait may fall short of on the records' clock: the
# lane waits on the monotonic clock (Event.wait), and the never-backwards
# clock's times can lag it by the wall clock's backward steps (reported in
# host.jsonl, added where they are) and NTP's slew (DEADLINE_DRIFT).
RERUN_WAIT_SLACK_S = 0.01
_SKIP = (b'"event":"attempt"', b'"event":"household"')
_ATTEMPT_FIELD_SET = frozenset(ATTEMPT_FIELDS)
# The fields a record shares with its attempt line, fetched from each at once.
_AS_LINE = ("household", "arm", "pass", "lane", "start", "end", "cost_nusd")
_SHARED_FIELDS = operator.itemgetter(*_AS_LINE)
_CALL_GET = operator.itemgetter("kind", "start", "end", "cost_nusd", "error")
_ABSENT = object()
_INCONCLUSIVE = rules.Cls.INCONCLUSIVE


def _num(t) -> bool:
    return type(t) is float or type(t) is int


def _start_pass(item: tuple[int, dict]) -> tuple:
    return item[1]["start"], item[1]["pass"]


def lane_in(lane, lanes: int) -> bool:
    """``lane in {0: .., .., lanes - 1: ..}`` without the dictionary (a
    manifest can say any number of lanes): True for a number equal to one of
    them (1.0 and True are lane 1), TypeError for an unhashable lane."""
    hash(lane)
    return type(lane) in (int, bool, float) and 0 <= lane < lanes and lane == int(lane)


_open, _read, _close, _fstat, _is_regular = os.open, os.read, os.close, os.fstat, stat.S_ISREG
_RDONLY = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO must not block the open
_FIRST_READ = 1 << 16  # a record's first read: most records fit (see ModelCheck.read_record)


def stepped_back_through(ctx: RunContext, t: float) -> float:
    """How far the wall clock may have stepped back by the sample after
    ``t``: the steps host.jsonl reports through it, and what a reported step
    may leave unseen (the clock measures from its last reading:
    verify.ClockDrift.unseen)."""
    if not ctx.host.back_max > 0:
        return 0.0
    back = ctx.host.back_until(t)
    unseen = ctx.clock_drift.unseen if ctx.clock_drift is not None else 0.0
    return back + unseen if back > 0 else 0.0


def parse_object(data: bytes):
    """``json.loads(data)``, or None where json.loads raises (the fast
    parser's object where it provably equals it: ``chain.parse_document``)."""
    try:
        return parse_document(data)
    except (ValueError, RecursionError):
        return None


def rule_key(record: dict):
    """What `rules.decide` reads of a record, as a hashable key (None: not cacheable)."""
    err, status = record.get("error"), record.get("status")
    if err is None:
        key = (status, None)
    elif type(err) is not dict:
        return None
    elif not err:
        key = (status, 0)
    else:
        mro = err.get("mro")
        key = (status, err.get("type"), tuple(mro) if type(mro) is list else mro, err.get("status_code"),
               err.get("message"))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _regular(fd: int, rel: str) -> None:
    if not _is_regular(_fstat(fd).st_mode):
        raise NotRegularFile(errno.EINVAL, "not a regular file", rel)


def record_problem(r: dict) -> str:
    """What a record lacks of its fields, or what is wrong with its error (for the message)."""
    missing = [k for k in RECORD_FIELDS if k not in r]
    if missing:
        return f"record lacks {', '.join(missing)}"
    return f"record error is not null or an object with {', '.join(ERROR_FIELDS)} (type a string, mro a list)"


def call_problem(c) -> str:
    if type(c) is not dict:
        return f"a call that is not an object ({type(c).__name__})"
    missing = [k for k in CALL_FIELDS if k not in c]
    if missing:
        return f"call lacks {', '.join(missing)}"
    if c["kind"] not in CALL_KINDS:
        return f"call kind {c['kind']!r} is not one of {list(CALL_KINDS)}"
    return f"call error is not null or an object with {', '.join(ERROR_FIELDS)} (type a string, mro a list)"


def control_events(path) -> list[tuple[int, dict]]:
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


def known_counts(attempts: list[tuple[str, float]], ended: dict[str, float]) -> list[tuple[int, int]]:
    """For the attempts of one inconclusive signature, (household, end) each,
    and the end time of each of their households: per attempt, how many of
    the households had ended before the attempt ended (its own counted: at
    most what its lane could have known when it decided), and how many had
    an attempt end before its own household ended (its own counted: at
    least that). ``len({h} | {x's household: ended[x's] < end})`` and
    ``len({h} | {x's household: x's end < ended[h]})``, by bisection over
    the households' end times and earliest attempt ends instead of a set
    per attempt (quadratic in a run whose runner never stopped); NaN is
    before and after nothing, as in those comparisons."""
    first_end: dict[str, float] = {}
    for h, end in attempts:
        if end == end and not first_end.get(h, end) < end:
            first_end[h] = end
    ends = sorted(t for t in (ended[h] for h in {h for h, _ in attempts}) if t == t)
    earliest = sorted(first_end.values())
    out = []
    for h, end in attempts:
        own = ended[h]
        lower = (bisect.bisect_left(ends, end) if end == end else 0) + (not own < end)
        upper = (bisect.bisect_left(earliest, own) if own == own else 0) + (not first_end.get(h, float("inf")) < own)
        out.append((lower, upper))
    return out


@dataclass(slots=True)
class HouseholdEnd:
    seq: int
    lane: int
    t: float
    finished: bool
    spend: int
    first_start: float | None


@dataclass
class ModelState:
    """What one model's pass leaves for the timeline checks and the totals."""

    name: str
    manifest: dict
    control: list[tuple[int, dict]]
    ends: dict[str, HouseholdEnd] = field(default_factory=dict)
    attempt_cost: int = 0
    # (h, arm, pass) -> (seq, class, end, the rules' stop cause or None) of each attempt with action stop
    stop_attempts: dict[tuple, tuple[int, str, float, str | None]] = field(default_factory=dict)
    halt_t: float = float("inf")
    trigger_t: float = float("inf")
    pauses: list[tuple[float, float]] = field(default_factory=list)
    # the cost of this model's calls that ended before the ceiling event's t,
    # less the slack: counted before the crossing (ModelCheck.attempt)
    ceiling_known_nusd: int = 0
    # ... and of those that ended no later than the slack after it: at most
    # what can have been counted by the crossing (check_totals)
    ceiling_upper_nusd: int = 0
    outcome: str = ""  # how its households ended, for the report (verify.model_outcome)
    # arm results (each ended household's arms, by the class of each arm's
    # last attempt) and how many of them are an observation (ok or model)
    results: int = 0
    observed: int = 0

    def events(self, name: str) -> list[tuple[int, dict]]:
        return [(s, o) for s, o in self.control if o.get("event") == name]


class ModelCheck:
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
        self.lane_end = defaultdict(lambda: float("-inf"))
        self.incon: list[tuple] = []
        self.decided: dict[tuple, rules.Decision] = {}
        self.short: list[tuple] = []  # attempts judged on a prefix without their completing sample
        self.lane_last: dict[int, tuple[str, int]] = {}  # lane -> (household, pass) of its last attempt
        self.any_back = ctx.host.back_max > 0  # most runs: no backward step at all, no lookup per attempt
        self.completion = ctx.host.completion
        self.host_is = ctx.host.is_host
        self.root_fd: int | None = None  # the model folder, while the stream is read
        self.listed: set[str] = set()  # the households whose records folder was listed
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
        # check_totals. No ceiling: no call is counted (-inf).
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
        # (verify.ClockDrift)
        self.deadline_over = deadline + rl.stop_follow_s + ctx.clock_drift.rise + DEADLINE_DRIFT * deadline
        self.run_stop_first = min((t for t in ctx.run_stop_ts if t == t), default=float("inf"))
        # a budget_stop needs its model's stop or trigger (Run.trigger sets the
        # stop at the trigger's t and writes the stop line after it), a run
        # stop or the ceiling, by its end (1 s: a stop_model by another thread
        # writes its line a moment after setting it)
        self.halt_any = min(st.halt_t, st.trigger_t)

    def _procedure_keys(self) -> None:
        """The few control lines that name an attempt, by its (household,
        arm, pass): the pauses (invariant 6: each attempt with action pause
        has its pause) and the late costs (invariant 7: each names an attempt
        abandoned at its deadline). Lines whose fields are not of their kind
        are left out (control_times fails them)."""
        self.pause_of: dict[tuple, list] = {}  # (h, arm, pass) -> [(seq, t)] of its pause lines
        self.late_named: dict[str, list] = {}  # household -> [(seq, late-cost line)] naming it
        self.late_lines: set[tuple] = set()  # the (h, arm, pass) of each attempt line of a late-named household
        self.deadline_keys: set[tuple] = set()  # attempts the rules give stop cause deadline
        self.pause_explained: set[int] = set()  # the seqs of pause lines dated in their paused attempt's window
        self.paused_keys: set[tuple] = set()  # the (h, arm, pass) of every attempt line with action pause
        for seq, o in self.st.control:
            ev = o.get("event")
            if ev != "pause" and ev != "late-cost":
                continue
            h, arm, p = o.get("household"), o.get("arm"), o.get("pass")
            if not (type(h) is str and type(arm) is str and type(p) is int):
                continue
            if ev == "pause":
                if _num(o.get("t")):
                    self.pause_of.setdefault((h, arm, p), []).append((seq, o["t"]))
            else:
                self.late_named.setdefault(h, []).append((seq, o))

    def _times(self) -> None:
        st, ctx = self.st, self.ctx
        stops = [o["t"] for _, o in st.events("stop") if isinstance(o.get("t"), (int, float))]
        ceilings = [o["t"] for _, o in st.events("ceiling") if isinstance(o.get("t"), (int, float))]
        st.halt_t = min([*stops, *ceilings, *ctx.run_stop_ts, ctx.ceiling_t])
        st.trigger_t = min([o["t"] for _, o in st.events("trigger") if isinstance(o.get("t"), (int, float))],
                           default=float("inf"))
        # Each pause ends at the first accepted resume in their sorted list
        # that is after it. A NaN is after no pause (never > t): left out
        # once sorted. The first resume above t is where their running
        # maximum first exceeds t, so it is bisected there: the sorted list
        # itself when it is in order, and what a scan of it finds when a NaN
        # left it out of order (a sort of [5, NaN, 3] leaves it as it is).
        resumes = [r for r in sorted(o["t"] for _, o in st.events("resume")
                                     if o.get("accepted") is True and _num(o.get("t"))) if r == r]
        highest = list(itertools.accumulate(resumes, max))
        for t in sorted(o["t"] for _, o in st.events("pause") if _num(o.get("t"))):
            k = bisect.bisect_right(highest, t) if t == t else len(resumes)  # a NaN pause: never resumed
            st.pauses.append((t, resumes[k] if k < len(resumes) else float("inf")))

    # -- the manifest's draw ------------------------------------------------------
    def check_draw(self) -> None:
        f, mf, where = self.f, self.st.manifest, f"models/{self.st.name}/manifest.json"
        seed = mf.get("seed")
        ok = isinstance(seed, int) and self.draw == draw_order(seed, self.draw)
        f.expect(3, ok, where, None, "draw is not the seeded shuffle of its households")
        arms = sorted(self.ctx.arms or next(iter(self.orders.values()), []))
        try:
            ok = isinstance(seed, int) and self.orders == arm_orders(seed, self.st.name, self.draw, arms)
        except ValueError:
            ok = False
        f.expect(3, ok, where, None, "arm orders are not the model's seeded shuffles")

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
        pending: dict[str, list[tuple[int, dict]]] = defaultdict(list)
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
            self.f.fail(1, self.log, lines[0][0], f"attempt lines of {h} without a household line")
        self.orphans()
        self.unexplained_pauses()
        self.late_costs()
        self.inconclusive()
        self.short_prefixes()
        self.control_times()
        return self.st

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

    def short_prefixes(self) -> None:
        """A lane classifies on a host.jsonl prefix without the sample after
        its pass only when its model has halted (lanes.classify_pass), and
        then runs nothing more: so such an attempt is in its lane's last pass."""
        for seq, lane, h, pass_index in self.short:
            last = self.lane_last.get(lane)
            self.f.expect(2, self.st.halt_t < float("inf") and last == (h, pass_index), self.log, seq,
                          "classified without a host sample after the attempt, yet the model had not "
                          "stopped or its lane ran on")

    def household(self, seq: int, hl: dict, lines: list[tuple[int, dict]]) -> None:
        f, st, log = self.f, self.st, self.log
        h, lane = str(hl.get("household")), hl.get("lane")
        k = self.index.get(h)
        # asked before the check is counted: for an unhashable lane it raises, uncounted
        in_draw = k is not None and lane_in(lane, self.lanes)
        checked = f.checked
        checked[3] += 1
        if not in_draw:  # the message only for a violation (f.expect would build it every time)
            f.fail(3, log, seq, f"household {h} on lane {lane} is not in the draw")
            return
        checked[3] += 2
        expected = self.lane_next.get(lane, int(lane))
        if k != expected:
            f.fail(3, log, seq, f"lane {lane} took {h} (draw index {k}), expected draw index {expected}")
        self.lane_next[lane] = k + self.lanes
        if h in st.ends:
            f.fail(3, log, seq, f"second household line for {h}")
        attempts = []
        for aseq, a in lines:  # nothing here can raise, so its checks are counted after it
            if not a.keys() >= _ATTEMPT_FIELD_SET:
                f.fail(1, log, aseq, "attempt line lacks fields")
                continue
            if a["lane"] != lane:
                f.fail(3, log, aseq, f"attempt on lane {a['lane']} of a lane-{lane} household")
            attempts.append((aseq, a))
        checked[1] += len(lines)
        checked[3] += len(attempts)
        if len(attempts) > 1:
            attempts.sort(key=_start_pass)
        used_before = self.passes(seq, hl, h, attempts)
        spend = 0
        attempt = self.attempt
        for (aseq, a), reruns in zip(attempts, used_before):
            cost = a["cost_nusd"]
            if type(cost) is not int:
                f.fail(7, log, aseq, f"cost_nusd {cost!r} is not an integer")
                cost = int(cost) if isinstance(cost, (int, float)) else 0
            spend += cost
            attempt(aseq, a, reruns)
            if a["action"] == "pause":
                self.paused(aseq, a, hl.get("t"))
        if h in self.late_named:  # (rare) late costs name this household: its attempts' keys
            self.late_lines.update((h, a["arm"], a["pass"]) for _, a in attempts)
        if attempts:
            last = attempts[-1][1]
            self.lane_last[lane] = (h, last["pass"])
            standing = {str(a["arm"]): a["class"] for _, a in attempts}  # in start order: the last stands
            st.results += len(standing)
            st.observed += sum(1 for cls in standing.values() if cls in rules.OBSERVED_CLASSES)
        checked[7] += 1
        if type(hl.get("spend_nusd")) is not int or hl.get("spend_nusd") != spend:
            f.fail(7, log, seq, f"household spend {hl.get('spend_nusd')} is not its attempts' {spend}")
        st.attempt_cost += spend
        self.dir_matches(h, {a["record"] for _, a in attempts}, seq)
        st.ends[h] = HouseholdEnd(seq, lane, hl.get("t"), hl.get("finished") is True, spend,
                                  attempts[0][1]["start"] if attempts else None)
        if attempts:
            f.expect(3, hl.get("t", 0) >= attempts[-1][1]["end"], log, seq, "household ended before its last attempt")

    def passes(self, seq: int, hl: dict, h: str, attempts: list[tuple[int, dict]]) -> list[int]:
        """Pass 0 in arm order, later passes over the arms to rerun or resume, no overlap.

        Returns each attempt's reruns used before it (its arm's earlier
        attempts), in the order of ``attempts``: what the rules decided it with."""
        f, log, max_reruns = self.f, self.log, self.ctx.rules.max_reruns
        order = list(self.orders.get(h) or [])
        # reruns: arm -> its attempts so far less one, the reruns_used that
        # rules.next_pass_arms reads (only attempted arms are in it)
        expected, actions, reruns = list(order), {}, {}
        pass_index, stop_seen = 0, False
        lane = hl.get("lane")
        prev_end = self.lane_end[lane]
        checked = f.checked
        used_before = []
        wait_base = self.ctx.rules.rerun_wait_s
        for aseq, a in attempts:
            start, arm = a["start"], a["arm"]
            checked[3] += 3
            if not start >= prev_end:
                f.fail(3, log, aseq, f"attempt starts at {a['start']} before the lane's previous one ended ({prev_end})")
            if not expected and not stop_seen:
                expected = rules.next_pass_arms(order, actions, reruns_used=reruns, max_reruns=max_reruns)
                actions, pass_index = {}, pass_index + 1
                if wait_base > 0:
                    self.rerun_waited(aseq, start, prev_end, pass_index, wait_base)
            end = a["end"]
            if end > prev_end:  # noqa: PLR1730 - max(prev_end, end) without the call, on the hot path
                prev_end = end
            if not (expected and arm == expected[0] and a["pass"] == pass_index):
                f.fail(3, log, aseq, f"attempt {a['arm']}/{a['pass']} out of order (expected "
                       + (f"{expected[0]}/{pass_index})" if expected else "none)"))
            if expected:
                expected.pop(0)
            n = reruns.get(arm, -1) + 1
            reruns[arm] = n
            if n > max_reruns:
                f.fail(3, log, aseq, f"arm {a['arm']} rerun more than {max_reruns} times")
            said = a.get("reruns_used", _ABSENT)  # an optional field
            if said is not _ABSENT:
                checked[3] += 1
                if said != n:
                    f.fail(3, log, aseq, "reruns_used is not the arm's earlier attempts")
            used_before.append(n)
            action = a["action"]
            actions[arm] = action
            stop_seen = stop_seen or action == "stop"
        self.lane_end[lane] = prev_end
        if hl.get("finished") is True:
            rest = expected or rules.next_pass_arms(order, actions, reruns_used=reruns, max_reruns=max_reruns)
            checked[3] += 1
            if rest or not order:  # the message (a list's repr) only for a violation
                f.fail(3, log, seq, f"household {h} marked finished with {rest or order} still to run")
            # stop_seen: whether any attempt's action is stop
            f.expect(3, not stop_seen, log, seq, "a finished household has a stop action")
        else:
            self.cut_short(seq, hl, h, stop_seen)
        return used_before

    def rerun_waited(self, seq: int, start: float, before_end: float, pass_index: int, wait_base: float) -> None:
        """Invariant 3: a rerun pass starts no sooner than the design's wait
        (``rules.rerun_wait_s``) after the pass before it ended: the lane
        waits that long once it has classified that pass."""
        need = rules.rerun_wait_s(wait_base, pass_index)
        self.f.checked[3] += 1
        gap = start - before_end
        if gap >= need:
            return
        short = RERUN_WAIT_SLACK_S + DEADLINE_DRIFT * need + self.back_through(start)
        if not gap >= need - short:
            self.f.fail(3, self.log, seq, f"pass {pass_index} starts {gap:.3f} s after the pass before it ended; "
                        f"the design waits {need:g} s before it (rerun_wait_s {wait_base:g}, doubled each pass)")

    def cut_short(self, seq: int, hl: dict, h: str, stop_seen: bool) -> None:
        """Invariant 3: a household ends unfinished only when something cut it
        short. `finished` is true or false. A false one has an attempt with
        action stop (its trigger is invariant 9's), or its model halted (a
        trigger or stop of its model, a stop of the run, the ceiling) no
        later than `stop_follow_s` after the household's end: the lanes end a
        household early only on a stop action, on a halt (`Lane._halted`: a
        model's stop is flagged under the ceiling's lock before its line's
        time is taken, so that time may follow the household's end a little)
        or on a runner error, which stops the run when its lane has written
        the household's lines. (That the lane then takes no next household is
        checked with the decisions, `timeline.check_admission`.)"""
        f, finished = self.f, hl.get("finished")
        f.checked[3] += 1
        if finished is not False:
            f.fail(3, self.log, seq, f"household {h}: finished is {finished!r}, not true or false")
            return
        if stop_seen:
            return
        t, st = hl.get("t"), self.st
        halt = min(st.halt_t, st.trigger_t)
        if not (_num(t) and halt <= t + self.ctx.rules.stop_follow_s):
            f.fail(3, self.log, seq, f"household {h} ended unfinished at {t!r} with no attempt of action stop and "
                   f"no stop, trigger or ceiling by {self.ctx.rules.stop_follow_s} s after it"
                   + (f" (the first at {halt})" if halt < float("inf") else ""))

    def paused(self, seq: int, a: dict, household_t) -> None:
        """Invariant 6: an attempt with action pause paused its model: a pause
        line names it, dated after the attempt ended and no later than its
        household's end (the lane pauses as the attempt ends, or when it
        classifies the pass, before it ends the household: `Lane._consequence`)."""
        key = (a["household"], a["arm"], a["pass"])
        end = a["end"]
        self.f.checked[6] += 1
        self.paused_keys.add(key)
        found = False
        for pseq, t in self.pause_of.get(key, ()):
            if end <= t and not (_num(household_t) and t > household_t):
                self.pause_explained.add(pseq)
                found = True
        if found:
            return
        self.f.fail(6, self.log, seq, f"attempt {key[0]}/{key[1]}/{key[2]} has action pause but no pause line "
                    f"dated from its end ({end}) to its household's end ({household_t})")

    def unexplained_pauses(self) -> None:
        """Invariant 6, the other way: every pause line is a paused attempt's
        (a lane pauses its model only for an attempt whose action is pause,
        `Lane._consequence`), dated from that attempt's end to its household's
        end. A pause with no such attempt held the model's lanes for no
        reason the records give (a run killed during a pause, whose household
        never ended, has its paused attempt in no line: it fails here too)."""
        f = self.f
        for key, lines in self.pause_of.items():
            f.checked[6] += len(lines)
            for seq, t in lines:
                if seq in self.pause_explained:
                    continue
                if key in self.paused_keys:
                    f.fail(6, self.log, seq, f"pause line at {t} names {key[0]}/{key[1]}/{key[2]}, but is not dated "
                           "from that attempt's end to its household's end")
                else:
                    f.fail(6, self.log, seq, f"pause line names {key[0]}/{key[1]}/{key[2]}, which has no attempt "
                           "line with action pause")

    def late_costs(self) -> None:
        """Invariant 7: a late cost is money spent outside any record: by an
        attempt abandoned at its deadline, after it (`AttemptSpend.add_call`),
        or by an attempt whose record could not be written (`Lane.run_attempt`:
        the line then says why in `reason`, the attempt has no line, its
        household ended unfinished and the run stops, cause runner-error).
        Its amount is a non-negative integer."""
        f, st = self.f, self.st
        runner_error = None
        for h, lines in self.late_named.items():
            for seq, o in lines:
                f.checked[7] += 1  # (its amount: a control field, non-negative, CONTROL_FIELDS)
                key = (h, o["arm"], o["pass"])
                if key in self.deadline_keys:
                    continue
                if key in self.late_lines:
                    f.fail(7, self.log, seq, f"late cost names {h}/{key[1]}/{key[2]}, an attempt not abandoned "
                           "at its deadline")
                    continue
                if runner_error is None:
                    runner_error = any(s.get("cause") == "runner-error" and s.get("scope") == "run"
                                       for _, s in st.events("stop"))
                end = st.ends.get(h)
                if not (type(o.get("reason")) is str and runner_error and end is not None and not end.finished):
                    f.fail(7, self.log, seq, f"late cost names {h}/{key[1]}/{key[2]}, no attempt of the model "
                           "(nor one whose record was lost: a reason, an unfinished household, a runner-error stop)")

    def attempt(self, seq: int, a: dict, reruns: int) -> None:
        # The hot path: one record file per attempt. Messages are built only
        # for violations; checks are counted in bulk; the line's start and
        # end, read by most checks, are looked up once (and handed to classify).
        f, st, log = self.f, self.st, self.log
        checked = f.checked
        checked[1] += 2
        rel = a["record"]
        if rel != f"records/{a['household']}/{a['arm']}/{a['pass']}.json":
            f.fail(1, log, seq, f"record path {rel} is not {record_relpath(a['household'], a['arm'], a['pass'])}")
        want = a["record_sha256"]
        try:
            data = self.read_record(rel, False)
            digest = sha256(data).hexdigest()
            if digest != want and len(data) < _FIRST_READ:
                data = self.read_record(rel, True)  # perhaps a short read: once more, to the end
                digest = sha256(data).hexdigest()
        except NotRegularFile:
            f.fail(1, log, seq, f"record {rel} is not a regular file")
            return
        except (OSError, TypeError, ValueError):
            f.fail(1, log, seq, f"record {rel} missing")
            return
        if digest != want:
            f.fail(1, log, seq, f"record {rel} does not hash as its line says")
            return
        r = parse_object(data)
        if not isinstance(r, dict):
            f.fail(1, f"models/{st.name}/{rel}", None, "record is not a JSON object")
            return
        checked[1] += 2
        start, end = a["start"], a["end"]
        if r.keys() >= _RECORD_FIELD_SET:
            # the common record: its fields fetched at once (the line's were
            # known to be there when the household was read)
            if r["error"] is not None and not is_error_object(r["error"]):
                f.fail(1, f"models/{st.name}/{rel}", None, record_problem(r))
            agrees = r["model"] == st.name and _SHARED_FIELDS(r) == _SHARED_FIELDS(a)
        else:
            f.fail(1, f"models/{st.name}/{rel}", None, record_problem(r))
            agrees = r.get("model") == st.name and tuple(r.get(k) for k in _AS_LINE) == _SHARED_FIELDS(a)
        if not agrees:
            f.fail(1, f"models/{st.name}/{rel}", None, "record disagrees with its attempt line")
        calls = r.get("calls")
        if type(calls) is not list:
            if "calls" in r:  # (a record without it failed above)
                f.fail(1, f"models/{st.name}/{rel}", None, "record calls is not a list")
            calls = []
        # An attempt is an interval: its end is never before its start (the
        # runner reads both from the never-backwards clock, the end after).
        if not end >= start:
            f.fail(5, log, seq, f"attempt ends at {end}, before its start {start}")
        # Call times are raw time.time(); attempt times are the never-backwards
        # clock's. A wall clock that stepped back (the host log shows by how
        # much) can put raw times, even a call's end before its start, that
        # much earlier: widen the slack by the steps reported up to the sample
        # that completes this attempt, as the host rules do (DESIGN.md "Host
        # evidence"); a step reported later cannot excuse this attempt.
        back = self.back_through(a["end"]) if self.any_back else 0.0
        slack = CALL_SLACK_S + back
        lo, hi = start - slack, end + slack
        n_calls = len(calls)
        cost = known = upper = 0
        cut, top = self.ceiling_cut, self.ceiling_top
        for c in calls:
            if type(c) is dict and c.keys() >= _CALL_FIELD_SET:
                kind, cs, ce, cc, err = _CALL_GET(c)  # the common call: its fields at once
                if kind not in CALL_KINDS or (err is not None and not is_error_object(err)):
                    f.fail(1, f"models/{st.name}/{rel}", None, call_problem(c))
            else:
                f.fail(1, f"models/{st.name}/{rel}", None, call_problem(c))
                if type(c) is not dict:
                    continue
                cs, ce, cc = c.get("start"), c.get("end"), c.get("cost_nusd")
            # A call's end may precede its start by the step back and the
            # same slack: the clock measures a step from its own last
            # reading (confirmatory.clock), so a call begun after that
            # reading is set back further than host.jsonl reports (by the
            # time between them; a clean run fell short by 60 us)
            if not (isinstance(cs, (int, float)) and isinstance(ce, (int, float))
                    and lo <= cs <= hi and lo <= ce <= hi and cs <= ce + slack):
                f.fail(5, f"models/{st.name}/{rel}", None, f"call {c.get('kind')} {cs}..{ce} outside the attempt {start}..{end}")
            if type(cc) is not int:
                f.fail(7, f"models/{st.name}/{rel}", None, f"call cost_nusd {cc!r} is not an integer")
                cc = int(cc) if isinstance(cc, (int, float)) else 0
            elif cc < 0:  # spend.Spend.add refuses it: counted spend never goes down
                f.fail(7, f"models/{st.name}/{rel}", None, f"call cost_nusd {cc} is negative")
            cost += cc
            if type(ce) is float or type(ce) is int:
                if ce < cut:
                    known += cc
                if not ce > top:  # (a NaN end is taken, as a non-numeric one)
                    upper += cc
            else:
                upper += cc
        st.ceiling_known_nusd += known
        st.ceiling_upper_nusd += upper
        # the record's checks above and below, counted at once
        checked[1] += n_calls
        checked[5] += 1 + n_calls
        checked[7] += 1 + n_calls
        if cost != r.get("cost_nusd") or type(r.get("cost_nusd")) is not int:
            f.fail(7, f"models/{st.name}/{rel}", None, f"record cost {r.get('cost_nusd')} is not its calls' {cost}")
        d = self.classify(seq, a, r, reruns, start, end)
        # Invariant 2, the record's status against the rules it claims:
        # "deadline" (class harness) only for an attempt that reached its
        # deadline, any other only for one the watcher had not yet abandoned
        # (Run._tick: abandoned once time.monotonic() passes the deadline
        # after its start); "budget_stop" (class stopped: the runner ended the
        # conversation) only once its model or the run had stopped or the
        # ceiling was crossed.
        status = r.get("status")
        checked[2] += 1
        if status == "deadline":
            if not end - start >= self.deadline_s - self.deadline_short - back:
                f.fail(2, log, seq, f"a deadline record for an attempt of {end - start:.3f} s, under the "
                       f"deadline of {self.deadline_s:g} s")
        elif end - start > self.deadline_over and not self.past_deadline_excused(start, end):
            f.fail(2, log, seq, f"attempt of {end - start:.3f} s, past the deadline of {self.deadline_s:g} s, "
                   f"ended {status!r}, not abandoned")
        if status == "budget_stop":
            checked[2] += 1
            if not end + CALL_SLACK_S >= self.halt_any:
                f.fail(2, log, seq, f"budget_stop at {end}, but its model had not stopped, nor the run, nor was "
                       "the ceiling crossed")
        checked[6] += 1 + len(st.pauses)
        checked[9] += 1
        if start > st.halt_t:
            f.fail(6, log, seq, f"attempt starts at {start} after a stop or the ceiling ({st.halt_t})")
        if self.pause_at and start == start:
            j = bisect.bisect_left(self.pause_at, start)           # the pauses begun before start
            i = bisect.bisect_right(self.pause_until, start, 0, j)  # ... from the first to end after it
            # the ends rise: every pause in [i, j) ends after start, so j - i
            # violations, only those the report keeps built (in a log of
            # pauses never resumed every later attempt is in each)
            k = i
            while k < j and f.keeps(6):
                p, resumed = self.pauses_kept[k]
                f.fail(6, log, seq, f"attempt starts at {start} during the pause from {p} to {resumed}")
                k += 1
            f.tally(6, j - k)
        if start > st.trigger_t:
            f.fail(9, log, seq, f"attempt starts at {start} after a trigger at {st.trigger_t}")
        cause = None if d is None else d.stop_cause
        if cause is not None or a["action"] == "stop":
            key = (a["household"], a["arm"], a["pass"])
            if cause == "deadline":
                self.deadline_keys.add(key)
            if a["action"] == "stop":
                if cause is None and d is not None and d.cls is _INCONCLUSIVE:
                    cause = "inconclusive"
                st.stop_attempts[key] = (seq, a["class"], end, cause)

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

    def read_record(self, rel: str, to_eof: bool) -> bytes:
        """A record file's bytes, relative to the model folder: open, read,
        close, the fewest system calls. A first read shorter than its buffer
        is taken as the whole file (on Linux a regular file's read is short
        only at its end) unless ``to_eof``, which reads on until a read
        returns nothing: the caller asks again so when the bytes do not hash
        as their line says, for a read a signal cut short.

        Whatever reads on first makes sure it reads a regular file
        (`NotRegularFile` if not): a device never ends (/dev/zero), a FIFO
        may block. The open itself never blocks, and the first read of a
        FIFO returns at once (with nothing, with what it holds, or with
        BlockingIOError); only the bytes of a regular file can then pass."""
        if self.root_fd is None:
            fd = _open(os.path.join(self.root_s, rel), _RDONLY)
        else:
            fd = _open(rel, _RDONLY, dir_fd=self.root_fd)
        try:
            if to_eof:
                _regular(fd, rel)
            try:
                data = _read(fd, _FIRST_READ)
            except (BlockingIOError, IsADirectoryError):  # never so for a regular file
                _regular(fd, rel)
                raise
            if data and (to_eof or len(data) == _FIRST_READ):
                if not to_eof:
                    _regular(fd, rel)
                parts = [data]
                while chunk := _read(fd, 1 << 20):
                    parts.append(chunk)
                if len(parts) > 1:
                    data = b"".join(parts)
        finally:
            _close(fd)
        return data

    def classify(self, seq: int, a: dict, r: dict, reruns: int, start: float, end: float) -> rules.Decision | None:
        """Class, action and signature recomputed with the rules. The rules read
        only the record's status and error and whether the host gave reasons,
        so their answer is kept per distinct (status, error, host, reruns).
        Returns the rules' decision (None: the record could not be classified)."""
        f, rl = self.f, self.ctx.rules
        try:
            # Judged on the host.jsonl prefix the lane decided on (its line
            # says how many lines); a prefix can only add "no sample after".
            limit = a.get("host_lines")
            if type(limit) is not int:
                limit = None
            host = self.host_is(start, end, limit)
            if host and limit is not None:
                # A prefix cut before the sample that completes the attempt:
                # allowed only at a halt (see short_prefixes) when the whole
                # log would have found the attempt clean.
                done = self.completion(end)
                if done is not None and done >= limit and not self.host_is(start, end, None):
                    self.short.append((seq, a["lane"], a["household"], a["pass"]))
            key = rule_key(r)
            if key is None:
                d = rules.decide(r, ("host",) if host else (), reruns_used=reruns, max_reruns=rl.max_reruns,
                                 precedence=rl.precedence, class_lists=rl.class_lists)
            else:
                key = (key, host, reruns)
                d = self.decided.get(key)
                if d is None:
                    d = rules.decide(r, ("host",) if host else (), reruns_used=reruns,
                                     max_reruns=rl.max_reruns, precedence=rl.precedence, class_lists=rl.class_lists)
                    if len(self.decided) >= DECIDED_KEPT:
                        self.decided.clear()  # bounded: distinct error messages must not grow memory
                    self.decided[key] = d
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            f.fail(2, self.log, seq, f"cannot classify: {exc}")
            return None
        f.checked[2] += 3
        if a["class"] != d.cls:
            # the host's reasons only for a violation the report keeps (the
            # verdict lists every mark in the window: thousands, in a forged log)
            reasons = list(self.ctx.host_verdict(start, end).reasons) if f.keeps(2) else "..."
            f.fail(2, self.log, seq, f"class {a['class']}, the rules give {d.cls} (host: {reasons})")
        if a["signature"] != d.signature:
            f.fail(2, self.log, seq, "signature is not the error's")
        if d.cls is _INCONCLUSIVE:
            self.incon.append((seq, a, d, reruns))
        elif a["action"] != d.action:
            f.fail(2, self.log, seq, f"action {a['action']}, the rules give {d.action}")
        return d

    def inconclusive(self) -> None:
        """The inconclusive stop, bounded by what the lanes could have known when they decided."""
        rl, ends = self.ctx.rules, self.st.ends
        by_sig: dict[str, list[tuple]] = defaultdict(list)
        for item in self.incon:
            by_sig[item[2].signature].append(item)
        for sig, items in by_sig.items():
            counts = known_counts([(a["household"], a["end"]) for _, a, _, _ in items],
                                  {x[1]["household"]: ends[x[1]["household"]].t for x in items})
            for (seq, a, d, reruns), (lower, upper) in zip(items, counts):
                keep = rules.action_for(d.cls, reruns_used=reruns, max_reruns=rl.max_reruns)
                if lower > rl.inconclusive_limit:
                    allowed = {"stop"}
                elif upper <= rl.inconclusive_limit:
                    allowed = {str(keep)}
                else:
                    allowed = {"stop", str(keep)}
                self.f.expect(2, a["action"] in allowed, self.log, seq,
                              f"action {a['action']}, the inconclusive rule allows {sorted(allowed)}")

    def dir_matches(self, h: str, listed: set[str], seq: int) -> None:
        """No file under records/<h>/ lacks an attempt line (a write's
        temporary file inside an arm folder, left by a crash, excepted).
        Each household's folder is listed once: a repeated household line
        (reported by its own check) does not list and report it again."""
        if h in self.listed:
            return
        self.listed.add(h)
        base = os.path.join(self.root_s, "records", h)
        extra = []
        try:
            entries = list(os.scandir(base))
        except FileNotFoundError:
            entries = []
        prefix = f"records/{h}/"
        for arm in entries:
            if arm.is_dir():
                folder = f"{prefix}{arm.name}/"
                for n in os.listdir(arm.path):
                    if folder + n not in listed and not (n[:1] == "." and _TMP_NAME.fullmatch(n)):
                        extra.append(folder + n)
            elif prefix + arm.name not in listed:
                extra.append(prefix + arm.name)
        self.f.checked[1] += 1
        for rel in sorted(extra):
            self.f.fail(1, f"models/{self.st.name}/{rel}", None, "record file without an attempt line")

    def orphans(self) -> None:
        base = self.root / "records"
        if base.is_dir():
            for h in sorted(os.listdir(base)):
                if h not in self.st.ends:
                    self.f.fail(1, f"models/{self.st.name}/records/{h}", None, "records of a household without a household line")
