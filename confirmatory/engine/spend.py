"""Spend: the one lock-protected account of every dollar, and the ceiling.

``Spend`` counts, in integer nano-dollars, the spend before the stage, every
attempt's cost and every late cost, over all models together. Its lock is
*the ceiling's lock* (docs/RUN.md "Threads and ordering"): every time that
must be ordered against the ceiling's crossing, a stop, a pause or a
household's end is taken while holding it (``Spend.ordered``), so no two
such instants can be inverted by a thread switch between reading the clock
and acting on it.

``AttemptSpend`` is the handle a harness gets for one attempt. Recording a
cost (``add_call``) and asking whether to go on (``checkpoint``) are separate
verbs: a call that has happened is always counted, even when the answer is
"stop".
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from confirmatory.core.errors import (
    BudgetStop,
    HarnessContractError,
    UnreportedCall,
    describe_exception,
)
from confirmatory.core.money import to_nusd
from confirmatory.engine.reply import Reply
from confirmatory.records.readers import CALL_KINDS, is_error_object


def record_error(exc: BaseException, *, escalated_after_truncation: bool = False) -> dict[str, Any]:
    """The record's ``error`` object for ``exc``; ``describe_exception`` redacts its message.

    Provider errors can echo a key back ("Incorrect API key provided: sk-...");
    records are published.
    """
    return describe_exception(exc, escalated_after_truncation=escalated_after_truncation)


class Spend:
    """Total = spend before the stage + every attempt's cost + every late cost."""

    def __init__(
        self,
        *,
        ceiling_nusd: int,
        before_nusd: int,
        clock: Any,
        on_crossing: Callable[[float, int], None] | None = None,
    ) -> None:
        self.ceiling_nusd = ceiling_nusd
        self.before_nusd = before_nusd
        self._clock = clock
        self._on_crossing = on_crossing
        self.lock = threading.RLock()
        self._total = before_nusd
        self.crossed_t: float | None = None
        self.crossed = threading.Event()
        self._by_model: dict[str, int] = {}

    @property
    def total_nusd(self) -> int:
        with self.lock:
            return self._total

    def model_total(self, model: str) -> int:
        with self.lock:
            return self._by_model.get(model, 0)

    def add(self, model: str, nusd: int) -> None:
        """Count ``nusd``; the first time the total exceeds the ceiling, note the crossing.

        The crossing instant is read under the lock, so every decision and
        attempt start (also taken under it) is strictly before or after it.
        The crossing callback runs under the lock as well: it only writes the
        ``ceiling`` lines (leaf locks) and sets events.
        """
        if nusd < 0:
            raise ValueError("a cost cannot be negative")
        with self.lock:
            self._total += nusd
            self._by_model[model] = self._by_model.get(model, 0) + nusd
            if self.crossed_t is None and self._total > self.ceiling_nusd:
                self.crossed_t = self._clock.now()
                self.crossed.set()
                if self._on_crossing is not None:
                    self._on_crossing(self.crossed_t, self._total)

    def restore(self, total_nusd: int, by_model: dict[str, int], crossed_t: float | None) -> None:
        """A continued run's account as its records leave it (docs/RUN.md
        "Continuing a crashed run"). A total the crash's lost costs took past
        the ceiling, with no crossing on record, is a crossing now."""
        with self.lock:
            self._total = total_nusd
            self._by_model = dict(by_model)
            if crossed_t is not None:
                self.crossed_t = crossed_t
                self.crossed.set()
            elif self._total > self.ceiling_nusd:
                self.crossed_t = self._clock.now()
                self.crossed.set()
                if self._on_crossing is not None:
                    self._on_crossing(self.crossed_t, self._total)

    @contextmanager
    def ordered(self) -> Iterator[float]:
        """Hold the ceiling's lock and yield a clock time taken under it."""
        with self.lock:
            yield self._clock.now()


# The attempt whose harness runs in this thread (``AttemptSpend.bound``):
# confirmatory.engine.llm tells it of every call it made and its cost, and of every
# litellm call made around it, so the lane can check that the harness
# reported them (``unreported``).
_bound = threading.local()

# A reported call time this far outside the attempt (or not a number) is not
# time.time() seconds (time.monotonic, perf_counter, milliseconds ...): a
# harness error at once, not a run that fails verify's invariant 5 for good.
# Wide enough for a clock slewed or a call's times taken a little apart; a
# wall clock stepped during the attempt widens it by the step (`_bad_times`);
# verify judges the times finely.
CALL_TIME_TOLERANCE_S = 300.0

# The most replies an attempt keeps waiting for their report (a harness
# that never reports them is caught by ``unreported``).
_KEPT_REPLIES = 64


def carried_cost(exc: BaseException) -> float | None:
    """The cost (USD) of the billed reply a confirmatory.engine.llm exception carries
    (``exc.reply``, a ``llm.Reply``), or None: an exception without one, or
    one whose reply litellm could not price (``UnpricedCall``)."""
    reply = getattr(exc, "reply", None)
    return reply.cost_usd if isinstance(reply, Reply) else None


def bound_attempt() -> AttemptSpend | None:
    """The attempt bound to this thread, or None (outside any attempt)."""
    return getattr(_bound, "attempt", None)


def _bad_times(start: Any, end: Any, opened: float, opened_mono: float) -> str | None:
    """Why (start, end) are not a call's time.time() seconds within the attempt, or None.

    The attempt's span on the wall clock is from its opening to now, on
    the clock of then or the clock of now: a wall clock stepped back (or
    forward) during the attempt puts a call's times up to the step before
    (after) the opening, and ``now - elapsed`` (``opened + elapsed``) is
    where the opening lies on the clock as it reads now (as it read then).
    (A step back and a step forward by as much, both within one call, are
    not seen: the tolerance then stands alone.)"""
    now = time.time()
    elapsed = time.monotonic() - opened_mono
    # (end may precede start by a wall-clock step back during the call: verify allows for it)
    lo = min(opened, now - elapsed) - CALL_TIME_TOLERANCE_S
    hi = max(now, opened + elapsed) + CALL_TIME_TOLERANCE_S

    def fits(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and lo <= x <= hi

    ok = fits(start) and fits(end)
    if ok:
        return None
    return (
        f"the call's times {start!r}..{end!r} are not time.time() seconds within this attempt (it began "
        f"at {opened:.3f}, now {now:.3f}): report calls with time.time()"
    )


class AttemptSpend:
    """One attempt's view of the spend: its calls, its cost, its stop flag.

    ``stop_reason`` is asked at every ``checkpoint``: it returns why the
    runner wants the conversation to end (ceiling, model stopped, run
    stopped), or None. ``abandon`` is called by the deadline watcher: from
    then on the record is written, and every further cost is a late cost
    reported through ``on_late_cost``.
    """

    def __init__(
        self,
        spend: Spend,
        *,
        model: str,
        household: str,
        arm: str,
        pass_index: int,
        stop_reason: Callable[[], str | None],
        on_late_cost: Callable[[int], None],
        journal: Callable[[int], None] | None = None,
    ) -> None:
        self._spend = spend
        # Makes a cost durable (a fsynced call-cost line) before it counts
        # or its reply reaches the harness: a runner killed mid-attempt
        # loses no dollar the ceiling counted (docs/RUN.md "The spend journal").
        self._journal = journal
        self._journaled = 0  # nano-dollars of this attempt already journaled
        self.model = model
        self.household = household
        self.arm = arm
        self.pass_index = pass_index
        self.attempt_key = f"{household}/{arm}/{pass_index}"
        self._stop_reason = stop_reason
        self._on_late_cost = on_late_cost
        self._lock = threading.Lock()
        self._calls: list[dict[str, Any]] = []
        self._cost = 0
        self._late = 0
        self.abandoned = False
        self.finished = False
        self._llm_seen = 0  # nano-dollars of priced replies confirmatory.engine.llm returned in this attempt
        self._llm_reported = 0  # ... and of every call the harness reported (any kind)
        self._direct = 0  # litellm calls made in this thread not through confirmatory.engine.llm
        self._replies: list[Reply] = []  # replies of confirmatory.engine.llm not yet reported (their billing)
        self._opened = time.time()  # raw, as the calls' times are
        self._opened_mono = time.monotonic()  # ... and where it lies on the wall clock of later (_bad_times)

    @contextmanager
    def bound(self) -> Iterator[AttemptSpend]:
        """Bind this attempt to the calling thread while its harness runs."""
        previous = getattr(_bound, "attempt", None)
        _bound.attempt = self
        try:
            yield self
        finally:
            _bound.attempt = previous

    def note_llm_cost(self, cost_usd: float) -> None:
        """confirmatory.engine.llm returned a reply priced at ``cost_usd`` (counted only when reported)."""
        nusd = to_nusd(cost_usd)
        with self._lock:
            self._llm_seen += nusd
            due = nusd if self._journal is not None else 0
            self._journaled += due
        if due and self._journal is not None:  # (due only with a journal)
            self._journal(due)

    def note_reply(self, reply: Reply) -> None:
        """confirmatory.engine.llm returned (or raised carrying) ``reply``: the call
        ``add_call`` reports with its times keeps its billing (docs/RECORDS.md)."""
        if reply.billing is None:
            return
        with self._lock:
            self._replies.append(reply)
            del self._replies[:-_KEPT_REPLIES]

    def _billing_of(self, start: Any, end: Any, error: Any) -> dict[str, Any] | None:
        """The billing of the reply a reported call is: the one its exception
        carries, else the noted reply with its exact times."""
        carried = getattr(error, "reply", None) if isinstance(error, BaseException) else None
        with self._lock:
            for i, reply in enumerate(self._replies):
                if reply is carried or (carried is None and reply.start == start and reply.end == end):
                    del self._replies[i]
                    return dict(reply.billing or {})
        if isinstance(carried, Reply) and carried.billing is not None:
            return dict(carried.billing)
        return None

    def note_direct_call(self) -> None:
        """litellm was called in this thread, not through confirmatory.engine.llm."""
        with self._lock:
            self._direct += 1

    def unreported(self) -> tuple[int, int]:
        """(nano-dollars of confirmatory.engine.llm replies the harness did not report
        with ``add_call``, litellm calls made around confirmatory.engine.llm)."""
        with self._lock:
            return max(0, self._llm_seen - self._llm_reported), self._direct

    def stop_reason(self) -> str | None:
        """Why the runner has ended this conversation (the ceiling crossed, its
        model or the run stopped), or None while it runs on."""
        return self._stop_reason()

    def checkpoint(self) -> None:
        """Raise ``BudgetStop`` if the runner has ended this conversation, and
        ``HarnessContractError`` if the harness left a call unreported (its
        cost would otherwise escape the ceiling until the attempt ends)."""
        missing, direct = self.unreported()
        if missing or direct:
            raise UnreportedCall("a call was left unreported before this turn (the lane counts it)")
        if self.abandoned:
            raise BudgetStop("attempt abandoned past its deadline")
        reason = self._stop_reason()
        if reason is not None:
            raise BudgetStop(reason)

    def add_call(
        self,
        kind: str,
        start: float,
        end: float,
        *,
        cost_usd: float | None = None,
        cost_nusd: int | None = None,
        finish_reason: str | None = None,
        error: BaseException | dict[str, Any] | None = None,
        escalated_after_truncation: bool = False,
        **extra: Any,
    ) -> int:
        """Record one call as it ends and count its cost; returns the nano-dollars counted.

        A failed call reported with neither ``cost_usd`` nor ``cost_nusd``
        costs what its exception carries: confirmatory.engine.llm raises for a
        billed reply it cannot return (no choices, no output) with the reply
        on the exception (``error.reply``, a ``llm.Reply``), so the
        documented ``add_call(kind, start, end, error=exc)`` counts it. A cost
        given explicitly is what counts.
        """
        if kind not in CALL_KINDS:
            raise ValueError(f"call kind must be one of {CALL_KINDS}, got {kind!r}")
        if cost_usd is None and cost_nusd is None and isinstance(error, BaseException):
            cost_usd = carried_cost(error)
        # Refused before anything is counted: a record and the spend must agree.
        if cost_nusd is not None and (type(cost_nusd) is not int or cost_nusd < 0):
            raise HarnessContractError(
                f"spend.add_call({kind!r}, ...): cost_nusd must be a non-negative integer (got {cost_nusd!r})"
            )
        if cost_usd is not None and (
            isinstance(cost_usd, bool)
            or not isinstance(cost_usd, (int, float))
            or not math.isfinite(cost_usd)
            or cost_usd < 0
        ):
            raise HarnessContractError(
                f"spend.add_call({kind!r}, ...): cost_usd must be a non-negative number or None (got {cost_usd!r})"
            )
        nusd = cost_nusd if cost_nusd is not None else to_nusd(cost_usd)
        billed = self._billing_of(start, end, error)
        if isinstance(error, BaseException):
            error = record_error(error, escalated_after_truncation=escalated_after_truncation)
        bad_error = None
        if error is not None and not is_error_object(error):
            # Counted all the same; what the harness gave is kept beside the
            # call, whose error says what was wrong (RECORDS.md: an error is
            # null or an object with these fields).
            bad_error = (
                f"spend.add_call({kind!r}, ...): error must be an exception, None or an object "
                "with type (a string), mro (a list), message and escalated_after_truncation "
                f"(got {error!r:.300})"
            )
            extra = {**extra, "reported_error": repr(error)[:2000]}
            error = record_error(HarnessContractError(bad_error))
        bad_times = _bad_times(start, end, self._opened, self._opened_mono)
        if bad_times:
            # Counted all the same, at the time it was reported; what the
            # harness said is kept beside it.
            extra = {**extra, "reported_times": [repr(start), repr(end)]}
            start = end = time.time()
        call = {
            "kind": kind,
            "start": float(start),
            "end": float(end),
            "cost_nusd": nusd,
            "finish_reason": finish_reason,
            "error": error,
            "escalated_after_truncation": bool(escalated_after_truncation),
        }
        if billed is not None:
            call.update(billed)
        if extra:
            call["extra"] = extra
        # Journaled before it counts: the part of this attempt's reported
        # spend no reply of confirmatory.engine.llm journaled already.
        with self._lock:
            due = max(0, self._llm_reported + nusd - self._journaled) if self._journal is not None else 0
            self._journaled += due
        if due and self._journal is not None:  # (due only with a journal)
            self._journal(due)
        # Race: the deadline watcher may abandon the attempt between two calls.
        # Under this lock a cost is either inside the deadline record or a
        # late cost, never both and never neither.
        with self._lock:
            # Whatever the kind: a model reply reported as a "tool" or
            # "explain" call is reported all the same (counted once).
            self._llm_reported += nusd
            late = self.abandoned
            if late:
                self._late += nusd
            else:
                self._calls.append(call)
                self._cost += nusd
            self._spend.add(self.model, nusd)
        if late and nusd:
            self._on_late_cost(nusd)
        if bad_times:
            raise HarnessContractError(f"spend.add_call({kind!r}, ...): {bad_times}")
        if bad_error:
            raise HarnessContractError(bad_error)
        return nusd

    def abandon(self) -> tuple[int, list[dict[str, Any]]] | None:
        """Mark abandoned; return (cost so far, calls so far) for the deadline record.

        None when the attempt already ended normally (``finish`` won the race).
        """
        with self._lock:
            if self.finished:
                return None
            self.abandoned = True
            return self._cost, list(self._calls)

    def finish(self) -> bool:
        """Claim the attempt's end for the lane; False when the deadline already took it."""
        with self._lock:
            if self.abandoned:
                return False
            self.finished = True
            return True

    def snapshot(self) -> tuple[int, list[dict[str, Any]]]:
        with self._lock:
            return self._cost, list(self._calls)


def unreported_breach(aspend: AttemptSpend) -> tuple[int, HarnessContractError] | None:
    """What the harness left unreported in this attempt, as the error the
    record gets: (nano-dollars of confirmatory.engine.llm replies it did not report,
    the error), or None when it reported every call it made."""
    missing, direct = aspend.unreported()
    if not (missing or direct):
        return None
    parts = []
    if missing:
        parts.append(
            f"did not report {missing} nano-dollars of confirmatory.engine.llm replies with spend.add_call "
            "(counted here, as a call of this record)"
        )
    if direct:
        parts.append(
            f"called litellm directly {direct} time(s), not through confirmatory.engine.llm.chat or "
            "responses: the runner cannot tell whether those calls' cost was reported"
        )
    return missing, HarnessContractError("the harness " + "; and it ".join(parts))
