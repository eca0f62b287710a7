"""host.jsonl: the shape of its lines (invariant 2) and the summary the host checks read.

Owns the kinds of a sample's fields, the lines the monitor writes (samples,
evidence from a source of the design, failed samples, notes; the open line
first and only there), and reading the log once into a `HostSummary` and its
`ClockDrift`: in this process, or cut into spans (`host_spans`) that workers
check and summarize one each, joined in line order (`join_host_spans`). A
span or seam that is not a clean link falls back to the one pass, whose
findings then say exactly what and where.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from confirmatory.records.chain import open_regular
from confirmatory.records.hostindex import HostSummary
from confirmatory.records.reader import ChainReader
from confirmatory.verify.clocks import ClockDrift
from confirmatory.verify.context import RulesView
from confirmatory.verify.logs import LogPass
from confirmatory.verify.report import Findings

if TYPE_CHECKING:
    from confirmatory.core.merkle import Range
    from confirmatory.records.chain import ChainCheck

    # what a host-span worker hands back (_host_span): its chain check, (heads, times, trees) at the
    # anchored counts, where it says it starts, its first line's event and t, its summary, drift, findings
    HostSpan = tuple[
        ChainCheck | None,
        tuple[dict[int, str], dict[int, Any], list[Range] | None],
        tuple[int, str] | None,
        Any,
        Any,
        HostSummary,
        ClockDrift,
        Findings,
    ]
    # read_host's and join_host_spans's: the verdicts' view, the samples' drift, (findings, valid lines)
    HostRead = tuple[HostSummary, ClockDrift, tuple[Findings, dict[str, int]]]

# The fields of a host sample (RECORDS.md, docs/HOST.md) and their kinds. A
# sample never lacks one; `reads_began` is an extra field, a number when there.
SAMPLE_NUMBERS = ("t", "wall", "mono", "mem_pressure", "load1", "clock_back_max_s")
SAMPLE_INTEGERS = ("mem_available", "swap_used")
_ABSENT = object()


def sample_problem(obj: dict[str, Any]) -> str | None:
    """What is wrong with a sample line's fields (None: each is of its kind)."""
    bad = []
    for name in (*SAMPLE_NUMBERS, *SAMPLE_INTEGERS, "reads_began"):
        v = obj.get(name, _ABSENT)
        if v is _ABSENT:
            if name != "reads_began":
                bad.append(f"{name} missing")
        elif not (type(v) is int or (type(v) is float and name not in SAMPLE_INTEGERS)):
            bad.append(f"{name} is {v!r}, not {'an integer' if name in SAMPLE_INTEGERS else 'a number'}")
    return "; ".join(bad) or None


def summarize_checked(
    pairs: Iterable[tuple[int, dict[str, Any]]],
    summary: HostSummary,
    found: Findings,
    drift: ClockDrift,
    sources: frozenset[str] | None = None,
) -> None:
    """Feed host.jsonl's (seq, obj) to ``summary``; every sample's fields of
    their kinds (invariant 2: the host lines' shape), counted in ``found``;
    the samples' clock drift to ``drift``. Each evidence line names one of
    ``sources`` (the design's evidence sources; None: not known, unchecked)."""
    add, samples = summary.add, 0
    for seq, obj in pairs:
        if obj.get("event") == "sample":
            samples += 1
            drift.add(obj.get("wall"), obj.get("mono"), obj.get("clock_back_max_s"))
            # the common sample, every field a float or an integer as the
            # sampler writes them; anything else is looked at closely
            if not (
                type(obj.get("t")) is float
                and type(obj.get("wall")) is float
                and type(obj.get("mono")) is float
                and type(obj.get("mem_pressure")) is float
                and type(obj.get("load1")) is float
                and type(obj.get("clock_back_max_s")) is float
                and type(obj.get("mem_available")) is int
                and type(obj.get("swap_used")) is int
                and type(obj.get("reads_began", 0.0)) is float
            ):
                problem = sample_problem(obj)
                if problem is not None:
                    found.fail(2, "host.jsonl", seq, f"sample: {problem}")
        elif obj.get("event") in _HOST_NOTES:
            problem = host_line_problem(obj, sources)
            found.check(2)
            if problem is not None:
                found.fail(2, "host.jsonl", seq, problem)
        elif obj.get("event") not in _HOST_OTHER or (obj.get("event") == "open") != (seq == 0):
            # every line is one the monitor writes (host.HostMonitor), the
            # open line first and only there (as in the models' logs)
            found.fail(2, "host.jsonl", seq, f"line of no known event ({obj.get('event')!r}) at line {seq}")
        add(obj)
    found.check(2, samples)


# host.jsonl's lines other than samples that the rule or a reader reads
# (RECORDS.md, HOST.md), each with its fields' kinds
_HOST_NOTES = ("evidence", "sample-failed")
# ... and the lines no rule reads: the open line, a source's note (a file
# replaced or truncated) and a source that could not be read
_HOST_OTHER = ("open", "evidence-note", "evidence-failed", "continuation")


def host_line_problem(obj: dict[str, Any], sources: frozenset[str] | None) -> str | None:
    """What is wrong with an evidence or sample-failed line (None: nothing).
    An evidence line makes every attempt whose window it touches `host`,
    which is a rerun: only a source of the design's `[[host.evidence]]` writes
    one (`HostMonitor._read_sources`), so one naming any other source is forged."""
    event, t = obj.get("event"), obj.get("t")
    if not (type(t) is int or type(t) is float):
        return f"{event} line: t is {t!r}, not a number"
    if event == "sample-failed":
        return (
            None
            if type(obj.get("error")) is str
            else f"sample-failed line: error is {obj.get('error')!r}, not a string"
        )
    source, since = obj.get("source"), obj.get("since", t)
    if type(source) is not str or type(obj.get("line")) is not str or not (type(since) is int or type(since) is float):
        return (
            f"evidence line: source {source!r} and line {obj.get('line')!r} must be strings, since {since!r} a number"
        )
    if sources is not None and source not in sources:
        return (
            f"evidence line from source {source!r}, which is not one of the design's evidence sources "
            f"{sorted(sources)}: it would make the attempts it touches host (a rerun)"
        )
    return None


def read_host(logs: LogPass, rv: RulesView) -> HostRead:
    """host.jsonl read once in this process: the verdicts' view, the samples'
    clock drift and the chain's findings."""
    own, drift = Findings(), ClockDrift()
    outer, logs.f = logs.f, own
    summary = HostSummary(max_gap_s=rv.max_gap_s, pressure_threshold=rv.pressure_threshold)
    try:
        summarize_checked(logs.lines("host.jsonl"), summary, own, drift, rv.evidence_sources)
    finally:
        logs.f = outer
    return summary, drift, _log_part(own, logs, ["host.jsonl"])


def _log_part(own: Findings, logs: LogPass, rels: list[str]) -> tuple[Findings, dict[str, int]]:
    return own, {r: logs.valid_lines[r] for r in rels if r in logs.valid_lines}


def host_spans(path: Path, parts: int) -> list[tuple[int, int | None]]:
    """host.jsonl cut into up to ``parts`` spans of about equal size, each
    starting at a line's first byte: (start, stop) pairs, the last open-ended."""
    cuts = [0]
    try:
        size = os.path.getsize(path)
        with open_regular(path) as fh:
            for i in range(1, parts):
                fh.seek(max(size * i // parts, cuts[-1]))
                window = fh.read(1 << 16)
                j = window.find(b"\n")
                cut = fh.tell() - len(window) + j + 1
                if j < 0 or cut >= size:
                    break
                cuts.append(cut)
    except OSError:
        pass  # one span: the pass over it reports the log missing or unreadable
    return list(zip(cuts, [*cuts[1:], None]))


def _host_span(logs: LogPass, rv: RulesView, start: int, stop: int | None, files: tuple[int, int]) -> HostSpan:
    """One span of host.jsonl, for a worker: its chain check (result, heads
    at anchored counts, where it says it starts), the event and time of its
    first line, and the summary of its chain-valid lines. The summary's
    sample columns are written to ``files``, which the parent opened before
    the fork and reads after it (only the columns' small part is pickled)."""
    summary = HostSummary(max_gap_s=rv.max_gap_s, pressure_threshold=rv.pressure_threshold, files=files)
    reader = ChainReader(
        logs.layout.root / "host.jsonl",
        logs.specs["host.jsonl"].seed,
        heads_at=logs.heads_at("host.jsonl"),
        start=start,
        stop=stop,
        trees=logs.wants_trees("host.jsonl"),
    )
    first_event = first_t = None
    lines, shape, drift = iter(reader), Findings(), ClockDrift()
    for seq, obj in lines:
        first_event, first_t = obj.get("event"), obj.get("t")
        summarize_checked([(seq, obj)], summary, shape, drift, rv.evidence_sources)
        break
    summarize_checked(lines, summary, shape, drift, rv.evidence_sources)
    return (
        reader.result,
        (reader.heads, reader.times, reader.trees),
        reader.first,
        first_event,
        first_t,
        summary,
        drift,
        shape,
    )


def _column_files(n: int) -> list[IO[bytes]] | None:
    """``n`` temporary files with no name (None where they cannot be made:
    host.jsonl is then read in this process)."""
    made: list[IO[bytes]] = []
    try:
        for _ in range(n):
            made.append(tempfile.TemporaryFile())
    except OSError:
        for fh in made:
            fh.close()
        return None
    return made


def join_host_spans(parts: list[HostSpan], logs: LogPass, rv: RulesView) -> HostRead:
    """The spans joined into what one pass over host.jsonl gives: the
    verdicts' view and the chain's findings. When any span or seam is not a
    clean link (a damaged log), that one pass itself, run here: its findings
    then say exactly what and where."""
    heads: dict[int, str] = {}
    times: dict[int, Any] = {}
    trees: list[Range] | None = None  # each span's tree cut at the anchored counts, in line order
    before: ChainCheck | None = None  # the span before's check (from the first span on: clean, not None)
    for k, (result, (span_heads, span_times, span_trees), first, first_event, *_) in enumerate(parts):
        clean = (
            result is not None
            and result.ok
            and (first_event == "open" if k == 0 else before is not None and first == (before.lines, before.head))
        )
        if not clean:
            return read_host(logs, rv)
        heads.update(span_heads)
        times.update(span_times)
        if span_trees is not None:
            trees = (trees or []) + span_trees
        before = result
    own = Findings()
    own.check(11)  # line 0 is an open line chained from the seed
    for *_, shape in parts:  # the samples' fields, in line order
        own.merge(shape)
    own.check(8)  # the chain
    drift = ClockDrift()
    for *_, span_drift, _ in parts:
        drift = drift.then(span_drift)
    spans = [(summary, first_t) for *_, first_t, summary, _, _ in parts]
    parts.clear()  # each span's summary is dropped once joined
    host = HostSummary.join(spans)
    del spans
    if host is None:
        return read_host(logs, rv)
    assert before is not None  # (parts is never empty: HostSummary.join would have raised)
    logs.settle("host.jsonl", heads, before.lines, own, times=times, trees=trees)
    return host, drift, (own, {"host.jsonl": before.lines})
