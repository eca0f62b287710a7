"""The records' clocks, and how far the time checks let them disagree.

Owns the slacks: a call's raw times against its attempt's (`CALL_SLACK_S`),
the wall clock's NTP slew against the watcher's monotonic clock
(`DEADLINE_DRIFT`), a rerun pass's wait (`RERUN_WAIT_SLACK_S`); how far the
wall clock may have stepped back by a time, as host.jsonl reports it
(`stepped_back_through`); and how far it ran ahead of the monotonic clock
between two host samples (`ClockDrift`, read off host.jsonl's samples).
"""

from __future__ import annotations

from typing import Any

from confirmatory.verify.context import RunContext

CALL_SLACK_S = 1.0
# How far a watched attempt's clock duration may fall short of the deadline
# (a deadline record) or pass it (any other record): see ModelCheck.attempt.
# The watcher measures on time.monotonic; the records' times are the wall
# clock's, which NTP slews by at most 500 ppm (twice that allowed).
DEADLINE_DRIFT = 0.001
# What a rerun pass's wait may fall short of on the records' clock: the
# lane waits on the monotonic clock (Event.wait), and the never-backwards
# clock's times can lag it by the wall clock's backward steps (reported in
# host.jsonl, added where they are) and NTP's slew (DEADLINE_DRIFT).
RERUN_WAIT_SLACK_S = 0.01


def _num(t: object) -> bool:
    return type(t) is float or type(t) is int


def stepped_back_through(ctx: RunContext, t: float) -> float:
    """How far the wall clock may have stepped back by the sample after
    ``t``: the steps host.jsonl reports through it, and what a reported step
    may leave unseen (the clock measures from its last reading:
    ClockDrift.unseen, below)."""
    if not ctx.host.back_max > 0:
        return 0.0
    back = ctx.host.back_until(t)
    unseen = ctx.clock_drift.unseen if ctx.clock_drift is not None else 0.0
    return back + unseen if back > 0 else 0.0


class ClockDrift:
    """How far the wall clock ran ahead of the monotonic one between two host
    samples, at most: the largest rise, in line order, of a sample's ``wall -
    mono`` over an earlier one's (a forward step, or a suspended machine: the
    attempt deadline's watcher measures on the monotonic clock, the records'
    times are the wall clock's). A value that is not a number is passed over."""

    __slots__ = ("low", "high", "rise", "unseen", "first_mono", "first_back", "last_mono")
    first_mono: float | None
    last_mono: float | None

    def __init__(self) -> None:
        self.low, self.high, self.rise = float("inf"), float("-inf"), 0.0
        # ``unseen``: how much of a backward step the samples may not show, at
        # most. The clock measures a step from its own last reading
        # (clock.Clock.now: the largest wall time read so far, less the
        # wall time now), so a step is reported short by the time between
        # the clock's last reading before it and its first after it; the
        # sample that reports it was the clock's reading after it, or later,
        # and the sample before it was a reading before it: that time is at
        # most the two samples' monotonic gap. The largest such gap before a
        # sample that reports a step (0: no step reported).
        self.unseen = 0.0
        self.first_mono = self.last_mono = None
        self.first_back = 0.0

    def add(self, wall: Any, mono: Any, back: Any = 0.0) -> None:  # host.jsonl's values, of any kind
        if (type(wall) is float or type(wall) is int) and (type(mono) is float or type(mono) is int):
            off = wall - mono
            if off - self.low > self.rise:
                self.rise = off - self.low
            if off < self.low:
                self.low = off
            if off > self.high:
                self.high = off
        if type(mono) is float or type(mono) is int:
            stepped = (type(back) is float or type(back) is int) and back > 0
            if self.last_mono is None:
                self.first_mono, self.first_back = mono, (back if stepped else 0.0)
            elif stepped and mono - self.last_mono > self.unseen:
                self.unseen = mono - self.last_mono
            self.last_mono = mono

    def then(self, later: ClockDrift) -> ClockDrift:
        """This span's drift followed by a later span's: the whole's."""
        out = ClockDrift()
        out.low, out.high = min(self.low, later.low), max(self.high, later.high)
        out.rise = max(self.rise, later.rise, later.high - self.low)
        out.unseen = max(self.unseen, later.unseen)
        if later.first_back > 0 and self.last_mono is not None and later.first_mono is not None:
            out.unseen = max(out.unseen, later.first_mono - self.last_mono)  # the gap across the spans' seam
        first = self if self.first_mono is not None else later
        out.first_mono, out.first_back = first.first_mono, first.first_back
        out.last_mono = later.last_mono if later.last_mono is not None else self.last_mono
        return out
