"""The run's spend, run-wide: invariant 7 and the ceiling's crossing (6).

Owns `check_totals`: every nano-dollar counted once, in its model and in the
run (each model's close spend its attempts' and late costs', the run's close
total their sum, the ceiling events alike in every log), the close status
how the run ended (ceiling, stopped or completed), and the ceiling event
dated where the spend crossed it, neither later nor earlier.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confirmatory.records.layout import model_log
from confirmatory.verify.clocks import CALL_SLACK_S
from confirmatory.verify.context import RunContext
from confirmatory.verify.report import UNDER_WAY
from confirmatory.verify.state import ModelState

RUN_STATUSES = ("completed", "stopped", "ceiling")  # run.jsonl close.status (run.RunResult)


def check_totals(ctx: RunContext, states: list[ModelState], ceilings: list[dict[str, Any]]) -> None:
    """Invariant 7: every nano-dollar counted once, in its model and in the run."""
    f, man = ctx.findings, ctx.layout.manifest.obj or {}
    total = int(man.get("spend_before_nusd") or 0)
    key: Callable[[dict[str, Any]], tuple[Any, Any, Any]] = (  # noqa: E731
        lambda o: (o.get("t"), o.get("total_nusd"), o.get("ceiling_nusd"))
    )
    # run.jsonl's ceilings in order: sorted once, where the first model's are
    want: list[tuple[Any, Any, Any]] | tuple[str, ...] | None = None
    # the spend counted before the ceiling event's t: the calls that ended
    # before it (less the slack: ModelCheck._money_times) and the late costs
    # logged before it (a late cost's t is read after it is counted)
    # At most counted by then: the calls that ended by the slack after it,
    # and every late cost (a late cost's line may follow a crossing it
    # preceded); the event's total is what had been counted at the crossing.
    known, upper, ceiling_t = total, total, ctx.ceiling_t
    for st in states:
        log = model_log(st.name, "run.jsonl")
        late = 0
        known += st.ceiling_known_nusd
        upper += st.ceiling_upper_nusd
        for seq, o in st.events("late-cost"):
            if f.expect(
                7, type(o.get("cost_nusd")) is int, log, seq, f"late cost {o.get('cost_nusd')!r} is not an integer"
            ):
                late += o["cost_nusd"]
                upper += o["cost_nusd"]
                t = o.get("t")
                if (type(t) is float or type(t) is int) and t < ceiling_t:
                    known += o["cost_nusd"]
        lost = 0  # what each continuation found lost with the attempts its crash killed
        for seq, o in st.events("continuation"):
            if f.expect(7, type(o.get("lost_nusd")) is int, log, seq, "continuation's lost_nusd is not an integer"):
                lost += o["lost_nusd"]
                upper += o["lost_nusd"]
                if _num(o.get("crash_t")) and o["crash_t"] < ceiling_t:
                    known += o["lost_nusd"]
        closes = st.events("close")
        share = st.attempt_cost + late + lost
        total += share
        if not closes and ctx.logs.stage == UNDER_WAY:
            f.explain(7, log, None, "no close line: the run was cut short")
        elif f.expect(7, len(closes) == 1, log, None, f"{len(closes)} close lines"):
            seq, close = closes[0]
            f.expect(
                7,
                type(close.get("spend_nusd")) is int and close.get("spend_nusd") == share,
                log,
                seq,
                f"close spend {close.get('spend_nusd')} is not attempts + late costs + lost costs {share}",
            )
        mine = sorted(key(o) for _, o in st.events("ceiling"))
        if want is None:
            want = sorted(key(o) for o in ceilings)
        f.expect(7, mine == want, log, None, "ceiling events differ from run.jsonl's")
    closes = [(s, o) for s, o in ctx.run_events if o.get("event") == "close"]
    if not closes and ctx.logs.stage == UNDER_WAY:
        f.explain(7, "run.jsonl", None, "no close line: the run was cut short")
    elif f.expect(7, len(closes) == 1, "run.jsonl", None, f"{len(closes)} close lines"):
        seq, close = closes[0]
        f.expect(
            7,
            type(close.get("spend_total_nusd")) is int
            and type(close.get("t")) in (int, float)
            and close.get("status") in RUN_STATUSES,
            "run.jsonl",
            seq,
            f"close line: spend_total_nusd {close.get('spend_total_nusd')!r} (an integer), "
            f"t {close.get('t')!r} (a number), status {close.get('status')!r} (one of {list(RUN_STATUSES)})",
        )
        f.expect(
            7,
            close.get("spend_total_nusd") == total,
            "run.jsonl",
            seq,
            f"spend_total {close.get('spend_total_nusd')} is not the sum {total}",
        )

        # The status says how the run ended (Run._finish): ceiling when the
        # spend crossed it, else stopped when the run or a model stopped (or
        # a write failed: stopped with no stop line is taken), else completed.
        def ended(o: dict[str, Any]) -> bool:  # a stop a continuation carried the run on from
            return o.get("cause") == "crash" or (
                o.get("cause") == "runner-error" and _num(o.get("t")) and ("runner-error", o["t"]) in ctx.ended_stops
            )

        stopped = any(o.get("event") == "stop" and not ended(o) for _, o in ctx.run_events) or any(
            [s for s in st.events("stop") if not ended(s[1])] or st.events("trigger") for st in states
        )
        status = close.get("status")
        if status in RUN_STATUSES:
            want = ("ceiling",) if ceilings else ("stopped",) if stopped else ("completed", "stopped")
            if status not in want:
                why = (
                    "the spend crossed the ceiling"
                    if ceilings
                    else "a stop of the run or a model"
                    if stopped
                    else "nothing stopped the run"
                )
                f.fail(7, "run.jsonl", seq, f"close status {status!r}; {why}: {' or '.join(want)}")
        crossed = isinstance(close.get("spend_total_nusd"), int) and close["spend_total_nusd"] > (
            man.get("ceiling_nusd") or 0
        )
        f.expect(
            7, not crossed or bool(ceilings), "run.jsonl", seq, "the total exceeds the ceiling without a ceiling event"
        )
    for c in ceilings:
        f.expect(
            7,
            type(c.get("total_nusd")) is int
            and type(c.get("ceiling_nusd")) is int
            and c.get("ceiling_nusd") == man.get("ceiling_nusd")
            and c["total_nusd"] > c["ceiling_nusd"],
            "run.jsonl",
            None,
            f"ceiling event total {c.get('total_nusd')} does not exceed {c.get('ceiling_nusd')}",
        )
    # Invariant 6: the crossing is the first count that takes the total above
    # the ceiling (spend.Spend.add: `>`), so what was counted before the
    # event's t cannot exceed it; else the spend crossed earlier than its event.
    ceiling_nusd = man.get("ceiling_nusd")
    if ceilings and type(ceiling_nusd) is int:
        f.check(6)
        if known > ceiling_nusd:
            f.fail(
                6,
                "run.jsonl",
                None,
                f"{known} nano-dollars were counted before the ceiling event's t "
                f"({ceiling_t}), over the ceiling {ceiling_nusd}: the spend crossed it earlier",
            )
        # ... nor earlier than it says: what it says had been counted at its
        # t was (a stop under the ceiling's pretext fails here)
        first = min(
            (c for c in ceilings if c.get("t") == ceiling_t), key=lambda c: repr(c.get("total_nusd")), default=None
        )
        said = first.get("total_nusd") if first is not None else None
        if type(said) is int:
            f.check(6)
            if said > upper:
                f.fail(
                    6,
                    "run.jsonl",
                    None,
                    f"the ceiling event at {ceiling_t} says {said} nano-dollars had been "
                    f"counted; the calls that ended by then ({CALL_SLACK_S:g} s of slack) and every late cost "
                    f"come to {upper}: the spend had not crossed the ceiling then",
                )


def _num(v: Any) -> bool:
    return type(v) in (int, float) and v == v
