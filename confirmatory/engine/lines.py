"""The lines a Run writes for one attempt's money and its record, and at its
end: ``RecordLines``, a part of ``Run`` (its base class): the record file, a
late cost, the spend journal's call-cost line (docs/RUN.md "The spend
journal"), a line of the run's end, and the end of a run whose files could
not be written (docs/RUN.md "The disk").
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from confirmatory.engine.modelstate import ModelState
from confirmatory.records.chain import ChainError
from confirmatory.records.writer import Guard, write_json_durable

if TYPE_CHECKING:
    from confirmatory.engine.lanes import Lane
    from confirmatory.engine.result import RunResult
    from confirmatory.engine.spend import Spend


class RecordLines:
    """Needs the Run's ``clock``, ``guard``, ``fatal`` and ``write_failures``."""

    if TYPE_CHECKING:  # what this part reads of the Run (set in Run.__init__)
        clock: Any  # a runtime.clock.Clock, or a test's fake
        guard: Guard
        write_failures: list[str]
        anchorer: Any
        spend: Spend
        run_dir: Path
        stop_detail: str
        disk_failed: str | None
        _lanes: list[tuple[threading.Thread, Lane]]
        _finished: bool

        def fatal(self, cause: str, detail: str, *, disk: bool = False) -> None: ...

        def close(self) -> None: ...

    def append_at_end(self, log: Any, line: dict[str, Any]) -> bool:
        """Append a line the run's ending writes (a stop, a close): a log that
        can no longer be written (a full disk) must not keep the others, or
        the final anchor, from being written. The failure is kept for the
        report (``RunResult.write_failures``)."""
        try:
            log.append(line)
            return True
        except (ChainError, OSError) as exc:
            text = str(exc)
            where = str(getattr(log, "path", ""))
            text = text if where and where in text else f"{where or '?'}: {text}"
            self.write_failures.append(text)
            # Not yet stopping (a lane's end line failed while the others go
            # on): a log the run cannot write is a runner error; the main
            # loop stops the run.
            self.fatal("runner-error", f"a log could not be written: {text}", disk=True)
            return False

    def write_record(self, m: ModelState, record: dict[str, Any]) -> tuple[str, str]:
        from confirmatory.records.layout import record_relpath

        rel = record_relpath(record["household"], record["arm"], record["pass"], record.get("round", 0))
        sha = write_json_durable(m.model_dir / rel, record, guard=self.guard)
        return rel, sha

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
    ) -> None:
        """A cost outside any record: spent after a deadline, or by an attempt whose record was lost."""
        t = self.clock.now()
        line = {
            "event": "late-cost",
            "household": household,
            "arm": arm,
            "pass": pass_index,
            "cost_nusd": nusd,
            "t": t,
            **_round(round_index),
        }
        if reason:
            line["reason"] = reason
        m.run_log.append(line)

    def journal_cost(
        self, m: ModelState, household: str, arm: str, pass_index: int, nusd: int, round_index: int = 0
    ) -> None:
        """The spend journal: a cost is on disk (a fsynced ``call-cost`` line)
        before it counts toward the ceiling or its reply reaches the harness,
        so a runner killed mid-attempt loses no counted dollar (a continuation
        adds the journaled cost of every attempt the crash left without a
        record). A journal that cannot be written is the runner's failure:
        the run stops (runner-error); the cost is still counted."""
        line = {
            "event": "call-cost",
            "household": household,
            "arm": arm,
            "pass": pass_index,
            "cost_nusd": nusd,
            "t": self.clock.now(),
            **_round(round_index),
        }
        try:
            m.run_log.append(line)
        except (ChainError, OSError) as exc:
            self.fatal(
                "runner-error", f"the spend journal models/{m.name}/run.jsonl could not be written: {exc}", disk=True
            )

    def _finish_as_crash(self, total: int) -> RunResult:
        """A run file could not be written: the run ends as a crash does. Its
        stop lines are written where they can be; no close line and no final
        anchor claim an end its records do not hold; one more anchor fixes
        what was acknowledged. verify says crashed, and `continue` carries
        the run on once the disk is fixed (docs/RUN.md "The disk")."""
        from confirmatory.anchors import anchorer as anchors
        from confirmatory.engine.result import RunResult

        rc = None
        try:
            if self.anchorer is not None:
                rc = self.anchorer.finish(anchors.FINAL_PUSH_TIMEOUT_S, final=False)
        except (ChainError, OSError) as exc:
            self.write_failures.append(f"the last anchor: {exc}")
        self._finished = True
        self.close()
        stuck = sum(1 for t, lane in self._lanes if lane.settled and t.is_alive())
        status = "ceiling" if self.spend.crossed.is_set() else "stopped"
        detail = cast(str, self.stop_detail or self.disk_failed)  # (called only once disk_failed is set)
        return RunResult(
            status,
            "runner-error",
            total,
            self.run_dir,
            rc,
            stuck,
            detail,
            tuple(self.write_failures),
            final_anchor_written=False,
            disk_failed=self.disk_failed,
        )


def _round(round_index: int) -> dict[str, int]:
    """The ``round`` field of a line of a household's later run (none for its first)."""
    return {"round": round_index} if round_index else {}
