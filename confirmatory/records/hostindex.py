"""Indexes over host.jsonl (RECORDS.md) for the host rule
(`hostrules.attempt_host_verdict`), so that judging an attempt does not
rescan the whole log.

``HostIndex`` (the lanes' `hostrules.HostTimeline`) holds every line and
hands the rule only those that can matter for one attempt. ``HostSummary``
gives the same verdicts from what little of a regular host log can matter:
its size grows with the log's exceptions (gaps, pressure, evidence, clock
steps), not with its samples, which it keeps in `column.Column`s. Its
look-ups go through ``_Least`` (a tree of least values) and ``_Overlaps``
(intervals found by overlap with a window).

Pure: nothing here writes, and nothing imports the runner, litellm or psutil.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Any

from confirmatory.core.hostrules import (
    BASE_SLACK_S,
    NO_SAMPLE_AFTER,
    HostTimeline,
    HostVerdict,
    _fmt_t,
)
from confirmatory.records import column
from confirmatory.records.column import Column

# The lanes' index of host.jsonl (hostrules.HostTimeline), under the name
# verify's tests know it by: it holds every line, so verify itself uses
# ``HostSummary``, which gives the same verdicts.
HostIndex = HostTimeline

_POINTS = ("open", "sample")  # a tuple: an edited line's event may be unhashable
_NUM = (int, float)


def _maybe_num(v: object) -> bool:
    """None or a number: what the host rule reads a sample's clock step and pressure as."""
    return v is None or isinstance(v, _NUM)


_SCAN_MARKS = 8  # marks an attempt's window is compared with one by one, before the tree takes over


class _Least:
    """A tree of the least value over each run of a list: ``at_most(k, x)``
    yields, in order, every position from ``k`` on whose value is <= x,
    skipping every run whose values are all above x: the log of the list's
    length plus the positions it yields. A NaN value is never <= x."""

    def __init__(self, values: Sequence[float] = ()) -> None:
        self._build([v if v == v else float("inf") for v in values])

    def _build(self, leaves: list[float]) -> None:
        size = 1
        while size < len(leaves):
            size *= 2
        tree = [float("inf")] * (2 * size)  # tree[v]: the least value under node v; leaves from size
        tree[size : size + len(leaves)] = leaves
        for v in range(size - 1, 0, -1):
            tree[v] = min(tree[2 * v], tree[2 * v + 1])
        self.size, self.tree, self.n = size, tree, len(leaves)

    def append(self, value: float) -> None:
        """One more value, at the end: the log of the length (a rebuild at twice the size when full)."""
        value = value if value == value else float("inf")
        if self.n == self.size:
            self._build([*self.tree[self.size : self.size + self.n], value])
            return
        tree, v = self.tree, self.size + self.n
        tree[v] = value
        self.n += 1
        v //= 2
        while v and value < tree[v]:
            tree[v] = value
            v //= 2

    def at_most(self, k: int, x: float) -> Iterator[int]:
        tree, size = self.tree, self.size
        stack = [(1, 0, size)]  # (node, its first leaf, past its last); the left child is taken first
        while stack:
            v, first, past = stack.pop()
            if past <= k or not tree[v] <= x:
                continue
            if v >= size:
                yield v - size
                continue
            middle = (first + past) // 2
            stack.append((2 * v + 1, middle, past))
            stack.append((2 * v, first, middle))


class _Overlaps:
    """Intervals [a, b], found by overlap with a window: ``touching(lo, hi)``
    yields the index of each interval with b >= lo and a <= hi, in order of
    b. The intervals are sorted by b, their starts in a `_Least` tree, which
    skips every run of them that all start after hi: a query costs the log
    of their number plus the intervals it yields (a scan of those ending
    after lo would cost all of them, for every attempt). An interval whose a
    or b is NaN touches no window and is left out."""

    def __init__(self, starts: list[float], ends: list[float]) -> None:
        order = sorted((b, j) for j, b in enumerate(ends) if b == b and starts[j] == starts[j])
        self.ends = [b for b, _ in order]
        self.index = [j for _, j in order]
        self.starts = _Least([starts[j] for _, j in order])

    def touching(self, lo: float, hi: float) -> Iterator[int]:
        index = self.index
        for k in self.starts.at_most(bisect.bisect_left(self.ends, lo), hi):
            yield index[k]


class HostSummary:
    """host.jsonl reduced to what a verdict needs, fed line by line.

    For one pair of rule parameters (the manifest's ``max_gap_s`` and
    ``pressure_threshold``), ``verdict(start, end, limit=n)`` returns exactly
    what `hostrules.attempt_host_verdict` returns on the log's first ``n``
    lines (all when None; tests compare both on random logs), keeping only:
    every sample's time and completion key (to find an attempt's completing
    sample, the first sample after its end, and so where its prefix is cut;
    held in `column.Column`s, which keep only a sparse index and a few blocks
    in memory and the rest in a temporary file with no name); the
    evidence lines and the samples above the pressure threshold, with their
    reasons; the gaps longer than ``max_gap_s`` between consecutive time
    points; the positions of the lines that are not samples; and where the
    running maximum backward clock step rises. Everything but the sample
    times is set by the log's exceptions, not by how many samples it has,
    and so is what it holds in memory.

    ``files``: two descriptors the sample columns write their blocks to (see
    `column.Column`: a summary built in one process and read in another that
    holds the same descriptors); by default each column makes its own file.
    ``block``: the columns' block size (`column.BLOCK` when None).

    Any log, also one only an edit makes: where times go back somewhere
    (``monotone`` False) the marks and gaps are looked up in time order
    instead of line order, and the completing sample is found on the keys'
    running maximum, so the verdicts stay exact; the rule reads a prefix of
    the log line by line, so they stay exact whatever order its lines are
    in. A line where the rule reads a number and finds none (a time, clock
    step or pressure; ``poison``) may make the rule fail: a verdict whose
    prefix holds one raises ValueError instead (tests compare both on
    random edited logs).
    """

    def __init__(
        self,
        *,
        max_gap_s: float,
        pressure_threshold: float,
        files: tuple[int, int] | None = None,
        block: int | None = None,
    ) -> None:
        self.max_gap_s = max_gap_s
        self.pressure_threshold = pressure_threshold
        self.monotone = True
        self.poison: list[int] = []  # lines with a value the rule cannot compare (see _frame)
        self.back_max = 0.0
        self.lines = 0
        self._last = float("-inf")  # the latest time so far (a time that is not a number counts as it)
        self._prev_point: float | None = None
        t_fd, c_fd = files if files is not None else (None, None)
        block = column.BLOCK if block is None else block
        self.sample_t = Column(t_fd, block=block)  # every sample's time, in line order
        self.sample_c = Column(c_fd, block=block)  # ... and its hostrules.completion_key
        # the columns' full blocks are moved out every (a power of two >= block) lines
        self._settle_mask = (1 << (block - 1).bit_length()) - 1
        self._max_c = float("-inf")  # the running maximum of the completion keys
        # the marks' and gaps' interval indexes (made when first asked)
        self._by_t: tuple[_Overlaps, _Overlaps] | None = None
        self._since: _Least | None = None  # the marks' since, in line order (made when first asked, then kept up)
        self._marks_nan = False  # whether a mark's time is NaN
        self._other: list[int] = []  # line index of every line that is not a sample
        self._other_q: list[int] = []  # samples before each of those lines
        self._opens: list[tuple[int, float]] = []  # time points that are not samples: (line, t)
        self._rise_k: list[int] = []  # sample index where the running back-step max rises
        self._rise_b: list[float] = []  # ... to this value
        self.marks_t: list[float] = []  # evidence lines and pressure samples: t
        self.marks_since: list[float] = []  # ... and since when (an evidence line's `since`, else t)
        self.mark_span = 0.0  # the longest t - since
        self.marks: list[tuple[int, int, str]] = []  # (line, 0, reason)
        self.gaps_end: list[float] = []  # gap (q, p): p
        self.gaps: list[tuple[float, int, str]] = []  # (q, line of p, reason)

    def add(self, obj: dict[str, Any]) -> None:
        t: Any  # a line's time: any JSON value (an edited line's may be no number)
        if obj.get("event") == "sample":
            # the common line, a sample with float time (not before the last),
            # clock step and pressure: the general path below, shortened
            t, back, pressure = obj.get("t"), obj.get("clock_back_max_s"), obj.get("mem_pressure")
            began = obj.get("reads_began", t)
            if (
                type(t) is float
                and type(back) is float
                and type(pressure) is float
                and t >= self._last
                and type(began) is float
            ):
                i = self.lines
                self.lines = i + 1
                if not i & self._settle_mask:
                    self._settle()
                self._last = t
                self._sample(i, t, back, pressure, began if began < t else t)
                self._point(i, t)
                return
        i = self.lines
        self.lines += 1
        if not i & self._settle_mask:
            self._settle()
        t = obj.get("t")
        num = isinstance(t, _NUM)
        ct = t if num else (self._last if self._last != float("-inf") else 0.0)
        if ct < self._last:
            self.monotone = False
        if ct > self._last:
            self._last = ct
        event = obj.get("event")
        counted = event in _POINTS or event == "evidence"  # the lines the rule reads
        poisoned = counted and (
            not num
            or event == "sample"
            and not (_maybe_num(obj.get("clock_back_max_s")) and _maybe_num(obj.get("mem_pressure")))
        )
        if poisoned:
            self.poison.append(i)
        if event != "sample" or poisoned:  # a sample the rule cannot read is no sample here
            self._other_q.append(i - len(self._other))
            self._other.append(i)
        if not counted or poisoned:
            return
        if event == "evidence":
            since = obj.get("since", t)
            since = min(since, t) if isinstance(since, _NUM) else t  # as the rule reads it
            self.marks_t.append(t)
            self._marks_nan = self._marks_nan or t != t
            self.marks_since.append(since)
            self.mark_span = max(self.mark_span, t - since)
            self.marks.append((i, 0, f"evidence {obj.get('source')}: {obj.get('line')} at {_fmt_t(t)}"))
            self._by_t = None
            return
        if event == "sample":
            back, pressure = obj.get("clock_back_max_s"), obj.get("mem_pressure")
            began = obj.get("reads_began")
            self._sample(i, t, float(back or 0.0), pressure, min(began, t) if isinstance(began, _NUM) else t)
        else:
            self._opens.append((i, t))
        self._point(i, t)

    def _sample(self, i: int, t: float, back: float, pressure: float | None, c: float) -> None:
        """A sample at line ``i``: its time and completion key, a rise of the back-step max, a pressure mark."""
        # the running maximum of the keys: the first sample whose key is after
        # an end is the first whose running maximum is (a NaN key never is),
        # and it never decreases, whatever order an edited log's keys are in
        if c > self._max_c:
            self._max_c = c
        self.sample_c.append(self._max_c)
        if back > self.back_max:
            self._rise_k.append(len(self.sample_t))
            self._rise_b.append(back)
            self.back_max = back
        self.sample_t.append(t)
        if pressure is not None and pressure > self.pressure_threshold:
            self.marks_t.append(t)
            self._marks_nan = self._marks_nan or t != t
            self.marks_since.append(t)
            self.marks.append((i, 0, f"pressure {pressure:g} > {self.pressure_threshold:g} at {_fmt_t(t)}"))
            self._by_t = None

    def _settle(self) -> None:
        """Move the sample columns' full blocks out of memory (every
        ``_settle_mask + 1`` lines: the tails stay small)."""
        self.sample_t.settle()
        self.sample_c.settle()

    def _point(self, i: int, t: float) -> None:
        """A time point (open or sample) at line ``i``: a gap since the previous one."""
        previous = self._prev_point
        if previous is not None and t - previous > self.max_gap_s:
            self.gaps_end.append(t)
            self.gaps.append(
                (previous, i, f"gap of {t - previous:.3f} s between samples at {_fmt_t(previous)} and {_fmt_t(t)}")
            )
            self._by_t = None
        self._prev_point = t

    # -- joining ---------------------------------------------------------------------
    def state(self) -> tuple[Any, ...]:
        """Everything a summary holds, for comparing two summaries."""
        return (
            self.max_gap_s,
            self.pressure_threshold,
            self.monotone,
            self.poison,
            self._max_c,
            self.back_max,
            self.lines,
            self._last,
            self._prev_point,
            list(self.sample_t),
            list(self.sample_c),
            self._other,
            self._other_q,
            self._opens,
            self._rise_k,
            self._rise_b,
            self.marks_t,
            self.marks_since,
            self.mark_span,
            self.marks,
            self.gaps_end,
            self.gaps,
        )

    @classmethod
    def join(cls, parts: list[tuple[HostSummary, object]]) -> HostSummary | None:
        """The summary of a log from the summaries of its consecutive spans,
        each built from a fresh summary: ``parts`` is [(summary, the ``t`` of
        the span's first line)]. Exactly what feeding every line to one
        summary gives (tests compare every field, cut at every line), or None
        where a later span's first line has no numeric time (a fresh summary
        would then start its clock at 0, not where the span before left it).
        ``parts`` is consumed (emptied), and the first summary becomes the
        whole: use neither afterwards.
        """
        # The first span's summary is the start of the whole, extended in
        # place, not copied; each later one is taken off ``parts`` and let
        # go once appended.
        parts.reverse()
        whole = parts.pop()[0]
        while parts:
            part, first_t = parts.pop()
            if not isinstance(first_t, _NUM):
                return None
            if first_t < whole._last:  # where the span starts, time went back: as the fold would see it
                whole.monotone = False
            whole._extend(part)
        return whole

    def _extend(self, part: HostSummary) -> None:
        """Append a span's summary to this one (see ``join``)."""
        lines, samples = self.lines, len(self.sample_t)
        self.monotone = self.monotone and part.monotone
        self.poison.extend(i + lines for i in part.poison)
        self._by_t = None
        # the gap from this summary's last time point to the span's first
        points = part._opens[:1] + ([(part._line_of(0), part.sample_t[0])] if len(part.sample_t) else [])
        if points and self._prev_point is not None:
            first_line, first_point = min(points)
            previous = self._prev_point
            if first_point - previous > self.max_gap_s:
                self.gaps_end.append(first_point)
                self.gaps.append(
                    (
                        previous,
                        lines + first_line,
                        f"gap of {first_point - previous:.3f} s between samples at "
                        f"{_fmt_t(previous)} and {_fmt_t(first_point)}",
                    )
                )
        for k, b in zip(part._rise_k, part._rise_b):
            if b > self.back_max:
                self._rise_k.append(samples + k)
                self._rise_b.append(b)
                self.back_max = b
        self.sample_t.extend(part.sample_t)
        self.sample_c.extend(part.sample_c, floor=self._max_c)  # the running maximum goes on across the seam
        if part._max_c > self._max_c:
            self._max_c = part._max_c
        self._other.extend(i + lines for i in part._other)
        self._other_q.extend(q + samples for q in part._other_q)
        self._opens.extend((i + lines, t) for i, t in part._opens)
        self.marks_t.extend(part.marks_t)
        self._marks_nan = self._marks_nan or part._marks_nan
        self.marks_since.extend(part.marks_since)
        self.mark_span = max(self.mark_span, part.mark_span)
        self.marks.extend((i + lines, z, r) for i, z, r in part.marks)
        self.gaps_end.extend(part.gaps_end)
        self.gaps.extend((q, i + lines, r) for q, i, r in part.gaps)
        self._last = max(self._last, part._last)
        if part._prev_point is not None:
            self._prev_point = part._prev_point
        self.lines += part.lines

    # -- queries -------------------------------------------------------------------
    def _line_of(self, k: int) -> int:
        """Line index of sample ``k``."""
        return k + bisect.bisect_right(self._other_q, k)

    def _back_through(self, k: int) -> float:
        """Running back-step maximum through sample ``k`` (0 before any)."""
        j = bisect.bisect_right(self._rise_k, k) - 1
        return self._rise_b[j] if j >= 0 and k >= 0 else 0.0

    def _completing(self, end: float, hi: int | None = None) -> int:
        """Index of the first sample completing ``end`` (its key after
        ``end``) among the first ``hi``: a bisection of the keys' running
        maximum."""
        k = self.sample_c.rank(end)
        return k if hi is None or k < hi else hi

    def completion(self, end: float) -> int | None:
        """Line index of the first sample after ``end`` (None: no such sample)."""
        k = self._completing(end)
        return self._line_of(k) if k < len(self.sample_c) else None

    def back_until(self, end: float) -> float:
        """As `HostTimeline.back_until`: the running backward-step maximum
        through the first sample after ``end`` (through the last sample when
        there is none)."""
        n = len(self.sample_t)
        return self._back_through(min(self._completing(end), n - 1)) if n else 0.0

    def _frame(self, start: float, end: float, limit: int | None) -> tuple[bool, int, float, float, int]:
        """(complete, last line looked at, lo, hi, samples in the prefix)."""
        n = self.lines if limit is None else len(range(self.lines)[:limit])  # as lines[:limit] counts
        ns = n - bisect.bisect_left(self._other, n)  # samples among the first n lines
        k = self._completing(end, ns)  # the first sample completing end, among the prefix's
        if k < ns:
            complete, cut, back = True, self._line_of(k), self._back_through(k)
        else:
            complete, cut, back = False, n - 1, self._back_through(ns - 1)
        if self.poison and self.poison[0] <= cut:
            # The rule reads its prefix line by line and compares what it
            # reads: on this line it may fail. Taken as failing: no verdict.
            raise ValueError(
                f"host.jsonl line {self.poison[0]} holds a value the host rule cannot compare "
                "(a time, clock step or pressure that is not a number)"
            )
        slack = BASE_SLACK_S + back
        return complete, cut, start - slack, end + slack, ns

    def _time_ordered(self) -> tuple[_Overlaps, _Overlaps]:
        """The marks and the gaps as intervals (a mark from its ``since`` to
        its ``t``, a gap from its first time point to its last), each in an
        `_Overlaps` index, for a log whose times go back somewhere (its marks
        and gaps are then not in time order, nor are their starts). Made when
        first asked, again after an addition."""
        if self._by_t is None:
            self._by_t = (
                _Overlaps(self.marks_since, self.marks_t),
                _Overlaps([q for q, _, _ in self.gaps], self.gaps_end),
            )
        return self._by_t

    def _since_tree(self) -> _Least | None:
        """The marks' ``since`` in a `_Least` tree, in line order, for a log in
        time order, brought up to date with the marks added since it was last
        asked for (the runner's monitor adds as it asks); None where a mark's
        time is NaN (a NaN keeps the log "in time order", yet its marks' times
        are then no order to bisect: they are looked up as the intervals of a
        log whose times go back)."""
        if self._marks_nan:
            return None
        tree = self._since
        if tree is None:
            tree = self._since = _Least()
        since = self.marks_since
        while tree.n < len(since):
            tree.append(since[tree.n])
        return tree

    def _hits(self, lo: float, hi: float, cut: int, first: bool) -> list[tuple[int, int, str]]:
        """The marks and gaps in the prefix through line ``cut`` that touch
        [lo, hi], as (line, 0 mark / 1 gap, reason); with ``first``, at most one."""
        hits = []
        if self.monotone and not self._marks_nan:  # times in line order: the marks in time order too
            marks_t, since, n, last = self.marks_t, self.marks_since, len(self.marks_t), hi + self.mark_span
            k = bisect.bisect_left(marks_t, lo)
            scanned = 0
            while k < n and marks_t[k] <= last and self.marks[k][0] <= cut:
                if since[k] <= hi:
                    hits.append(self.marks[k])
                    if first:
                        return hits
                k += 1
                scanned += 1
                if scanned == _SCAN_MARKS and (tree := self._since_tree()) is not None:
                    # Many marks after the window's start yet before the cut:
                    # one evidence line that reaches far back (a long
                    # ``since``) makes ``last`` late. The rest of the scan
                    # from the tree of the ``since``s: the marks' times and
                    # lines only rise, so the scan's end is the first mark
                    # the tree yields past it.
                    for j in tree.at_most(k, hi):
                        if not (marks_t[j] <= last and self.marks[j][0] <= cut):
                            break
                        hits.append(self.marks[j])
                        if first:
                            return hits
                    break
        elif self.marks_t:
            for j in self._time_ordered()[0].touching(lo, hi):
                if self.marks[j][0] <= cut:
                    hits.append(self.marks[j])
                    if first:
                        return hits
        if self.monotone:
            k = bisect.bisect_left(self.gaps_end, lo)  # gaps are disjoint: the later ones start after hi
            while k < len(self.gaps) and self.gaps[k][0] <= hi and self.gaps[k][1] <= cut:
                hits.append((self.gaps[k][1], 1, self.gaps[k][2]))
                if first:
                    return hits
                k += 1
        else:
            for j in self._time_ordered()[1].touching(lo, hi):
                q, line, reason = self.gaps[j]
                if line <= cut:
                    hits.append((line, 1, reason))
                    if first:
                        return hits
        return hits

    def _open_gap(self, cut: int, ns: int, hi: float) -> bool:
        """An incomplete prefix: does the span after its last time point touch the window?"""
        last_line, last = -1, float("-inf")
        if ns:
            last_line, last = self._line_of(ns - 1), self.sample_t[ns - 1]
        j = bisect.bisect_right(self._opens, (cut, float("inf"))) - 1
        if j >= 0 and self._opens[j][0] > last_line:
            last = self._opens[j][1]
        return last <= hi

    def is_host(self, start: float, end: float, limit: int | None = None) -> bool:
        """Whether the verdict has reasons (the hot path: no strings built)."""
        complete, cut, lo, hi, ns = self._frame(start, end, limit)
        return bool(self._hits(lo, hi, cut, True)) or (not complete and self._open_gap(cut, ns, hi))

    def verdict(
        self,
        start: float,
        end: float,
        *,
        max_gap_s: float | None = None,
        pressure_threshold: float | None = None,
        limit: int | None = None,
    ) -> HostVerdict:
        if (max_gap_s is not None and max_gap_s != self.max_gap_s) or (
            pressure_threshold is not None and pressure_threshold != self.pressure_threshold
        ):
            raise ValueError("HostSummary was built for other rule parameters")
        complete, cut, lo, hi, ns = self._frame(start, end, limit)
        reasons = [r for _, _, r in sorted(self._hits(lo, hi, cut, False))]
        if not complete and self._open_gap(cut, ns, hi):
            reasons.append(NO_SAMPLE_AFTER)
        return HostVerdict(complete=complete, reasons=tuple(reasons))
