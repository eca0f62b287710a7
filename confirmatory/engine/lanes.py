"""Lanes: one model's worker threads (their shared state is confirmatory.engine.modelstate).

A lane takes its households (draw index mod lanes) in draw order. For each
it asks for an admission decision; if admitted it runs pass 0 over the arms
in the household's arm order, waits for the pass's host evidence, classifies
every attempt with the pure rules, and runs the next pass over the arms whose
action was ``rerun`` or ``pause``; then it writes the household's attempt
lines and household line and asks about its next household.

Ordering: every instant that must be ordered against another (a decision, an
attempt's start, a household's end, a stop, a pause, a resume, the ceiling's
crossing) is read from the clock *under the ceiling's lock* (``Spend.ordered``),
and the state it acts on is changed under the same lock. Lines are written
after the lock is released; the log is therefore not in time order, and
readers order by ``t``.

Lock order: ``ModelState.cond`` before ``Spend.lock``; chain writers' locks
are leaves.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

from confirmatory.core import rules
from confirmatory.core.errors import BudgetStop, HarnessContractError, UnreportedCall
from confirmatory.engine.classify import Classifier
from confirmatory.engine.modelstate import Attempt, ModelState, Running
from confirmatory.engine.spend import AttemptSpend, record_error, unreported_breach
from confirmatory.records.chain import ChainError, dumps

if TYPE_CHECKING:  # pragma: no cover
    from confirmatory.engine.run import Run


class Lane(Classifier):
    """One lane thread's work. ``run()`` is the thread body; it never raises."""

    def __init__(self, run: Run, model: ModelState, index: int) -> None:
        self.run = run
        self.m = model
        self.index = index
        self.spec = model.spec
        self.rules = run.design.rules
        # The household under way and its ended attempts (the same list the
        # lane appends to), so that the main thread can settle a lane stuck
        # in an abandoned conversation (``settle``).
        self.household_now: tuple[str, list[Attempt]] | None = None
        # Who writes a household's end lines and the lane-end line: the lane,
        # or the main thread that settled it. Claimed under the model's cond.
        self._household_claimed = False
        self._lane_end_claimed = False
        self.settled = False

    # -- the thread body -------------------------------------------------
    def run_lane(self) -> None:
        reason = "done"
        # A continued run: a lane whose last decision refused ends at once;
        # the others carry on from the draw index their records reached.
        first = self.m.lane_start.get(self.index, 0)
        try:
            if self.index in self.m.lane_done:
                reason = self.m.lane_done[self.index]
                return
            for k, household in enumerate(self.m.draw):
                if k % self.spec.lanes != self.index or k < first:
                    continue
                verdict = self.decide(household)
                if verdict in ("ceiling", "stopped", "refused"):
                    reason = verdict
                    break
                if not self.run_household(household):
                    reason = self._end_reason()
                    break
        except BaseException as exc:  # noqa: BLE001 - the outcome is handed to the Run
            reason = "stopped"
            self.run.lane_failed(self.m, self.index, exc)
        finally:
            self._write_lane_end(reason)

    def _claim(self, what: str) -> bool:
        with self.m.cond:
            if getattr(self, what):
                return False
            setattr(self, what, True)
            return True

    def _write_lane_end(self, reason: str) -> None:
        if not self._claim("_lane_end_claimed"):
            return  # the main thread settled this lane and wrote it
        with self.run.spend.ordered() as t:
            pass
        # Written at the lane's end; not after a run file failed (the run then
        # ends as a crash does, and its continuation carries the lane on).
        written = (
            False
            if self.run.disk_failed
            else self.run.append_at_end(
                self.m.run_log, {"event": "lane-end", "lane": self.index, "reason": reason, "t": t}
            )
        )
        with self.m.cond:
            self.m.lane_ends.append(reason)
            self.m.lane_end_lines += written
            self.m.cond.notify_all()
        self.run.wake()

    def settle(self, running: Running) -> None:
        """The main thread's end of a lane stuck in an abandoned conversation.

        A conversation past its deadline ends at its next turn, but a call
        that never returns (a provider trickling bytes defeats per-phase
        timeouts) would keep its lane, and so the run, from ending. After a
        grace period the main thread writes what the lane would have: the
        household's attempt lines (the abandoned one from its deadline
        record), its household line (unfinished) and the lane's end. If the
        lane wakes later it writes nothing more.
        """
        with self.m.cond:
            now = self.household_now
            self.settled = True
        if now is not None:
            household, attempts = now
            # (None: the deadline record could not be written; its spend is a late cost, Run._abandon)
            if running.deadline_record is not None:
                record, rel, sha, end = running.deadline_record
                if not any(a.record_rel == rel for a in attempts):
                    attempts = attempts + [
                        Attempt(
                            household,
                            running.arm,
                            running.pass_index,
                            self.index,
                            running.start,
                            end,
                            record,
                            rel,
                            sha,
                            running.pass_index,
                            round_index=running.round_index,
                        )
                    ]
            self.end_household(household, attempts, False, round_index=self.m.rounds.get(household, 0))
        self._write_lane_end("stopped")

    def _end_reason(self) -> str:
        if self.run.spend.crossed.is_set() and not self.m.stopped and not self.run.stopped:
            return "ceiling"
        return "stopped"

    def _halted(self) -> bool:
        if self.run.disk_failed is not None:  # a run file failed: nothing more starts (Run.fatal)
            return True
        return self.m.stopped or self.run.stopped or self.run.spend.crossed.is_set()

    # -- admission -------------------------------------------------------
    def decide(self, household: str) -> str:
        """Ask for an admission decision: "admit", "refused", "ceiling" or "stopped"."""
        m = self.m
        with m.cond:
            # A decision waits while a pass's classes are undecided: until then
            # nobody knows whether that household has finished.
            while m.pending > 0 and not self._halted():
                m.cond.wait(0.5)
            with self.run.spend.ordered() as t:
                if self.run.spend.crossed.is_set():
                    return "ceiling"
                if m.stopped or self.run.stopped or self.run.disk_failed is not None:
                    return "stopped"
                admit = rules.admit(
                    refused_before=m.refused,
                    finished_nusd=m.finished_nusd,
                    under_way=m.under_way,
                    reserve_nusd=m.reserve_nusd,
                    cap_nusd=m.cap_nusd,
                )
                line = {
                    "event": "decision",
                    "lane": self.index,
                    "household": household,
                    "t": t,
                    "admit": admit,
                    "finished_nusd": m.finished_nusd,
                    "under_way": m.under_way,
                    "reserve_nusd": m.reserve_nusd,
                    "cap_nusd": m.cap_nusd,
                }
                if admit:
                    m.under_way += 1
                else:
                    m.refused = True
        # Counted for the progress table once its line is on disk: a decision
        # whose line the log refused (a full disk) is in no record, and the
        # table must not show it as made.
        m.admission_log.append(line)
        with m.cond:
            m.decided += 1
        return "admit" if admit else "refused"

    # -- one household -----------------------------------------------------
    def run_household(self, household: str) -> bool:
        """Run every pass of ``household``; True when it finished, False when cut short."""
        m = self.m
        order = m.arm_orders[household]
        round_index = m.rounds.get(household, 0)
        attempts: list[Attempt] = []
        with m.cond:
            self.household_now = (household, attempts)
            self._household_claimed = False
        reruns_used = {arm: 0 for arm in order}
        arms = list(order)
        pass_index = 0
        finished = True
        try:
            while arms:
                ended: list[Attempt] = []
                for i, arm in enumerate(arms):
                    last = i == len(arms) - 1
                    # the class that made this a rerun: the arm's last attempt's (progress display)
                    rerun_of = next((a.cls for a in reversed(attempts) if a.arm == arm), None)
                    attempt = self.run_attempt(
                        household,
                        arm,
                        pass_index,
                        reruns_used[arm],
                        last_in_pass=last,
                        rerun_of=rerun_of,
                        round_index=round_index,
                    )
                    if attempt is None:  # nothing started: the model or run stopped
                        finished = False
                        break
                    ended.append(attempt)
                    attempts.append(attempt)
                    if self._early_consequence(attempt):
                        finished = False
                        break
                if ended:
                    if len(ended) < len(arms):
                        # Cut short: the pass is pending from now (its last
                        # attempt did not mark it, as a whole pass's does).
                        with m.cond:
                            m.pending += 1
                    try:
                        self.classify_pass(ended)
                    finally:
                        with m.cond:
                            m.pending -= 1
                            m.cond.notify_all()
                if not finished or any(a.action == rules.Action.STOP for a in ended):
                    finished = False
                    break
                actions = {a.arm: rules.Action(cast(str, a.action)) for a in ended}  # (classified: set)
                arms = [
                    arm
                    for arm in rules.next_pass_arms(order, actions)
                    if reruns_used[arm] < self.rules.max_reruns_per_arm
                ]
                if arms and self._halted():
                    finished = False  # reruns were due, but the model or the run has stopped
                    break
                # A rerun pass waits first (rules.rerun_wait_s), on the halt
                # event: a stop, the run's stop or the ceiling ends the wait
                # at once, and the household then ends cut short.
                wait = (
                    rules.rerun_wait_s(self.rules.rerun_wait_s, pass_index + 1, retry_after_s=_asked_wait(ended, arms))
                    if arms
                    else 0.0
                )
                if wait > 0 and (self.m.halt.wait(wait) or self._halted()):
                    finished = False
                    break
                for arm in arms:
                    reruns_used[arm] += 1
                pass_index += 1
        except BaseException:
            finished = False
            raise
        finally:
            self.end_household(household, attempts, finished, round_index=round_index)
        return finished

    def end_household(self, household: str, attempts: list[Attempt], finished: bool, *, round_index: int = 0) -> None:
        m = self.m
        if not self._claim("_household_claimed"):
            return  # settled by the main thread, which wrote these lines
        spend = sum(a.cost_nusd for a in attempts)
        unclassified = [a for a in attempts if a.cls is None]
        if unclassified:
            # Cut short before its pass was classified (a runner error, a
            # settled lane): the same rules as any pass, so verify agrees.
            self.classify_pass(unclassified)
        lines = [a.line() for a in attempts]
        # The model's lock is held until the household's lines are on disk:
        # no decision of this model can see the household ended (its spend
        # finished, its reserve free) before its household line is durable,
        # so a runner killed in between leaves no decision that counted an
        # end the records lack (docs/RUN.md "A household's end").
        with m.cond:
            if self.run.disk_failed is not None:
                # a run file failed: nothing more is written, and no decision may
                # see this household end; it is under way in the records, and a
                # continuation runs it again
                m.cond.notify_all()
                return
            with self.run.spend.ordered() as t:
                m.under_way -= 1
                if finished:
                    m.finished_nusd += spend
            lines.append(
                {
                    "event": "household",
                    "lane": self.index,
                    "household": household,
                    "t": t,
                    "finished": finished,
                    "spend_nusd": spend,
                    **({"round": round_index} if round_index else {}),
                }
            )
            try:
                for line in lines:
                    m.run_log.append(line)
            except (ChainError, OSError) as exc:
                # under the model's lock: no decision may see this end, its line not on disk
                self.run.fatal("runner-error", f"lane {m.name}/{self.index}: {exc}", disk=True)
                raise
            finally:
                m.cond.notify_all()
        # Ended, for the progress table, once its household line is on disk
        # (verify counts household lines): a household whose lines the log
        # refused (a full disk, a file-size limit) did not end in the records.
        with m.cond:
            m.households_done += 1

    # -- one attempt -------------------------------------------------------
    def _stop_reason(self) -> str | None:
        if self.run.spend.crossed.is_set():
            return "ceiling crossed"
        if self.run.stopped:
            return f"run stopped ({self.run.stop_cause})"
        if self.m.stopped:
            return f"model stopped ({self.m.stop_cause})"
        return None

    def run_attempt(
        self,
        household: str,
        arm: str,
        pass_index: int,
        reruns_used: int,
        *,
        last_in_pass: bool = False,
        rerun_of: str | None = None,
        round_index: int = 0,
    ) -> Attempt | None:
        """Run one attempt; None when none started (the model or run had stopped).

        ``last_in_pass``: the pass's classes become pending at the instant this
        attempt stops running (same lock), so no admission decision can slip
        between the pass's end and the wait for its classes.
        """
        m = self.m
        key = f"{household}/{arm}/{pass_index}"

        def on_late_cost(nusd: int) -> None:
            # Only once the deadline took the attempt (so `running` exists):
            # after its record is written, or known lost, whose costs must
            # then say so (Run._abandon).
            running.deadline_written.wait()
            self.run.late_cost(m, household, arm, pass_index, nusd, reason=running.record_lost, round_index=round_index)

        def journal(nusd: int) -> None:
            self.run.journal_cost(m, household, arm, pass_index, nusd, round_index)

        aspend = AttemptSpend(
            self.run.spend,
            model=m.name,
            household=household,
            arm=arm,
            pass_index=pass_index,
            stop_reason=self._stop_reason,
            on_late_cost=on_late_cost,
            journal=journal if self.run.journal_calls else None,
        )
        with m.cond:
            while True:
                if self._halted():
                    return None
                with self.run.spend.ordered() as start:
                    # Re-checked under the ceiling's lock: a stop, pause or
                    # crossing taken under it is strictly before or after `start`.
                    if not (m.paused or self._halted()):
                        running = Running(
                            aspend,
                            household,
                            arm,
                            pass_index,
                            self.index,
                            start,
                            last_in_pass=last_in_pass,
                            round_index=round_index,
                        )
                        m.running[key] = running
                        m.attempts += 1
                        m.reruns += pass_index > 0  # a rerun counts once it starts
                        if pass_index > 0:
                            why = rerun_of or "unknown"
                            m.reruns_by_class[why] = m.reruns_by_class.get(why, 0) + 1
                        break
                # Paused: this lane waits for an accepted resume.
                m.waiting_resume += 1
                try:
                    m.cond.wait(0.5)
                finally:
                    m.waiting_resume -= 1
        arm_spec = self.run.arms[arm]
        error: Any  # the record's error (JSON): set, as a dict, whenever ended_by is
        status, error, answer, extra = "ok", None, None, None
        ended_by: BaseException | None = None  # what ended the conversation, if not its end
        try:
            with aspend.bound():  # confirmatory.engine.llm tells it of the calls made in this thread
                result = self.run.harness(self.spec, m.households[household], arm_spec, m.pool, aspend, self.run.clock)
            if not isinstance(result, dict):
                raise HarnessContractError(f"the harness returned {type(result).__name__}, not a dict")
            if "answer" not in result:
                raise HarnessContractError("the harness's result has no 'answer' (give None when there is none)")
            answer = result.get("answer")
            extra = {k: v for k, v in result.items() if k != "answer"} or None
            try:
                dumps({"answer": answer, "extra": extra})
            except (TypeError, ValueError) as exc:
                raise HarnessContractError(f"the harness's result is not JSON: {exc}") from None
        except BudgetStop as exc:
            if aspend.abandoned or aspend.stop_reason() is not None:
                status, error, ended_by = "budget_stop", record_error(exc), exc
            else:
                # Only the runner ends a conversation (Spend.checkpoint): a
                # BudgetStop with nothing stopped is the harness's own, and a
                # record saying the runner ended it would be untrue (verify
                # checks a budget_stop against the halts). A harness failure.
                ended_by = HarnessContractError(
                    f"the harness raised BudgetStop itself ({exc}), but the runner had not ended the "
                    "conversation: only spend.checkpoint() raises it"
                )
                status, error, answer, extra = "error", record_error(ended_by), None, None
        except BaseException as exc:  # noqa: BLE001 - every failure becomes a record (SystemExit too)
            ended_by = exc
            answer, extra = None, None  # an answer that is not JSON must not keep the record from being written
            error = record_error(
                exc, escalated_after_truncation=bool(getattr(exc, "escalated_after_truncation", False))
            )
            status = "error"
            if self.run.pool_failed(m, exc):
                # The engine pool died: the model is stopped (cause pool) and
                # the conversation ended because of it; the error is kept.
                status = "budget_stop"
        breach = unreported_breach(aspend)
        if breach is not None:
            # Money the harness did not report is counted here, in the record,
            # and the attempt is the harness's failure: its model stops.
            missing, unreported = breach
            if ended_by is not None and not isinstance(ended_by, UnreportedCall):
                # what ended the conversation otherwise is kept in the message
                unreported = HarnessContractError(
                    f"{unreported}; the conversation had ended with "
                    f"{error.get('type')}: {str(error.get('message'))[:300]}"
                )
            if missing:
                now = time.time()
                aspend.add_call("chat", now, now, cost_nusd=missing, error=unreported)
            status, error, answer, extra = "error", record_error(unreported), None, None
        with m.cond:
            # The pass's classes are pending from the instant it ends, taken
            # in the same lock order as a start (m.cond, then the ceiling's):
            # no admission decision slips in before the record is written.
            with self.run.spend.ordered() as end:
                self._count_pending(running)
        if not aspend.finish():
            # The deadline watcher abandoned this attempt and wrote its record.
            running.deadline_written.wait()
            deadline = running.deadline_record
            if deadline is None:
                raise RuntimeError(f"attempt {key} was abandoned but its deadline record was not written")
            record, rel, sha, dl_end = deadline
            self._done_running(key, last_in_pass)
            return Attempt(
                household,
                arm,
                pass_index,
                self.index,
                start,
                dl_end,
                record,
                rel,
                sha,
                reruns_used,
                round_index=round_index,
            )
        cost, calls = aspend.snapshot()
        record = {
            "model": m.name,
            "household": household,
            "arm": arm,
            "pass": pass_index,
            "lane": self.index,
            "start": start,
            "end": end,
            "status": status,
            "cost_nusd": cost,
            "error": error,
            "calls": calls,
            "answer": answer,
        }
        if extra:
            record["extra"] = extra
        if round_index:
            record["round"] = round_index
        try:
            rel, sha = self.run.write_record(m, record)
        except BaseException as exc:
            # The record is lost but its spend is real: count it where a
            # reviewer sees it (conservation), then fail as a runner error.
            if cost:
                self.run.late_cost(
                    m, household, arm, pass_index, cost, reason=f"record not written: {exc!r}", round_index=round_index
                )
            if isinstance(exc, OSError):  # the disk: nothing more is written (Run.fatal), before this household's end
                self.run.fatal("runner-error", f"lane {m.name}/{self.index}: record not written: {exc!r}", disk=True)
            raise
        self._done_running(key, last_in_pass)
        return Attempt(
            household, arm, pass_index, self.index, start, end, record, rel, sha, reruns_used, round_index=round_index
        )

    def _count_pending(self, running: Running) -> None:
        """(m.cond held) The pass's classes are now pending, once per pass."""
        if running.last_in_pass and not running.pending_counted:
            running.pending_counted = True
            self.m.pending += 1

    def _done_running(self, key: str, last_in_pass: bool) -> None:
        with self.m.cond:
            running = self.m.running.pop(key, None)
            if running is not None:
                self._count_pending(running)


def _asked_wait(ended: list[Attempt], arms: list[str]) -> float:
    """The longest wait a provider asked for (Retry-After) in the records of
    the pass's attempts whose arms run again: the error's ``retry_after_s``."""
    asked = 0.0
    for a in ended:
        err = a.record.get("error") if a.arm in arms and isinstance(a.record, dict) else None
        value: Any = err.get("retry_after_s") if isinstance(err, dict) else None
        if type(value) in (int, float) and value > asked:
            asked = float(value)
    return asked
