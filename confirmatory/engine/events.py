"""The events the lanes and the main loop write: ``Events``, a part of ``Run``
(its base class). A trigger and the stop of its cause, a model's or the run's
stop, the ceiling's crossing, a pause, and the answer to a resume request:
each instant is read under the ceiling's lock (``Spend.ordered``), so that it
is ordered against every attempt's start, and the state it changes is changed
under the same lock; the line is written after.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from confirmatory.core import rules
from confirmatory.engine.lines import _round
from confirmatory.engine.modelstate import ModelState
from confirmatory.records.chain import ChainError

if TYPE_CHECKING:
    from confirmatory.engine.spend import Spend
    from confirmatory.records.rundir import RunFiles


class Events:
    """Stops, triggers, the ceiling, pauses and resumes (see the module docstring)."""

    if TYPE_CHECKING:  # what this part reads of the Run (set in Run.__init__, or its other bases')
        spend: Spend
        files: RunFiles | None
        models: dict[str, ModelState]
        run_dir: Path
        stopped: bool
        stop_cause: str | None
        stop_detail: str
        stop_event: threading.Event
        _wake: threading.Event
        _resume_seen: int

        def append_at_end(self, log: Any, line: dict[str, Any]) -> bool: ...

        def fatal(self, cause: str, detail: str, *, disk: bool = False) -> None: ...

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
    ) -> None:
        """Log a trigger and stop the model with its cause (at once: well within stop_follow_s).

        Every attempt whose action is ``stop`` gets its trigger and a stop of
        its cause, even when the model (or the run) had stopped for another
        cause meanwhile: the records then say both, and the first stop stands.
        """
        with self.spend.ordered() as t:
            if not (m.stopped or self.stopped):
                m.stopped = True
                m.stop_cause = cause
                m.stop_detail = detail
        m.run_log.append(
            {
                "event": "trigger",
                "cause": cause,
                "household": household,
                "arm": arm,
                "pass": pass_index,
                "t": t,
                **_round(round_index),
            }
        )
        self._write_stop(m, cause, detail=detail)

    def stop_model(self, m: ModelState, cause: str, *, detail: str = "") -> None:
        with self.spend.ordered():
            if m.stopped or self.stopped:
                return
            m.stopped = True
            m.stop_cause = cause
            m.stop_detail = detail
        self._write_stop(m, cause, detail=detail)

    def _write_stop(self, m: ModelState, cause: str, *, detail: str = "") -> None:
        with self.spend.ordered() as t:
            pass
        line = {"event": "stop", "cause": cause, "scope": rules.STOP_SCOPE.get(cause, "model"), "t": t}
        if detail:
            line["detail"] = detail
        self.append_at_end(m.run_log, line)
        m.halt.set()
        with m.cond:
            m.cond.notify_all()
        self._wake.set()

    def stop_run(self, cause: str, *, detail: str = "") -> None:
        with self.spend.ordered() as t:
            if self.stopped:
                return
            self.stopped = True
            self.stop_cause = cause
            self.stop_detail = detail
        self.stop_event.set()
        line = {"event": "stop", "cause": cause, "scope": "run", "t": t}
        if detail:
            line["detail"] = detail
        assert self.files is not None
        self.append_at_end(self.files.run_log, line)
        for m in self.models.values():
            self.append_at_end(m.run_log, line)
            m.halt.set()
            with m.cond:
                m.cond.notify_all()

    def _on_crossing(self, t: float, total: int) -> None:
        # Called under the ceiling's lock at the crossing instant, inside the
        # harness's add_call that crossed it: a log that refuses the line
        # (a disk error) is the runner's failure, not the harness's (its
        # attempt would be recorded as a harness failure and its model
        # stopped so), and must not keep the other models' lines and halts
        # from being written and set.
        line = {"event": "ceiling", "t": t, "total_nusd": total, "ceiling_nusd": self.spend.ceiling_nusd}
        assert self.files is not None
        refused = []
        for name, log in [
            ("run.jsonl", self.files.run_log),
            *((f"models/{m.name}/run.jsonl", m.run_log) for m in self.models.values()),
        ]:
            try:
                log.append(line)
            except (ChainError, OSError) as exc:
                refused.append(f"{name}: {exc}")
        for m in self.models.values():
            m.halt.set()
        self.stop_event.set()
        if refused:
            self.fatal("runner-error", "the ceiling's line could not be written to " + "; ".join(refused), disk=True)
        self._wake.set()

    def pause(
        self, m: ModelState, household: str, arm: str, pass_index: int, *, detail: str = "", round_index: int = 0
    ) -> None:
        """``detail`` (the failure, for the person who must act) is shown, not logged:
        the record holds it."""
        with self.spend.ordered() as t:
            m.paused = True
            m.pause_t = t
            m.pause_detail = detail
        m.run_log.append(
            {"event": "pause", "household": household, "arm": arm, "pass": pass_index, "t": t, **_round(round_index)}
        )
        self._wake.set()

    def _check_resume(self) -> None:
        from confirmatory.engine.resume import read_requests

        assert self.files is not None
        requests = read_requests(self.run_dir)
        for req in requests[self._resume_seen :]:
            self._resume_seen += 1
            m = self.models.get(cast(str, req.get("model")))  # (None, a request without one: no model)
            if m is None:
                continue
            with m.cond:
                with self.spend.ordered() as t:
                    accepted = m.paused and m.pause_t is not None and req["t"] > m.pause_t
                    if accepted:
                        m.paused = False
                m.cond.notify_all()
            m.run_log.append({"event": "resume", "request_t": req["t"], "accepted": accepted, "t": t})
