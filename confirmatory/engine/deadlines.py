"""What the Run does with an attempt past its deadline: ``Deadlines``, a part
of ``Run`` (its base class), working on the Run's design, spend, lanes and
stops.

The main loop (``Run._tick``) finds the attempts past their deadline on the
monotonic clock and hands each to ``_abandon``: its record is written at once
(status deadline, with the spend taken from it so far) and a deadline trigger
stops its model. A lane whose abandoned conversation has not reached its next
turn within ``abandon_grace_s`` is settled by the main thread (``_settle``,
``Lane.settle``), so that a call that never returns cannot keep the run from
ending.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from confirmatory.engine.modelstate import ModelState, Running

if TYPE_CHECKING:
    from confirmatory.design.model import Design
    from confirmatory.engine.lanes import Lane
    from confirmatory.engine.spend import Spend


class Deadlines:
    """The Run's handling of attempts past their deadline (see the module docstring)."""

    if TYPE_CHECKING:  # what this part reads of the Run (set in Run.__init__, or its other base's)
        design: Design
        spend: Spend
        _lanes: list[tuple[threading.Thread, Lane]]
        _wake: threading.Event

        def write_record(self, m: ModelState, record: dict[str, Any]) -> tuple[str, str]: ...

        def fatal(self, cause: str, detail: str, *, disk: bool = False) -> None: ...

        def late_cost(
            self,
            m: ModelState,
            household: str,
            arm: str,
            pass_index: int,
            nusd: int,
            *,
            reason: str | None = None,
            round_index: int = 0,
        ) -> None: ...

        def trigger(
            self,
            m: ModelState,
            cause: str,
            household: str,
            arm: str,
            pass_index: int,
            *,
            detail: str = "",
            round_index: int = 0,
        ) -> None: ...

    def _abandon(self, m: ModelState, r: Running) -> None:
        """An attempt past its deadline: write its record now, trigger, stop the model."""
        from confirmatory.core.errors import AttemptDeadline, describe_exception

        taken = r.spend.abandon()
        if taken is None:
            return  # it ended normally just now
        # Taken: from now on it is never abandoned again (its record written
        # twice, its spend counted twice), and its lane may be settled.
        r.abandoned_mono = time.monotonic()
        cost, calls = taken
        with m.cond:
            with self.spend.ordered() as end:
                # its pass's classes are pending from the deadline on
                if r.last_in_pass and not r.pending_counted:
                    r.pending_counted = True
                    m.pending += 1
        exc = AttemptDeadline(f"attempt still running {self.design.rules.attempt_deadline_s} s after its start")
        record = {
            "model": m.name,
            "household": r.household,
            "arm": r.arm,
            "pass": r.pass_index,
            "lane": r.lane,
            "start": r.start,
            "end": end,
            "status": "deadline",
            "cost_nusd": cost,
            "error": describe_exception(exc),
            "calls": calls,
            "answer": None,
            **({"round": r.round_index} if r.round_index else {}),
        }
        try:
            rel, sha = self.write_record(m, record)
            r.deadline_record = (record, rel, sha, end)
        except Exception as exc:  # noqa: BLE001 - a lost record: its spend kept, then a runner error
            r.record_lost = f"record not written: {exc!r}"
        finally:
            r.deadline_written.set()
        if r.record_lost is not None:
            # As for a lane's lost record (lanes.run_attempt): the spend is
            # real, so it is counted where a reviewer sees it (a late cost
            # with its reason, as is every later cost of the attempt), and
            # the run stops (runner-error). No deadline trigger: it would
            # name a record that does not exist. The lane, when it wakes,
            # ends its household without the attempt (or is settled so).
            from confirmatory.records.layout import record_relpath

            self.fatal(
                "runner-error",
                f"the deadline record models/{m.name}/"
                f"{record_relpath(r.household, r.arm, r.pass_index, r.round_index)} "
                f"could not be written: {r.record_lost}",
                disk=True,
            )
            if cost:
                self.late_cost(
                    m, r.household, r.arm, r.pass_index, cost, reason=r.record_lost, round_index=r.round_index
                )
            return
        self.trigger(
            m,
            "deadline",
            r.household,
            r.arm,
            r.pass_index,
            round_index=r.round_index,
            detail=f"models/{m.name}/{rel}: the attempt passed its deadline "
            f"({self.design.rules.attempt_deadline_s:g} s) and was abandoned",
        )

    def abandon_grace_s(self, m: ModelState) -> float:
        """How long an abandoned conversation may take to reach its next turn.

        Two of its model's call timeouts: a call that outlives that is stuck
        (a per-phase timeout can be defeated by a server trickling bytes).
        """
        return max(2 * float(m.spec.timeout_s), 1.0)

    def _settle(self, m: ModelState, r: Running) -> None:
        for t, lane in self._lanes:
            if lane.m is m and lane.index == r.lane and t.is_alive() and not lane.settled:
                lane.settle(r)
                self._wake.set()
