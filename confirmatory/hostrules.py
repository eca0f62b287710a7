"""What the host log says about one attempt: the rule shared by the lanes and `verify`.

This module owns one decision: given the lines of host.jsonl (parsed, in line
order) and an attempt's clock-time window, is the host evidence for the
attempt complete yet, and does any of it make the attempt class `host`?

Theory of operation
-------------------
Clock times are compared with a slack of 0.1 s, widened by the largest
backward wall-clock step the clock corrected, as the samples report it
(``clock_back_max_s``).  The evidence for an attempt is *complete* at the
first sample whose time lies beyond the attempt's end plus the slack known at
that line.  Only the lines up to and including that sample are looked at:
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

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

BASE_SLACK_S = 0.1
"""Slack for comparing clock times, before any backward wall-clock step widens it."""

NO_SAMPLE_AFTER = "no sample after the attempt"

_POINT_EVENTS = frozenset({"open", "sample"})


@dataclass(frozen=True, slots=True)
class HostVerdict:
    """The host evidence for one attempt.

    ``complete``: the log holds a sample after the attempt's end (plus slack).
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


def completion_index(host_lines: Sequence[dict], end: float) -> tuple[int | None, float]:
    """Index of the sample that completes the evidence for an attempt ending at `end`.

    Returns ``(index, slack)``: ``index`` is None when no sample completes it
    yet; ``slack`` is the slack in force over the prefix that was scanned
    (through the completing sample, or the whole log).
    """
    index, _, back_max = scan_completion(host_lines, end)
    return index, BASE_SLACK_S + back_max


def scan_completion(
    host_lines: Sequence[dict], end: float, resume_at: int = 0, back_max: float = 0.0
) -> tuple[int | None, int, float]:
    """`completion_index`, resumable: scan from `resume_at` with the back-step max so far.

    Returns ``(index or None, where to resume, back-step max)`` so that a
    waiter can look at new lines only.  A sample's own ``clock_back_max_s``
    widens the slack before that sample is tested: the step it reports
    happened before the sample was taken, so its time may already be
    displaced by it.
    """
    for i in range(resume_at, len(host_lines)):
        line = host_lines[i]
        if line.get("event") != "sample":
            continue
        back_max = max(back_max, float(line.get("clock_back_max_s") or 0.0))
        if line["t"] > end + BASE_SLACK_S + back_max:
            return i, i + 1, back_max
    return None, len(host_lines), back_max


def attempt_host_verdict(
    host_lines: Sequence[dict],
    start: float,
    end: float,
    *,
    max_gap_s: float,
    pressure_threshold: float,
) -> HostVerdict:
    """The host verdict for an attempt that ran from `start` to `end` (clock times)."""
    index, slack = completion_index(host_lines, end)
    complete = index is not None
    prefix = host_lines[: index + 1] if complete else host_lines
    lo, hi = start - slack, end + slack

    reasons: list[str] = []
    previous: float | None = None
    for line in prefix:
        event = line.get("event")
        if event not in _POINT_EVENTS and event != "evidence":
            continue
        t = line["t"]
        if event == "evidence":
            if lo <= t <= hi:
                reasons.append(f"evidence {line.get('source')}: {line.get('line')} at {_fmt_t(t)}")
            continue
        if event == "sample":
            pressure = line.get("mem_pressure")
            if pressure is not None and lo <= t <= hi and pressure > pressure_threshold:
                reasons.append(
                    f"pressure {pressure:g} > {pressure_threshold:g} at {_fmt_t(t)}"
                )
        if previous is not None and _touches(previous, t, lo, hi) and t - previous > max_gap_s:
            reasons.append(
                f"gap of {t - previous:.3f} s between samples at {_fmt_t(previous)} and {_fmt_t(t)}"
            )
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
