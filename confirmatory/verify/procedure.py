"""A model's procedure, household by household: invariant 3, the pauses of 6, the late costs of 7.

Owns `ProcedureChecks`, the part of `model.ModelCheck` that checks what the
lanes did: the manifest's draw and arm orders are the model's seeded
shuffles; each household is on its lane, in draw order; its passes run the
arms in order, rerun as the rules allow, each rerun pass after its wait; a
household ends unfinished only when something cut it short; its spend is
its attempts' (7); every attempt with action pause paused its model and
every pause line is such an attempt's (6); every late cost names an attempt
abandoned at its deadline, or one whose record was lost (7).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from confirmatory.core import rules
from confirmatory.core.streams import arm_orders, draw_order
from confirmatory.verify.clocks import DEADLINE_DRIFT, RERUN_WAIT_SLACK_S, _num
from confirmatory.verify.report import UNDER_WAY
from confirmatory.verify.state import HouseholdEnd, hkey, line_hkey

if TYPE_CHECKING:
    from collections import defaultdict

    from confirmatory.verify.context import RunContext
    from confirmatory.verify.report import Findings
    from confirmatory.verify.state import ModelState

ATTEMPT_FIELDS = (
    "lane",
    "household",
    "arm",
    "pass",
    "start",
    "end",
    "cost_nusd",
    "record",
    "record_sha256",
    "class",
    "action",
    "signature",
)
_ATTEMPT_FIELD_SET = frozenset(ATTEMPT_FIELDS)
_ABSENT = object()
_Key = tuple[Any, ...]  # an attempt's (household run, arm, pass), as a line names it


def _start_pass(item: tuple[int, dict[str, Any]]) -> tuple[Any, Any]:
    return item[1]["start"], item[1]["pass"]


def tally_classes(st: ModelState, attempts: list[tuple[int, dict[str, Any]]], standing: dict[str, Any]) -> None:
    """A household's counts for the report (``ModelState.standing`` and the
    rest): its arm results by the class that stands, its attempts by class,
    and each rerun (an attempt of pass >= 1) by the class of the attempt of
    its arm it replaced. ``attempts`` in start order."""
    for cls in standing.values():
        st.standing[str(cls)] += 1
    before: dict[Any, str] = {}
    for _, a in attempts:
        cls = str(a["class"])
        st.attempt_classes[cls] += 1
        arm = a["arm"]
        if a["pass"] and arm in before:
            st.rerun_classes[before[arm]] += 1
        before[arm] = cls


def lane_in(lane: Any, lanes: int) -> bool:
    """``lane in {0: .., .., lanes - 1: ..}`` without the dictionary (a
    manifest can say any number of lanes): True for a number equal to one of
    them (1.0 and True are lane 1), TypeError for an unhashable lane."""
    hash(lane)
    return type(lane) in (int, bool, float) and 0 <= lane < lanes and lane == int(lane)


class ProcedureChecks:
    """`model.ModelCheck`'s checks of the draw, the lanes, the passes, the pauses and the late costs."""

    if TYPE_CHECKING:  # what these checks read of model.ModelCheck (set in its __init__) and its other bases
        ctx: RunContext
        f: Findings
        log: str
        st: ModelState
        lanes: int
        draw: list[Any]
        index: dict[Any, int]
        orders: Any
        lane_next: dict[int, int]
        lane_end: defaultdict[Any, float]
        lane_last: dict[int, tuple[str, int]]
        recorded: dict[str, set[str]]
        journal: dict[tuple[str, Any, Any], list[Any]]

        def attempt(self, seq: int, a: dict[str, Any], reruns: int) -> None: ...

        def journaled(self, seq: int, a: dict[str, Any], cost: int) -> None: ...

        def back_through(self, t: float) -> float: ...

    def _procedure_keys(self) -> None:
        """The few control lines that name an attempt, by its (household,
        arm, pass): the pauses (invariant 6: each attempt with action pause
        has its pause) and the late costs (invariant 7: each names an attempt
        abandoned at its deadline). Lines whose fields are not of their kind
        are left out (control_times fails them)."""
        self.pause_of: dict[_Key, list[tuple[int, Any]]] = {}  # (h, arm, pass) -> [(seq, t)] of its pause lines
        # household -> [(seq, late-cost line)] naming it
        self.late_named: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.late_lines: set[_Key] = set()  # the (h, arm, pass) of each attempt line of a late-named household
        self.deadline_keys: set[_Key] = set()  # attempts the rules give stop cause deadline
        self.pause_explained: set[int] = set()  # the seqs of pause lines dated in their paused attempt's window
        self.paused_keys: set[_Key] = set()  # the (h, arm, pass) of every attempt line with action pause
        for seq, o in self.st.control:
            ev = o.get("event")
            if ev != "pause" and ev != "late-cost":
                continue
            h, arm, p = o.get("household"), o.get("arm"), o.get("pass")
            if not (type(h) is str and type(arm) is str and type(p) is int):
                continue
            hk = line_hkey(o)
            if ev == "pause":
                if _num(o.get("t")):
                    self.pause_of.setdefault((hk, arm, p), []).append((seq, o["t"]))
            else:
                self.late_named.setdefault(hk, []).append((seq, o))

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

    def household(self, seq: int, hl: dict[str, Any], lines: list[tuple[int, dict[str, Any]]]) -> None:
        f, st, log = self.f, self.st, self.log
        lane: Any  # the line's, of any kind (lane_in checks it)
        h, lane = str(hl.get("household")), hl.get("lane")
        rnd = hl.get("round", 0)
        hk = hkey(h, rnd)
        k = self.index.get(h)
        # asked before the check is counted: for an unhashable lane it raises, uncounted
        in_draw = k is not None and lane_in(lane, self.lanes)
        checked = f.checked
        checked[3] += 1
        if not in_draw:  # the message only for a violation (f.expect would build it every time)
            f.fail(3, log, seq, f"household {h} on lane {lane} is not in the draw")
            return
        assert k is not None  # (in_draw)
        checked[3] += 2
        expected = self.lane_next.get(lane, int(lane))
        if k != expected:
            f.fail(3, log, seq, f"lane {lane} took {h} (draw index {k}), expected draw index {expected}")
        crash = hl.get("cut_by") == "crash"
        # a household the crash cut short is its lane's next again: it runs again whole
        self.lane_next[lane] = k if crash else k + self.lanes
        if hk in st.ends:
            f.fail(3, log, seq, f"second household line for {hk}")
        if rnd:
            before = st.ends.get(hkey(h, rnd - 1)) if type(rnd) is int else None
            if before is None or not before.crash:
                f.fail(
                    3, log, seq, f"household {h} runs at round {rnd!r} without its round before cut short by a crash"
                )
        attempts = []
        for aseq, a in lines:  # nothing here can raise, so its checks are counted after it
            if not a.keys() >= _ATTEMPT_FIELD_SET:
                f.fail(1, log, aseq, "attempt line lacks fields")
                continue
            if a["lane"] != lane:
                f.fail(3, log, aseq, f"attempt on lane {a['lane']} of a lane-{lane} household")
            if a.get("round", 0) != rnd:
                f.fail(1, log, aseq, f"attempt of round {a.get('round', 0)!r} in round {rnd!r} of {h}")
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
            if self.journal:
                self.journaled(aseq, a, cost)
            if a["action"] == "pause":
                self.paused(aseq, a, hl.get("t"))
        if hk in self.late_named:  # (rare) late costs name this household: its attempts' keys
            self.late_lines.update((hk, a["arm"], a["pass"]) for _, a in attempts)
        if attempts:
            last = attempts[-1][1]
            self.lane_last[lane] = (h, last["pass"])
            # in start order: the last stands (none of a round a crash cut short: its household ran again)
            standing = {} if crash else {str(a["arm"]): a["class"] for _, a in attempts}
            st.results += len(standing)
            st.observed += sum(1 for cls in standing.values() if cls in rules.OBSERVED_CLASSES)
            tally_classes(st, attempts, standing)
            for cls in standing.values():
                st.by_class[str(cls)] = st.by_class.get(str(cls), 0) + 1
        checked[7] += 1
        if type(hl.get("spend_nusd")) is not int or hl.get("spend_nusd") != spend:
            f.fail(7, log, seq, f"household spend {hl.get('spend_nusd')} is not its attempts' {spend}")
        st.attempt_cost += spend
        # (its folder is listed once every round of it is read: ModelCheck._run)
        self.recorded.setdefault(h, set()).update(a["record"] for _, a in attempts)
        st.ends[hk] = HouseholdEnd(
            seq,
            lane,
            cast(Any, hl.get("t")),
            hl.get("finished") is True,
            spend,
            attempts[0][1]["start"] if attempts else None,
            crash,
        )
        if attempts:
            f.expect(3, hl.get("t", 0) >= attempts[-1][1]["end"], log, seq, "household ended before its last attempt")

    def passes(self, seq: int, hl: dict[str, Any], h: str, attempts: list[tuple[int, dict[str, Any]]]) -> list[int]:
        """Pass 0 in arm order, later passes over the arms to rerun or resume, no overlap.

        Returns each attempt's reruns used before it (its arm's earlier
        attempts), in the order of ``attempts``: what the rules decided it with."""
        f, log, max_reruns = self.f, self.log, self.ctx.rules.max_reruns
        order = list(self.orders.get(h) or [])
        # reruns: arm -> its attempts so far less one, the reruns_used that
        # rules.next_pass_arms reads (only attempted arms are in it)
        actions: dict[str, Any]
        reruns: dict[str, int]
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
                f.fail(
                    3, log, aseq, f"attempt starts at {a['start']} before the lane's previous one ended ({prev_end})"
                )
            if not expected and not stop_seen:
                expected = rules.next_pass_arms(order, actions, reruns_used=reruns, max_reruns=max_reruns)
                actions, pass_index = {}, pass_index + 1
                if wait_base > 0:
                    self.rerun_waited(aseq, start, prev_end, pass_index, wait_base)
            end = a["end"]
            if end > prev_end:  # noqa: PLR1730 - max(prev_end, end) without the call, on the hot path
                prev_end = end
            if not (expected and arm == expected[0] and a["pass"] == pass_index):
                f.fail(
                    3,
                    log,
                    aseq,
                    f"attempt {a['arm']}/{a['pass']} out of order (expected "
                    + (f"{expected[0]}/{pass_index})" if expected else "none)"),
                )
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
            self.f.fail(
                3,
                self.log,
                seq,
                f"pass {pass_index} starts {gap:.3f} s after the pass before it ended; "
                f"the design waits {need:g} s before it (rerun_wait_s {wait_base:g}, doubled each pass)",
            )

    def cut_short(self, seq: int, hl: dict[str, Any], h: str, stop_seen: bool) -> None:
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
        if hl.get("cut_by") == "crash":
            # cut short by a crash: at the crash's stop (a continuation's
            # crash_t), whatever its attempts' actions were
            f.expect(
                3,
                hl.get("t") in self.ctx.crash_ts,
                self.log,
                seq,
                f"household {h} says a crash cut it short at {hl.get('t')!r}, but no continuation names a "
                "crash at that instant",
            )
            return
        if stop_seen:
            return
        t: Any  # the line's, of any kind (_num checks it)
        t, st = hl.get("t"), self.st
        halt = min(st.halt_t, st.trigger_t, *st.ended_halts)
        if not (_num(t) and halt <= t + self.ctx.rules.stop_follow_s):
            f.fail(
                3,
                self.log,
                seq,
                f"household {h} ended unfinished at {t!r} with no attempt of action stop and "
                f"no stop, trigger or ceiling by {self.ctx.rules.stop_follow_s} s after it"
                + (f" (the first at {halt})" if halt < float("inf") else ""),
            )

    def paused(self, seq: int, a: dict[str, Any], household_t: Any) -> None:
        """Invariant 6: an attempt with action pause paused its model: a pause
        line names it, dated after the attempt ended and no later than its
        household's end (the lane pauses as the attempt ends, or when it
        classifies the pass, before it ends the household: `Lane._consequence`)."""
        key = (line_hkey(a), a["arm"], a["pass"])
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
        self.f.fail(
            6,
            self.log,
            seq,
            f"attempt {key[0]}/{key[1]}/{key[2]} has action pause but no pause line "
            f"dated from its end ({end}) to its household's end ({household_t})",
        )

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
                    f.fail(
                        6,
                        self.log,
                        seq,
                        f"pause line at {t} names {key[0]}/{key[1]}/{key[2]}, but is not dated "
                        "from that attempt's end to its household's end",
                    )
                elif self.ctx.logs.stage == UNDER_WAY and key[0] not in self.st.ends:
                    # its household was under way when the run was cut short:
                    # its attempt line was never written (a continuation writes it)
                    f.explain(
                        6,
                        self.log,
                        seq,
                        f"pause line names {key[0]}/{key[1]}/{key[2]}, whose household "
                        "was under way when the run was cut short (its attempt line is not written)",
                    )
                else:
                    f.fail(
                        6,
                        self.log,
                        seq,
                        f"pause line names {key[0]}/{key[1]}/{key[2]}, which has no attempt line with action pause",
                    )

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
                    f.fail(
                        7,
                        self.log,
                        seq,
                        f"late cost names {h}/{key[1]}/{key[2]}, an attempt not abandoned at its deadline",
                    )
                    continue
                if runner_error is None:
                    # in this log, or in run.jsonl only: a disk that failed may
                    # have torn the stop's copy here (a continuation copies it)
                    runner_error = any(
                        s.get("cause") == "runner-error" and s.get("scope") == "run"
                        for _, s in (*st.events("stop"), *self.ctx.run_events)
                        if s.get("event") == "stop"
                    )
                end = st.ends.get(h)
                # unfinished: its household line says so, or it has none yet (a run cut short: under way)
                unfinished = (end is not None and not end.finished) or (
                    end is None and self.ctx.logs.stage == UNDER_WAY
                )
                if not (type(o.get("reason")) is str and runner_error and unfinished):
                    f.fail(
                        7,
                        self.log,
                        seq,
                        f"late cost names {h}/{key[1]}/{key[2]}, no attempt of the model "
                        "(nor one whose record was lost: a reason, an unfinished household, a runner-error stop)",
                    )
