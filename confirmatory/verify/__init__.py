"""`confirmatory verify`: re-check a run directory against every invariant of RECORDS.md.

Owns the order of the verification and the run-level checks: conservation of
spend (7) and the manifests against the design (11). Invariant by invariant
the work lives in `logs` (8), `model` (1, 2, 3, 5, 6, 7 per household),
`timeline` (4, 9, 10, the decision halves of 3 and 6); `report` renders.

Independent of the runner by construction: it imports only pure modules
(`rules`, `hostrules`, `streams`, `chain`'s readers) and `records`; never
the Run, its lanes or writers, litellm or psutil. It reads each log as a
stream; what it keeps grows with households, not with lines.
"""

from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import os
import sys
import tempfile
import threading
import tomllib
import traceback
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from confirmatory.chain import ChainReader, open_regular
from confirmatory.design import Design, slug_problem
from confirmatory.design_load import read_households_file, validation_problems
from confirmatory.manifests import RUN_OPTIONAL, differences, model_fields, run_fields
from confirmatory.records import MODEL_LOG_NAMES, HostSummary, load_layout, model_log
from confirmatory.streams import draw_order
from confirmatory.verify.context import RulesView, RunContext
from confirmatory.verify.logs import LogPass
from confirmatory.verify.model import CALL_SLACK_S, ModelCheck, ModelState
from confirmatory.verify.report import INVARIANTS, Findings, Report, Status, Violation
from confirmatory.verify.timeline import check_admission, check_resumes, check_run_stops, check_stops

__all__ = ["verify_run", "verify_command", "Report", "Status", "Violation", "INVARIANTS"]


PARALLEL_MIN_BYTES = 8 << 20
"""Below this much log data a run is checked in this process: worker
processes cost more than they save."""


def verify_run(run_dir: Path | str, witness: Path | str | None = None, *, workers: int | None = None,
               households: Path | str | None = None) -> Report:
    """Check the run directory against every invariant.

    ``workers``: None - worker processes when the run is large, the machine
    has several cores and no other thread runs; 1 - all in this process;
    more - worker processes: first one per span of host.jsonl (checked and
    summarized, then joined), then one per model. Every model's logs and
    records are independent of the others' once the host summary is known:
    each is checked with findings of its own, merged in a fixed order, so
    the report does not depend on ``workers``.

    ``households``: the study's households file; every model's draw is then
    checked to be its households in their seeded order, and the file to
    hash as design.toml pins it (invariant 11).
    """
    files: list = []  # the host-span workers' sample columns: closed (and so gone) whatever happens
    try:
        return _verify_run(Path(run_dir), witness, workers, files, households)
    finally:
        for fh in files:
            fh.close()


def _verify_run(root: Path, witness: Path | str | None, workers: int | None, files: list,
                households: Path | str | None = None) -> Report:
    f = Findings()
    layout = load_layout(root)
    man = layout.manifest.obj if isinstance(layout.manifest.obj, dict) else {}
    f.check(11)
    if layout.manifest.problem is not None:
        f.fail_root(11, "manifest.json", None, f"run manifest: {layout.manifest.problem}")
    for name in layout.models:  # the manifests first: the anchors' pass below compares their hashes
        f.check(11)
        if layout.models[name].problem is not None:
            f.fail_root(11, f"models/{name}/manifest.json", None, f"model manifest: {layout.models[name].problem}")
    logs = LogPass(layout, f)
    run_events = list(logs.lines("run.jsonl"))
    rv = RulesView.from_manifest(man, f)
    design = read_design(root)  # read once: the checks of invariant 11, the evidence sources, the households
    rv = dataclasses.replace(rv, evidence_sources=design_evidence_sources(design))
    names = [n for n in layout.models if layout.models[n].problem is None]
    parallel = _worker_count(layout, names, workers) > 1
    children: list = []
    span_children: list = []
    try:
        spans = host_spans(root / "host.jsonl", max(2, min(os.cpu_count() or 2, 4))) if parallel else []
        files.extend(_column_files(2 * len(spans)) or [])
        if not files:
            host, drift, host_part = read_host(logs, rv)
        else:
            # host.jsonl is checked and summarized by workers, one per span
            # of the file, and joined here before the models' workers start
            span_children = [_fork(_host_span, logs, rv, a, b, (files[2 * k].fileno(), files[2 * k + 1].fileno()))
                             for k, (a, b) in enumerate(spans)]
            span_parts = [_collect(c) for c in span_children]
            host, drift, host_part = join_host_spans(span_parts, logs, rv)
            del span_parts
        rest = Findings()  # what is found after host.jsonl, merged after its findings
        logs.f = rest
        requests: dict = {}  # (model, t) -> how many requests say so
        for seq, o in logs.lines("resume.jsonl"):
            if o.get("event") != "resume-request":
                rest.expect(10, seq == 0 and o.get("event") == "open", "resume.jsonl", seq,
                            f"line of no known event ({o.get('event')!r})")
                continue
            ok = type(o.get("model")) is str and o["model"] in layout.models and type(o.get("t")) in (int, float)
            if rest.expect(10, ok, "resume.jsonl", seq,
                           f"resume request for model {o.get('model')!r} at {o.get('t')!r}: not a model of the run "
                           "with a numeric time"):
                requests[(o["model"], o["t"])] = requests.get((o["model"], o["t"]), 0) + 1
        ctx = RunContext(layout, rest, logs, rv, host, manifest_arms(man, rest), run_events, requests)
        ctx.clock_drift = drift
        ctx.design = design
        ctx.run_stop_ts = least_first([o["t"] for _, o in run_events
                                       if o.get("event") == "stop" and isinstance(o.get("t"), (int, float))])
        ceilings = [o for _, o in run_events if o.get("event") == "ceiling"]
        ctx.ceiling_t = min((o["t"] for o in ceilings if isinstance(o.get("t"), (int, float))), default=float("inf"))
        if not parallel:
            results = [_check_one(ctx, name) for name in names]
        else:
            # one process per model, even beyond the cores: equal models then
            # share the cores evenly instead of the last one running alone
            children.extend(_fork(_check_one, ctx, name) for name in names)
            results = [_collect(c) for c in children]
    finally:
        for proc, _ in children + span_children:
            if proc.is_alive():
                proc.kill()
            proc.join()
    f.merge(host_part[0])
    _add_log_results(logs, host_part[1])
    f.merge(rest)
    ctx.findings = logs.f = f
    f.check(2)
    f.expect(2, host.monotone, "host.jsonl", None, "host times go backwards")
    results_by = dict(zip(names, results))
    states = []
    for name in layout.models:
        if layout.models[name].problem is not None:
            continue
        found, valid, st = results_by[name]
        f.merge(found)
        _add_log_results(logs, valid)
        states.append(st)
    guarded(f, 7, "run.jsonl", check_totals, ctx, states, ceilings)
    guarded(f, 9, "run.jsonl", check_run_stops, ctx, states)
    guarded(f, 3, "manifest.json", check_shared_draw, ctx)
    guarded(f, 11, "design.toml", check_design, ctx, man)
    if households is not None:
        f.households = str(households)
        guarded(f, 11, str(households), check_households, ctx, Path(households))
    guarded(f, 11, "manifest.json", check_slugs, ctx, man)
    guarded(f, 8, "anchors.jsonl", logs.finish, Path(witness) if witness is not None else None)
    if witness is not None and f.witness is None:  # finish failed before it got to the witness
        f.witness, f.witness_problems = str(witness), 1
        f.fail(8, "witness", None, "not checked: the anchors could not be read (see the violations above)")
    try:
        f.outcome = outcome(run_events, states, "run.jsonl" in logs.broken)
    except Exception:  # noqa: BLE001 - a description only; the checks above judge the lines
        f.outcome = None
    return f.report(str(root))


def least_first(ts: list) -> list:
    """What ``min([*own, *ts, *more])`` reads of ``ts``, whatever ``own`` and
    ``more`` (a model's stops and ceilings, the run's ceiling), in at most two
    numbers: each model's halt then does not scan every run stop again. min
    keeps the first item nothing is below: a NaN first is the answer, a NaN
    later is passed over; of equal times the first is kept (3 or 3.0)."""
    if not ts:
        return []
    clean = [t for t in ts if t == t]
    least = [min(clean)] if clean else []
    return least if ts[0] == ts[0] else [ts[0], *least]


def outcome(run_events: list[tuple[int, dict]], states: list[ModelState], run_log_broken: bool = False) -> str:
    """How the run ended, as its chain-valid lines say (a description for the
    reader of the report, not a check): the close line's status, the run's
    stop causes, and per model the households ended of its draw, how many
    unfinished, and its own stop. Where run.jsonl's chain breaks (or the
    run manifest it chains from changed), its lines past the break are not
    read: the close line may be among them, so that is what is said."""
    closes = [o for _, o in run_events if o.get("event") == "close"]
    if not closes and run_log_broken:
        head = ("no close line among run.jsonl's chain-valid lines (its chain breaks, or the manifest it "
                "chains from changed: see START HERE)")
    elif not closes:
        head = "no close line (the runner did not end the run: killed, or still running)"
    else:
        head = str(closes[-1].get("status"))
        causes = sorted({str(o.get("cause")) for _, o in run_events if o.get("event") == "stop"})
        if causes:
            head += f" ({', '.join(causes)})"
    return "; ".join([head, *(st.outcome for st in states if st.outcome)])


def model_outcome(st: ModelState) -> str:
    """One model's part of ``outcome``: households ended of its draw, how many
    unfinished, its own stop, and NO OBSERVATION when none of its ended
    households' arm results (the class of each arm's last attempt) is ok or
    the model's own, as the runner's end summary says it."""
    try:
        draw = st.manifest.get("draw") if isinstance(st.manifest.get("draw"), list) else []
        unfinished = sum(1 for e in st.ends.values() if not e.finished)
        text = f"{st.name}: {len(st.ends)} of {len(draw)} households ended"
        if unfinished:
            text += f" ({unfinished} unfinished)"
        own = [str(o.get("cause")) for _, o in st.events("stop") if o.get("scope") == "model"]
        if own:
            text += f", stopped ({own[0]})"
        if st.results and not st.observed:
            text += f", NO OBSERVATION: none of its {st.results} arm results is ok or the model's own"
        return text
    except Exception:  # noqa: BLE001 - a description only
        return ""


def _add_log_results(logs: LogPass, valid: dict) -> None:
    """What a pass elsewhere (a worker, or with findings of its own) found of
    its logs: their valid lines; their anchors were settled there."""
    logs.valid_lines.update(valid)
    for rel in valid:
        logs.fixed.pop(rel, None)


# The fields of a host sample (RECORDS.md, docs/HOST.md) and their kinds. A
# sample never lacks one; `reads_began` is an extra field, a number when there.
SAMPLE_NUMBERS = ("t", "wall", "mono", "mem_pressure", "load1", "clock_back_max_s")
SAMPLE_INTEGERS = ("mem_available", "swap_used")
_ABSENT = object()


def sample_problem(obj: dict) -> str | None:
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


class ClockDrift:
    """How far the wall clock ran ahead of the monotonic one between two host
    samples, at most: the largest rise, in line order, of a sample's ``wall -
    mono`` over an earlier one's (a forward step, or a suspended machine: the
    attempt deadline's watcher measures on the monotonic clock, the records'
    times are the wall clock's). A value that is not a number is passed over."""

    __slots__ = ("low", "high", "rise", "unseen", "first_mono", "first_back", "last_mono")

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

    def add(self, wall, mono, back=0.0) -> None:
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

    def then(self, later: "ClockDrift") -> "ClockDrift":
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


def summarize_checked(pairs, summary: HostSummary, found: Findings, drift: ClockDrift,
                      sources: frozenset | None = None) -> None:
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
            if not (type(obj.get("t")) is float and type(obj.get("wall")) is float
                    and type(obj.get("mono")) is float and type(obj.get("mem_pressure")) is float
                    and type(obj.get("load1")) is float and type(obj.get("clock_back_max_s")) is float
                    and type(obj.get("mem_available")) is int and type(obj.get("swap_used")) is int
                    and type(obj.get("reads_began", 0.0)) is float):
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
_HOST_OTHER = ("open", "evidence-note", "evidence-failed")


def host_line_problem(obj: dict, sources: frozenset | None) -> str | None:
    """What is wrong with an evidence or sample-failed line (None: nothing).
    An evidence line makes every attempt whose window it touches `host`,
    which is a rerun: only a source of the design's `[[host.evidence]]` writes
    one (`HostMonitor._read_sources`), so one naming any other source is forged."""
    event, t = obj.get("event"), obj.get("t")
    if not (type(t) is int or type(t) is float):
        return f"{event} line: t is {t!r}, not a number"
    if event == "sample-failed":
        return None if type(obj.get("error")) is str else f"sample-failed line: error is {obj.get('error')!r}, not a string"
    source, since = obj.get("source"), obj.get("since", t)
    if type(source) is not str or type(obj.get("line")) is not str or not (type(since) is int or type(since) is float):
        return (f"evidence line: source {source!r} and line {obj.get('line')!r} must be strings, since "
                f"{since!r} a number")
    if sources is not None and source not in sources:
        return (f"evidence line from source {source!r}, which is not one of the design's evidence sources "
                f"{sorted(sources)}: it would make the attempts it touches host (a rerun)")
    return None


def read_design(root: Path) -> tuple[bytes, dict] | Exception:
    """design.toml's bytes and table, or why they cannot be read."""
    try:
        with open_regular(root / "design.toml") as fh:
            raw = fh.read()
        return raw, tomllib.loads(raw.decode())
    except (OSError, ValueError) as exc:
        return exc


def design_evidence_sources(design: tuple[bytes, dict] | Exception) -> frozenset | None:
    """The names of design.toml's `[[host.evidence]]` entries, or None where
    design.toml cannot be read as a design's tables (invariant 11 says so)."""
    if isinstance(design, Exception):
        return None
    data = design[1]
    host = data.get("host", {})
    entries = host.get("evidence", []) if isinstance(host, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return None
    return frozenset(e.get("name") for e in entries if type(e.get("name")) is str)


def read_host(logs: LogPass, rv: RulesView) -> tuple[HostSummary, ClockDrift, tuple[Findings, dict]]:
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


def _log_part(own: Findings, logs: LogPass, rels: list[str]) -> tuple[Findings, dict]:
    return own, {r: logs.valid_lines[r] for r in rels if r in logs.valid_lines}


# What a check raises on a field of the wrong type that it did not foresee.
CHECK_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError, RecursionError)


def guarded(f: Findings, invariant: int, where: str, check, *args):
    """``check(*args)``; if it raises on what it read, a violation of
    ``invariant`` instead: a run verify cannot check never passes."""
    try:
        return check(*args)
    except CHECK_ERRORS as exc:
        f.fail(invariant, where, None, f"cannot be checked: {type(exc).__name__}: {exc} (a field of the wrong type?)")
        return None


def _check_one(ctx: RunContext, name: str) -> tuple[Findings, dict, ModelState]:
    """One model's checks with findings of its own; what the run-level checks need back."""
    own = Findings()
    ctx.findings = ctx.logs.f = own
    log = model_log(name, "run.jsonl")
    st = guarded(own, 1, log, lambda: ModelCheck(name, ctx).run())
    if st is None:
        st = ModelState(name, {}, [])
    else:
        guarded(own, 4, model_log(name, "admission.jsonl"), check_admission, ctx, st)
        guarded(own, 9, log, check_stops, ctx, st)
        guarded(own, 10, log, check_resumes, ctx, st)
    slim = ModelState(st.name, {}, st.control, attempt_cost=st.attempt_cost,
                      ceiling_known_nusd=st.ceiling_known_nusd,
                      ceiling_upper_nusd=st.ceiling_upper_nusd, outcome=model_outcome(st))
    return (*_log_part(own, ctx.logs, [model_log(name, n) for n in MODEL_LOG_NAMES]), slim)


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


def _host_span(logs: LogPass, rv: RulesView, start: int, stop: int | None, files: tuple[int, int]) -> tuple:
    """One span of host.jsonl, for a worker: its chain check (result, heads
    at anchored counts, where it says it starts), the event and time of its
    first line, and the summary of its chain-valid lines. The summary's
    sample columns are written to ``files``, which the parent opened before
    the fork and reads after it (only the columns' small part is pickled)."""
    summary = HostSummary(max_gap_s=rv.max_gap_s, pressure_threshold=rv.pressure_threshold, files=files)
    reader = ChainReader(logs.layout.root / "host.jsonl", logs.specs["host.jsonl"].seed,
                         heads_at=logs.heads_at("host.jsonl"), start=start, stop=stop)
    first_event = first_t = None
    lines, shape, drift = iter(reader), Findings(), ClockDrift()
    for seq, obj in lines:
        first_event, first_t = obj.get("event"), obj.get("t")
        summarize_checked([(seq, obj)], summary, shape, drift, rv.evidence_sources)
        break
    summarize_checked(lines, summary, shape, drift, rv.evidence_sources)
    return reader.result, (reader.heads, reader.times), reader.first, first_event, first_t, summary, drift, shape


def _column_files(n: int) -> list | None:
    """``n`` temporary files with no name (None where they cannot be made:
    host.jsonl is then read in this process)."""
    made = []
    try:
        for _ in range(n):
            made.append(tempfile.TemporaryFile())
    except OSError:
        for fh in made:
            fh.close()
        return None
    return made


def join_host_spans(parts: list, logs: LogPass, rv: RulesView):
    """The spans joined into what one pass over host.jsonl gives: the
    verdicts' view and the chain's findings. When any span or seam is not a
    clean link (a damaged log), that one pass itself, run here: its findings
    then say exactly what and where."""
    heads: dict[int, str] = {}
    times: dict = {}
    before = None
    for k, (result, (span_heads, span_times), first, first_event, *_) in enumerate(parts):
        clean = result is not None and result.ok and (
            first_event == "open" if k == 0 else first == (before.lines, before.head))
        if not clean:
            return read_host(logs, rv)
        heads.update(span_heads)
        times.update(span_times)
        before = result
    own = Findings()
    own.check(11)  # line 0 is an open line chained from the seed
    for *_, shape in parts:  # the samples' fields, in line order
        own.merge(shape)
    own.check(8)   # the chain
    drift = ClockDrift()
    for *_, span_drift, _ in parts:
        drift = drift.then(span_drift)
    spans = [(summary, first_t) for *_, first_t, summary, _, _ in parts]
    parts.clear()  # each span's summary is dropped once joined
    host = HostSummary.join(spans)
    del spans
    if host is None:
        return read_host(logs, rv)
    logs.settle("host.jsonl", heads, before.lines, own, times=times)
    return host, drift, (own, {"host.jsonl": before.lines})


def _fork(fn, *args):
    """Run ``fn(*args)`` in a forked child (it inherits the arguments as they
    are; only its result is pickled back). Returns (process, pipe end)."""
    mp = multiprocessing.get_context("fork")
    recv, send = mp.Pipe(duplex=False)
    proc = mp.Process(target=_child, args=(send, fn, args), daemon=True)
    proc.start()
    send.close()
    return proc, recv


def _child(send, fn, args) -> None:
    try:
        result = ("ok", fn(*args))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        result = ("error", traceback.format_exc())
    send.send(result)
    send.close()


def _collect(child):
    proc, recv = child
    try:
        kind, value = recv.recv()
    except EOFError:
        raise RuntimeError(f"verify worker {proc.pid} died (exit code {proc.exitcode})") from None
    finally:
        recv.close()
    proc.join()
    if kind != "ok":
        raise RuntimeError(f"verify worker failed:\n{value}")
    return value


def _worker_count(layout, names: list[str], workers: int | None) -> int:
    if len(names) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    if workers is not None:
        return max(1, min(workers, len(names)))
    if (os.cpu_count() or 1) < 2 or threading.active_count() > 1:
        return 1  # forking a process with other threads running is not safe
    size = 0
    for rel in ["host.jsonl", *(model_log(n, m) for n in names for m in MODEL_LOG_NAMES)]:
        try:
            size += os.path.getsize(layout.root / rel)
        except OSError:
            pass
    return len(names) if size >= PARALLEL_MIN_BYTES else 1


RUN_STATUSES = ("completed", "stopped", "ceiling")  # run.jsonl close.status (run.RunResult)


def check_totals(ctx: RunContext, states: list[ModelState], ceilings: list[dict]) -> None:
    """Invariant 7: every nano-dollar counted once, in its model and in the run."""
    f, man = ctx.findings, ctx.layout.manifest.obj or {}
    total = int(man.get("spend_before_nusd") or 0)
    key = lambda o: (o.get("t"), o.get("total_nusd"), o.get("ceiling_nusd"))  # noqa: E731
    want = None  # run.jsonl's ceilings in order: sorted once, where the first model's are
    # the spend counted before the ceiling event's t: the calls that ended
    # before it (less the slack: ModelCheck._money_times) and the late costs
    # logged before it (a late cost's t is read after it is counted)
    # At most counted by then: the calls that ended by the slack after it,
    # and every late cost (a late cost's line may follow a crossing it
    # preceded); the event's total is what had been counted at the crossing.
    known, upper, ceiling_t = total, total, ctx.ceiling_t
    for st in states:
        log = model_log(st.name, "run.jsonl")
        late = 0
        known += st.ceiling_known_nusd
        upper += st.ceiling_upper_nusd
        for seq, o in st.events("late-cost"):
            if f.expect(7, type(o.get("cost_nusd")) is int, log, seq, f"late cost {o.get('cost_nusd')!r} is not an integer"):
                late += o["cost_nusd"]
                upper += o["cost_nusd"]
                t = o.get("t")
                if (type(t) is float or type(t) is int) and t < ceiling_t:
                    known += o["cost_nusd"]
        closes = st.events("close")
        share = st.attempt_cost + late
        total += share
        if f.expect(7, len(closes) == 1, log, None, f"{len(closes)} close lines"):
            seq, close = closes[0]
            f.expect(7, type(close.get("spend_nusd")) is int and close.get("spend_nusd") == share, log, seq,
                     f"close spend {close.get('spend_nusd')} is not attempts + late costs {share}")
        mine = sorted(key(o) for _, o in st.events("ceiling"))
        if want is None:
            want = sorted(key(o) for o in ceilings)
        f.expect(7, mine == want, log, None, "ceiling events differ from run.jsonl's")
    closes = [(s, o) for s, o in ctx.run_events if o.get("event") == "close"]
    if f.expect(7, len(closes) == 1, "run.jsonl", None, f"{len(closes)} close lines"):
        seq, close = closes[0]
        f.expect(7, type(close.get("spend_total_nusd")) is int and type(close.get("t")) in (int, float)
                 and close.get("status") in RUN_STATUSES, "run.jsonl", seq,
                 f"close line: spend_total_nusd {close.get('spend_total_nusd')!r} (an integer), "
                 f"t {close.get('t')!r} (a number), status {close.get('status')!r} (one of {list(RUN_STATUSES)})")
        f.expect(7, close.get("spend_total_nusd") == total, "run.jsonl", seq,
                 f"spend_total {close.get('spend_total_nusd')} is not the sum {total}")
        # The status says how the run ended (Run._finish): ceiling when the
        # spend crossed it, else stopped when the run or a model stopped (or
        # a write failed: stopped with no stop line is taken), else completed.
        stopped = any(o.get("event") == "stop" for _, o in ctx.run_events) or any(
            st.events("stop") or st.events("trigger") for st in states)
        status = close.get("status")
        if status in RUN_STATUSES:
            want = ("ceiling",) if ceilings else ("stopped",) if stopped else ("completed", "stopped")
            if status not in want:
                why = ("the spend crossed the ceiling" if ceilings else "a stop of the run or a model" if stopped
                       else "nothing stopped the run")
                f.fail(7, "run.jsonl", seq, f"close status {status!r}; {why}: {' or '.join(want)}")
        crossed = isinstance(close.get("spend_total_nusd"), int) and close["spend_total_nusd"] > (man.get("ceiling_nusd") or 0)
        f.expect(7, not crossed or bool(ceilings), "run.jsonl", seq, "the total exceeds the ceiling without a ceiling event")
    for c in ceilings:
        f.expect(7, type(c.get("total_nusd")) is int and type(c.get("ceiling_nusd")) is int
                 and c.get("ceiling_nusd") == man.get("ceiling_nusd") and c["total_nusd"] > c["ceiling_nusd"],
                 "run.jsonl", None, f"ceiling event total {c.get('total_nusd')} does not exceed {c.get('ceiling_nusd')}")
    # Invariant 6: the crossing is the first count that takes the total above
    # the ceiling (spend.Spend.add: `>`), so what was counted before the
    # event's t cannot exceed it; else the spend crossed earlier than its event.
    ceiling_nusd = man.get("ceiling_nusd")
    if ceilings and type(ceiling_nusd) is int:
        f.check(6)
        if known > ceiling_nusd:
            f.fail(6, "run.jsonl", None, f"{known} nano-dollars were counted before the ceiling event's t "
                   f"({ceiling_t}), over the ceiling {ceiling_nusd}: the spend crossed it earlier")
        # ... nor earlier than it says: what it says had been counted at its
        # t was (a stop under the ceiling's pretext fails here)
        first = min((c for c in ceilings if c.get("t") == ceiling_t), key=lambda c: repr(c.get("total_nusd")),
                    default=None)
        said = first.get("total_nusd") if first is not None else None
        if type(said) is int:
            f.check(6)
            if said > upper:
                f.fail(6, "run.jsonl", None, f"the ceiling event at {ceiling_t} says {said} nano-dollars had been "
                       f"counted; the calls that ended by then ({CALL_SLACK_S:g} s of slack) and every late cost "
                       f"come to {upper}: the spend had not crossed the ceiling then")


def manifest_arms(man: dict, f: Findings) -> list:
    """The run manifest's arms (optional: the model manifests' arm orders
    name them too); anything but a list of names fails invariant 11."""
    arms = man.get("arms", [])
    f.check(11)
    if not (isinstance(arms, list) and all(type(a) is str for a in arms)):
        f.fail(11, "manifest.json", None, f"arms is {arms!r}, not a list of names")
        return []
    return arms


def check_slugs(ctx: RunContext, man: dict) -> None:
    """Invariant 11: the models', arms' and households' names are slugs
    (RECORDS.md "Layout": each names a folder; ``..`` or a ``/`` would walk
    the tree). Each name is reported once, in the first manifest naming it."""
    f, seen = ctx.findings, set()

    def check(names: Any, where: str, what: str) -> None:
        for name in names if isinstance(names, list) else ():
            key = name if type(name) is str else repr(name)
            if key in seen:
                continue
            seen.add(key)
            problem = slug_problem(name) if type(name) is str else f"must be a string (got {name!r})"
            if problem is not None:
                f.fail(11, where, None, f"{what} name {problem}")

    f.check(11)
    check(man.get("models"), "manifest.json", "model")
    check(man.get("arms"), "manifest.json", "arm")
    for name, mf in ctx.layout.models.items():
        if isinstance(mf.obj, dict):
            check(mf.obj.get("draw"), f"models/{name}/manifest.json", "household")


def design_data(ctx: RunContext, report: bool = True) -> tuple[bytes, dict] | None:
    """design.toml's bytes and table, or None (reported, unless not ``report``: invariant 11)."""
    design = ctx.design if ctx.design is not None else read_design(ctx.layout.root)
    if isinstance(design, Exception):
        if report:
            ctx.findings.fail(11, "design.toml", None, f"unreadable: {design}")
        return None
    return design


def check_households(ctx: RunContext, path: Path) -> None:
    """Invariant 11, with the study's households file (``--households``): it
    hashes as design.toml pins it, reads as the runner reads one, and every
    model's draw is its households, sorted by id and shuffled by the model's
    seed (DESIGN.md "Draws"). Without the file a run's records cannot say
    which households the study had: a draw that left some out, in every
    model alike, is a seeded shuffle of its own households and passes the
    other checks."""
    f = ctx.findings
    before = f.count[11]
    try:
        read = design_data(ctx, report=False)  # (check_design reports it)
        table = read[1].get("households") if read is not None else None
        pin = table.get("sha256") if isinstance(table, dict) else None
        f.check(11)
        found, problems = read_households_file(path, pin if isinstance(pin, str) else None)
        if not isinstance(pin, str):
            problems.insert(0, "design.toml pins no households file (households.sha256)")
        for problem in problems:
            f.fail(11, str(path), None, problem)
        if not found:
            return
        ids = [h.id for h in found]
        f.households_count = len(ids)
        for name, mf in ctx.layout.models.items():
            if mf.problem is not None or not isinstance(mf.obj, dict):
                continue  # reported with the manifests
            seed, draw = mf.obj.get("seed"), mf.obj.get("draw")
            if type(seed) is not int:
                continue  # reported with the draw's own check (invariant 3)
            f.check(11)
            want = draw_order(seed, ids)
            if draw != want:
                try:
                    missing, extra = len(set(ids) - set(draw)), len(set(draw) - set(ids))
                    how = f"{missing} of its households missing, {extra} not in it" if missing or extra else \
                        "its households in another order"
                except TypeError:
                    how = "not a list of household ids"
                f.fail(11, f"models/{name}/manifest.json", None,
                       f"draw is not the seeded shuffle of {path}'s {len(ids)} households ({how})")
    finally:
        f.households_problems = f.count[11] - before


def check_design(ctx: RunContext, man: dict) -> None:
    """Invariant 11: the manifests say what design.toml says: every field the
    design fixes (``manifests.run_fields`` / ``model_fields``, the mapping the
    runner wrote them with), the pins and the models' folders."""
    f, layout = ctx.findings, ctx.layout
    read = design_data(ctx)
    if read is None:
        return
    raw, data = read
    f.expect(11, man.get("design_sha256") == hashlib.sha256(raw).hexdigest(), "manifest.json", None,
             "design_sha256 is not design.toml's")
    harness = data.get("harness") if isinstance(data.get("harness"), dict) else {}
    f.expect(11, (man.get("harness") or {}).get("pins") == harness.get("pins"), "manifest.json", None,
             "harness pins differ from the design's")
    models = data.get("models") if isinstance(data.get("models"), list) else []
    names = [m.get("name") if isinstance(m, dict) else None for m in models]
    f.expect(11, man.get("models") == names and list(layout.models) == names, "manifest.json", None,
             f"models {man.get('models')} / folders {list(layout.models)} are not the design's {names}")
    try:
        design = Design.model_validate(data)
    except ValidationError as exc:
        f.fail(11, "design.toml", None, "not a valid design: " + "; ".join(validation_problems(exc)))
        return
    f.check(11)
    expected = run_fields(design)
    # The class lists are the runner's, not the design's (a later version
    # may list more names): the rules check reads them from the manifest.
    del expected["rules"]["class_lists"]
    for problem in differences(expected, man, optional=RUN_OPTIONAL):
        f.fail(11, "manifest.json", None, problem)
    for spec in design.models:
        mf = layout.models.get(spec.name)
        if mf is None or not isinstance(mf.obj, dict):
            continue  # reported with the folders above, or as an unreadable manifest
        f.check(11)
        for problem in differences(model_fields(design, spec), mf.obj):
            f.fail(11, f"models/{spec.name}/manifest.json", None, problem)


def check_shared_draw(ctx: RunContext) -> None:
    """Invariant 3: every model has the one draw (DESIGN.md "Draws": the
    households file, sorted and shuffled by the study's seed; every model
    shares it). Each draw is checked against its own seed elsewhere; a model
    whose draw leaves out households the others had (or adds some) saw
    another study, and fails here."""
    f, layout = ctx.findings, ctx.layout
    draws = [(name, mf.obj.get("draw")) for name, mf in layout.models.items()
             if mf.problem is None and isinstance(mf.obj, dict) and isinstance(mf.obj.get("draw"), list)]
    if not draws:
        return
    first, want = draws[0]
    for name, draw in draws[1:]:
        f.check(3)
        if draw != want:
            try:
                missing, extra = len(set(want) - set(draw)), len(set(draw) - set(want))
                how = f"{missing} of {first}'s households missing, {extra} not in it" if missing or extra else \
                    "the same households in another order"
            except TypeError:  # unhashable entries (reported with the draw's own check)
                how = "not a list of household ids"
            f.fail(3, f"models/{name}/manifest.json", None, f"draw is not {first}'s ({how}): every model "
                   "shares the one draw")


def verify_command(run_dir: Path, as_json: bool = False, witness: Path | None = None,
                   households: Path | None = None) -> int:
    """``confirmatory verify``: the report on stdout; 0 only when every invariant holds.

    A directory with none of a run's files (manifest.json, run.jsonl,
    anchors.jsonl) is not a run: one line on stderr, exit 1. A run whose
    runner still holds its lock (``runlock.held``) is still being written:
    the report is printed between two notices saying it is provisional (with
    --json, on stderr and as ``"provisional": true``), and the exit is 1
    whatever it found."""
    import json

    from confirmatory import runlock  # filelock only: nothing of the runner

    root = Path(run_dir)
    if not any((root / rel).exists() for rel in ("manifest.json", "run.jsonl", "anchors.jsonl")):
        print(f"verify: {root} is not a run directory (it has no manifest.json, run.jsonl or anchors.jsonl)",
              file=sys.stderr)
        return 1
    # Asked before reading: a runner that ends while we read was still writing what we read.
    live = runlock.held(root)
    notice = (f"*** THE RUN IS STILL RUNNING (a runner holds {runlock.lock_path(root)}): this report is "
              "provisional; its logs are still being written. Verify again after the run has ended. ***")
    if live:
        print(notice, file=sys.stderr if as_json else sys.stdout)
    report = verify_run(run_dir, witness=witness, households=households)
    if as_json:
        text = report.to_json()
        if live:
            text = json.dumps({**json.loads(text), "provisional": True}, indent=2, sort_keys=True)
        sys.stdout.write(text + "\n")
    else:
        sys.stdout.write(report.to_table() + "\n")
    if live:
        print(notice, file=sys.stderr if as_json else sys.stdout)
        return 1
    return 0 if report.ok else 1
