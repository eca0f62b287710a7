"""What the host log says about one attempt: the rule shared by the lanes and `verify`.

This module owns one decision: given the lines of host.jsonl (parsed, in line
order) and an attempt's clock-time window, is the host evidence for the
attempt complete yet, and does any of it make the attempt class `host`?

Theory of operation
-------------------
Clock times are compared with a slack of 0.1 s, widened by the largest
backward wall-clock step the clock corrected, as the samples report it
(``clock_back_max_s``).  The evidence for an attempt is *complete* at the
first sample whose time lies after the attempt's end (both times come from
the one never-backwards clock, so "after" needs no slack; the sampler reads
the outside sources *before* it takes each sample, so the completing sample
comes after every evidence line read by then).  Only the lines up to and
including that sample are looked at:
the lanes decide as soon as that sample exists, while `verify` reads the whole
log hours later, and both must reach the same answer.  Lines written after the
completing sample therefore never change a verdict (the "prefix rule").

Within that prefix an attempt is `host` when
  * a sample inside the widened window shows memory pressure above the
    threshold,
  * an `evidence` line falls inside the widened window, or
  * two consecutive time points (the log's `open` line, then every `sample`;
    a `sample-failed` line is not a sample) are further apart than
    `max_gap_s` and the interval between them touches the widened window.
When no completing sample exists, the span after the last time point is an
open-ended gap, so an attempt that no sample follows is `host`.

Pure: no clock, no files, no threads, no psutil.  Lines of other events
(notes, failures) are ignored.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

BASE_SLACK_S = 0.1
"""Slack for comparing clock times, before any backward wall-clock step widens it."""

NO_SAMPLE_AFTER = "no sample after the attempt"

_POINT_EVENTS = ("open", "sample")  # a tuple: an edited line's event may be unhashable


@dataclass(frozen=True, slots=True)
class HostVerdict:
    """The host evidence for one attempt.

    ``complete``: the log holds a sample after the attempt's end.
    ``reasons``: why the attempt is `host`; empty means the host was fine.
    """

    complete: bool
    reasons: tuple[str, ...]

    @property
    def is_host(self) -> bool:
        return bool(self.reasons)


@dataclass(frozen=True, slots=True)
class HostParams:
    """The design's `[host]` table as plain values, for tests and tools.

    `HostMonitor` takes any object with these attributes (the design's
    ``HostSpec`` is one); this class exists so that callers outside a loaded
    design need not build a pydantic model.
    """

    sample_interval_s: float = 30.0
    max_gap_s: float = 45.0
    sampler_failure_s: float = 300.0
    read_tries: int = 5
    pressure_threshold: float = 10.0
    evidence: tuple[Any, ...] = field(default_factory=tuple)
    window: tuple[float, float | None] | None = None


def completion_key(line: dict[str, Any]) -> Any:
    """When a sample's step began looking at the host: its ``reads_began``
    (the clock time before the step read the evidence sources) where the
    sample has one, else its ``t``. A sample completes an attempt ending at
    ``end`` when this is after ``end``: a guard line written before ``end``
    is then read by that step or an earlier one, so it is in the prefix the
    lane decides on. (A step whose reads began before ``end`` and whose
    sample came after it could miss such a line.)"""
    t = line["t"]
    began = line.get("reads_began")
    return min(began, t) if isinstance(began, (int, float)) and isinstance(t, (int, float)) else t


def completion_index(host_lines: Sequence[dict[str, Any]], end: float) -> tuple[int | None, float]:
    """Index of the sample that completes the evidence for an attempt ending at `end`.

    Returns ``(index, slack)``: ``index`` is None when no sample completes it
    yet; ``slack`` is the slack in force over the prefix that was scanned
    (through the completing sample, or the whole log).
    """
    index, _, back_max = scan_completion(host_lines, end)
    return index, BASE_SLACK_S + back_max


def scan_completion(
    host_lines: Sequence[dict[str, Any]], end: float, resume_at: int = 0, back_max: float = 0.0
) -> tuple[int | None, int, float]:
    """`completion_index`, resumable: scan from `resume_at` with the back-step max so far.

    Returns ``(index or None, where to resume, back-step max)`` so that a
    waiter can look at new lines only; the back-step max (through the
    completing sample) sets the slack of the window.
    """
    for i in range(resume_at, len(host_lines)):
        line = host_lines[i]
        if line.get("event") != "sample":
            continue
        back_max = max(back_max, float(line.get("clock_back_max_s") or 0.0))
        if completion_key(line) > end:
            return i, i + 1, back_max
    return None, len(host_lines), back_max


def attempt_host_verdict(
    host_lines: Sequence[dict[str, Any]],
    start: float,
    end: float,
    *,
    max_gap_s: float,
    pressure_threshold: float,
) -> HostVerdict:
    """The host verdict for an attempt that ran from `start` to `end` (clock times)."""
    index, slack = completion_index(host_lines, end)
    complete = index is not None
    prefix = host_lines[: index + 1] if index is not None else host_lines
    lo, hi = start - slack, end + slack

    reasons: list[str] = []
    previous: float | None = None
    for line in prefix:
        event = line.get("event")
        if event not in _POINT_EVENTS and event != "evidence":
            continue
        t = line["t"]
        if event == "evidence":
            # The line appeared after the source's previous read (`since`)
            # and by this read (`t`): host evidence if that span touches the
            # window. (No `since`: the read time alone.)
            since = line.get("since", t)
            since = min(since, t) if isinstance(since, (int, float)) else t
            if lo <= t and since <= hi:
                reasons.append(f"evidence {line.get('source')}: {line.get('line')} at {_fmt_t(t)}")
            continue
        if event == "sample":
            pressure = line.get("mem_pressure")
            if pressure is not None and lo <= t <= hi and pressure > pressure_threshold:
                reasons.append(f"pressure {pressure:g} > {pressure_threshold:g} at {_fmt_t(t)}")
        if previous is not None and _touches(previous, t, lo, hi) and t - previous > max_gap_s:
            reasons.append(f"gap of {t - previous:.3f} s between samples at {_fmt_t(previous)} and {_fmt_t(t)}")
        previous = t

    if not complete:
        # The span after the last time point has no sample yet: an open gap.
        # It touches the window unless the log began after the attempt ended.
        last = -math.inf if previous is None else previous
        if last <= hi:
            reasons.append(NO_SAMPLE_AFTER)
    return HostVerdict(complete=complete, reasons=tuple(reasons))


def _touches(a: float, b: float, lo: float, hi: float) -> bool:
    """Whether the closed interval [a, b] overlaps [lo, hi]."""
    return a <= hi and b >= lo


def _fmt_t(t: float) -> str:
    return f"{t:.3f}"


class HostTimeline:
    """host.jsonl's lines indexed by time: one verdict per attempt without rescanning the log.

    ``attempt_host_verdict`` reads the log from its first line; over a run of
    hours that is a cost per attempt that grows with the run. Of the prefix it
    reads, only the last time point before the attempt's widest window and
    what follows can change the verdict, except that the slack grows with the
    largest backward clock step reported *anywhere* before. So ``verdict``
    hands it the slice from that time point to the completing sample, the
    slice's first sample carrying the running maximum of ``clock_back_max_s``
    up to it: the same verdict as on the whole prefix (tests compare both).
    That needs times in line order, which the never-backwards clock gives;
    when they are not, every verdict is taken on the whole prefix.

    Pure and append-only: the sampler appends what it writes; ``verify``
    builds one from the file.
    """

    def __init__(self, lines: Sequence[dict[str, Any]] = ()) -> None:
        self.lines: list[dict[str, Any]] = []
        self.times: list[float] = []
        self._back: list[float] = []  # running max of clock_back_max_s through each line
        self._sample_at: list[int] = []  # line indices of samples
        self._sample_c: list[float] = []  # each sample's completion_key
        self.monotone = True  # times, and the samples' completion keys, never decrease
        for line in lines:
            self.append(line)

    def __len__(self) -> int:
        return len(self.lines)

    @property
    def back_max(self) -> float:
        return self._back[-1] if self._back else 0.0

    def append(self, line: dict[str, Any]) -> None:
        t = line.get("t")
        if not isinstance(t, (int, float)):
            t = self.times[-1] if self.times else 0.0
        if self.times and t < self.times[-1]:
            self.monotone = False
        back = self.back_max
        if line.get("event") == "sample":
            step = line.get("clock_back_max_s")
            # (a number in every line the sampler writes; an edited one
            # elsewhere is the rule's to refuse, not the index's)
            back = max(back, float(step) if isinstance(step, (int, float)) else 0.0)
            began = line.get("reads_began")
            c = min(began, t) if isinstance(began, (int, float)) else t
            if self._sample_c and c < self._sample_c[-1]:
                self.monotone = False
            self._sample_at.append(len(self.lines))
            self._sample_c.append(c)
        self.lines.append(line)
        self.times.append(t)
        self._back.append(back)

    def completion(self, end: float, limit: int | None = None) -> int | None:
        """Line index of the first sample completing ``end`` (`completion_key`) among the first ``limit`` lines."""
        n = len(self.lines) if limit is None else min(limit, len(self.lines))
        if not self.monotone:
            return completion_index(self.lines[:n], end)[0]
        k = bisect.bisect_right(self._sample_c, end)
        if k < len(self._sample_at) and self._sample_at[k] < n:
            return self._sample_at[k]
        return None

    def back_until(self, end: float) -> float:
        """The largest backward clock step reported through the first sample
        after ``end`` (through the last line when there is none): the steps
        an attempt ending at ``end`` can have lived through."""
        if not self.lines:
            return 0.0
        done = self.completion(end)
        return self._back[len(self.lines) - 1 if done is None else done]

    def verdict(
        self, start: float, end: float, *, max_gap_s: float, pressure_threshold: float, limit: int | None = None
    ) -> HostVerdict:
        """The verdict on the first ``limit`` lines (all when None), from a slice of them."""
        n = len(self.lines) if limit is None else max(0, min(limit, len(self.lines)))
        return attempt_host_verdict(
            self.window(start, end, n), start, end, max_gap_s=max_gap_s, pressure_threshold=pressure_threshold
        )

    def window(self, start: float, end: float, n: int) -> Sequence[dict[str, Any]]:
        if not self.monotone or n == 0:
            return self.lines[:n]
        slack = BASE_SLACK_S + self._back[n - 1]
        # the last time point strictly before the widest possible window start
        i = bisect.bisect_left(self.times, start - slack, 0, n) - 1
        while i >= 0 and self.lines[i].get("event") not in _POINT_EVENTS:
            i -= 1
        first = max(i, 0)
        done = self.completion(end, n)
        stop = n if done is None else done + 1
        out = self.lines[first:stop]
        carry = self._back[first - 1] if first > 0 else 0.0
        if carry > 0:
            for k, line in enumerate(out):
                if line.get("event") == "sample":
                    out = list(out)
                    own = float(line.get("clock_back_max_s") or 0.0)
                    out[k] = {**line, "clock_back_max_s": max(own, carry)}
                    break
            else:
                return self.lines[:n]  # no sample to carry the running maximum: the whole prefix
        return out
