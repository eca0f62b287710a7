"""One verification of a run directory: the order of the checks.

Owns `verify_run`: the manifests first (the anchors' pass compares their
hashes), host.jsonl (read here, or by span workers and joined: `hostlog`),
resume.jsonl's requests, each model's checks (`model`, `timeline`: here or a
worker per model, each with findings of its own, merged in a fixed order so
that the report does not depend on the workers), then the run-level checks:
conservation of spend (`money`), the run's stops (`timeline`), the one draw
(`draws`), the manifests against the design (`study`), the anchors and the
witness (`logs`). A check that raises on a field of the wrong type it did not
foresee is a violation of its invariant (`guarded`), never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import IO, Any

from confirmatory.core.money import Spend, model_spend
from confirmatory.records.layout import MODEL_LOG_NAMES, RunLayout, load_layout, model_log
from confirmatory.records.reader import iter_objects
from confirmatory.verify.context import RulesView, RunContext
from confirmatory.verify.continuations import check_continuations
from confirmatory.verify.disagreements import cost_disagreements
from confirmatory.verify.draws import check_households, check_shared_draw
from confirmatory.verify.evidence import check_evidence
from confirmatory.verify.files import check_files
from confirmatory.verify.hostlog import (
    _column_files,
    _host_span,
    _log_part,
    host_spans,
    join_host_spans,
    read_host,
)
from confirmatory.verify.logs import LogPass, still_making
from confirmatory.verify.model import ModelCheck
from confirmatory.verify.money import check_totals
from confirmatory.verify.outcome import model_outcome, outcome
from confirmatory.verify.report import (
    CLOSED,
    COMPLETE,
    CRASHED,
    RUNNING,
    UNDER_WAY,
    Findings,
    Report,
)
from confirmatory.verify.state import ModelState
from confirmatory.verify.study import (
    check_design,
    check_slugs,
    design_evidence_sources,
    manifest_arms,
    read_design,
)
from confirmatory.verify.timeline import (
    check_admission,
    check_resumes,
    check_run_stops,
    check_stops,
)
from confirmatory.verify.workers import _collect, _fork, _worker_count


def verify_run(
    run_dir: Path | str,
    witness: Path | str | None = None,
    *,
    workers: int | None = None,
    households: Path | str | None = None,
) -> Report:
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
    files: list[IO[bytes]] = []  # the host-span workers' sample columns: closed (and so gone) whatever happens
    try:
        return _verify_run(Path(run_dir), witness, workers, files, households)
    finally:
        for fh in files:
            fh.close()


def _verify_run(
    root: Path,
    witness: Path | str | None,
    workers: int | None,
    files: list[IO[bytes]],
    households: Path | str | None = None,
) -> Report:
    f = Findings()
    live, stage = run_stage(root)
    if (
        not live
        and not (root / "manifest.json").exists()
        and not any((root / rel).exists() for rel in ("run.jsonl", "anchors.jsonl", "models"))
    ):
        # cut short before its manifest: nothing was started, nothing spent
        return f.report(
            str(root),
            CRASHED,
            {
                "stage": UNDER_WAY,
                "manifest": False,
                "final_anchor": False,
                "last_durable_t": None,
                "under_way": {},
                "torn_tails": [],
                "unanchored_tail": {},
                "explained": [],
            },
        )
    f.stage = stage
    layout = load_layout(root)
    man = layout.manifest.obj if isinstance(layout.manifest.obj, dict) else {}
    f.check(11)
    if layout.manifest.problem is not None:
        f.fail_root(11, "manifest.json", None, f"run manifest: {layout.manifest.problem}")
    making = still_making(stage, root)
    for name in layout.models:  # the manifests first: the anchors' pass below compares their hashes
        f.check(11)
        problem = layout.models[name].problem
        if problem is not None and making and not (root / "models" / name / "manifest.json").exists():
            f.explain(
                11,
                f"models/{name}/manifest.json",
                None,
                "not written yet: the run was cut short while its directory was made",
            )
        elif problem is not None:
            f.fail_root(11, f"models/{name}/manifest.json", None, f"model manifest: {problem}")
    logs = LogPass(layout, f, stage, Path(witness) if witness is not None else None)
    run_events = list(logs.lines("run.jsonl"))
    logs.close_seq = next((s for s, o in run_events if o.get("event") == "close"), None)
    rv = RulesView.from_manifest(man, f)
    design = read_design(root)  # read once: the checks of invariant 11, the evidence sources, the households
    rv = dataclasses.replace(rv, evidence_sources=design_evidence_sources(design))
    names = [n for n in layout.models if layout.models[n].problem is None]
    parallel = _worker_count(layout, names, workers) > 1
    children: list[tuple[BaseProcess, Connection]] = []
    span_children: list[tuple[BaseProcess, Connection]] = []
    try:
        spans = host_spans(root / "host.jsonl", max(2, min(os.cpu_count() or 2, 4))) if parallel else []
        files.extend(_column_files(2 * len(spans)) or [])
        if not files:
            host, drift, host_part = read_host(logs, rv)
        else:
            # host.jsonl is checked and summarized by workers, one per span
            # of the file, and joined here before the models' workers start
            span_children = [
                _fork(_host_span, logs, rv, a, b, (files[2 * k].fileno(), files[2 * k + 1].fileno()))
                for k, (a, b) in enumerate(spans)
            ]
            span_parts = [_collect(c) for c in span_children]
            host, drift, host_part = join_host_spans(span_parts, logs, rv)
            del span_parts
        rest = Findings()  # what is found after host.jsonl, merged after its findings
        logs.f = rest
        requests: dict[tuple[str, float], int] = {}  # (model, t) -> how many requests say so
        for seq, o in logs.lines("resume.jsonl"):
            if o.get("event") == "continuation":
                continue
            if o.get("event") != "resume-request":
                rest.expect(
                    10,
                    seq == 0 and o.get("event") == "open",
                    "resume.jsonl",
                    seq,
                    f"line of no known event ({o.get('event')!r})",
                )
                continue
            ok = type(o.get("model")) is str and o["model"] in layout.models and type(o.get("t")) in (int, float)
            if rest.expect(
                10,
                ok,
                "resume.jsonl",
                seq,
                f"resume request for model {o.get('model')!r} at {o.get('t')!r}: not a model of the run "
                "with a numeric time",
            ):
                requests[(o["model"], o["t"])] = requests.get((o["model"], o["t"]), 0) + 1
        ctx = RunContext(layout, rest, logs, rv, host, manifest_arms(man, rest), run_events, requests)
        ctx.clock_drift = drift
        ctx.design = design
        # while a crashed runner was dead: from the crash's instant to its continuation
        ctx.crash_windows = [
            (o["crash_t"], o["t"])
            for _, o in run_events
            if o.get("event") == "continuation" and _is_num(o.get("crash_t")) and _is_num(o.get("t"))
        ]
        ctx.crash_ts = {w[0] for w in ctx.crash_windows}
        # a runner error's stop (the runner's own failure: a run file it could
        # not write) before a continuation ends at it, as a crash's does: no
        # attempt starts and nothing is decided from the stop to the continuation
        for _, o in run_events:
            if o.get("event") == "stop" and o.get("cause") == "runner-error" and _is_num(o.get("t")):
                after = [w for w in ctx.crash_windows if w[0] >= o["t"]]
                if after:
                    ctx.ended_stops.add((o["cause"], o["t"]))
                    ctx.crash_windows.append((o["t"], min(after)[1]))
        ctx.run_stop_ts = least_first(
            [
                o["t"]
                for _, o in run_events
                if o.get("event") == "stop"
                and isinstance(o.get("t"), (int, float))
                and o.get("cause") != "crash"
                and not (o.get("cause") == "runner-error" and ("runner-error", o["t"]) in ctx.ended_stops)
            ]
        )
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
        f.tallies[name] = st.tally
    guarded(f, 7, "run.jsonl", check_totals, ctx, states, ceilings)
    guarded(f, 9, "run.jsonl", check_run_stops, ctx, states)
    guarded(f, 8, "run.jsonl", check_continuations, ctx)
    guarded(f, 3, "manifest.json", check_shared_draw, ctx)
    guarded(f, 11, "design.toml", check_design, ctx, man)
    guarded(f, 11, "config.json", check_files, ctx, man)
    f.anchors = guarded(f, 12, "anchor-pushes.jsonl", check_evidence, ctx, man) or []
    if households is not None:
        f.households = str(households)
        guarded(f, 11, str(households), check_households, ctx, Path(households))
    guarded(f, 11, "manifest.json", check_slugs, ctx, man)
    guarded(f, 8, "anchors.jsonl", logs.finish, Path(witness) if witness is not None else None)
    if witness is not None and f.witness is None:  # finish failed before it got to the witness
        f.witness, f.witness_problems = str(witness), 1
        f.fail(8, "witness", None, "not checked: the anchors could not be read (see the violations above)")
    try:
        before = man.get("spend_before_nusd") if isinstance(man, dict) else 0
        f.figures = run_figures(run_events, states, before if type(before) is int else 0)
        # a listing, not a check (verify.disagreements)
        f.figures["cost_disagreements"] = cost_disagreements(root, [st.name for st in states])
        f.outcome = outcome(run_events, states, "run.jsonl" in logs.broken)
    except Exception:  # noqa: BLE001 - a description only; the checks above judge the lines
        f.outcome = None
    if stage is None or (stage == CLOSED and not logs.final_missing):
        return f.report(str(root), RUNNING if live else COMPLETE, None)
    crash = {
        "stage": stage,
        "manifest": True,
        "final_anchor": bool(logs.last_anchor and logs.last_anchor[1].get("final") is True),
        "last_durable_t": last_durable_t(root, layout),
        "under_way": {m: sorted(hh) for m, hh in sorted(f.under_way.items())},
        "torn_tails": f.torn_tails,
        "unanchored_tail": dict(sorted(logs.crash_tail.items())),
        "explained": [dataclasses.asdict(v) for v in f.explained],
    }
    return f.report(str(root), RUNNING if live else CRASHED, crash)


def run_figures(
    run_events: list[tuple[int, dict[str, Any]]], states: list[ModelState], spend_before_nusd: int = 0
) -> dict[str, Any]:
    """What the records hold, as the checks counted it (not a check): per
    model its households ended and unfinished, its arm results by class, its
    spend (attempts of ended households and late costs); the close line's
    status and total, the run's stop causes. `confirmatory show` reads the
    same figures more cheaply; its tests compare the two."""
    models = {}
    run = Spend()
    for st in states:
        if "spend" not in st.figures:  # a model whose check failed before its figures
            spent = model_spend((o for _, o in st.control), recorded_nusd=st.attempt_cost, settled=())
            st.figures = {**st.figures, "spend_nusd": spent.total_nusd, "spend": spent.as_dict()}
        run += Spend(*(st.figures["spend"][k] for k in ("recorded_nusd", "late_nusd", "lost_nusd", "in_flight_nusd")))
        models[st.name] = dict(st.figures)  # its share of the money: spend_nusd, and spend by part
    closes = [o for _, o in run_events if o.get("event") == "close"]
    return {
        "models": models,
        "close_status": closes[-1].get("status") if closes else None,
        # what the records hold: spend before the stage + every model's share (with its
        # journaled costs in flight, on a run cut short); the close line's own total beside it
        "spend_total_nusd": spend_before_nusd + run.total_nusd,
        "spend": {**run.as_dict(), "before_nusd": spend_before_nusd},
        "close_spend_total_nusd": closes[-1].get("spend_total_nusd") if closes else None,
        "stop_causes": sorted({str(o.get("cause")) for _, o in run_events if o.get("event") == "stop"}),
    }


def run_stage(root: Path) -> tuple[bool, str | None]:
    """Whether a runner holds the run's lock, and how far the run got:
    UNDER_WAY (no close line in run.jsonl: running, or cut short), CLOSED (a
    close line: complete, unless its final anchor is missing), decided
    before any check reads a log (the checks of a run cut short read
    what it may lack differently)."""
    from confirmatory.records import (
        lock as runlock,  # filelock only: nothing of the runner
    )

    live = runlock.held(root)
    closed = False
    try:
        if stat.S_ISREG(os.lstat(root / "run.jsonl").st_mode):  # never a FIFO's open, which waits for a writer
            closed = any(o.get("event") == "close" for o in iter_objects(root / "run.jsonl"))
    except (OSError, ValueError):
        closed = False
    return live, (UNDER_WAY if live or not closed else CLOSED)


def last_durable_t(root: Path, layout: RunLayout) -> float | None:
    """The latest ``t`` among the last complete lines of the run's logs: the
    instant after which the crash may have lost what was not yet on disk."""
    latest = None
    for spec in layout.logs():
        path = root / spec.relpath
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            with open(path, "rb") as fh:
                size = fh.seek(0, 2)
                fh.seek(max(0, size - (1 << 16)))
                tail = fh.read()
        except OSError:
            continue
        for raw in reversed(tail.split(b"\n")[:-1] if b"\n" in tail else []):
            try:
                obj = json.loads(raw)
                t = obj.get("t", obj.get("end"))  # an attempt line's time is its end
            except (ValueError, AttributeError):
                continue
            if isinstance(t, (int, float)) and t == t:
                latest = t if latest is None else max(latest, t)
            break
    if latest is None:  # no log line yet: the run manifest's own time
        created = layout.manifest.obj.get("created_t") if isinstance(layout.manifest.obj, dict) else None
        latest = created if isinstance(created, (int, float)) else None
    return latest


def _is_num(v: Any) -> bool:
    return type(v) in (int, float) and v == v


def least_first(ts: list[float]) -> list[float]:
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


def _add_log_results(logs: LogPass, valid: dict[str, int]) -> None:
    """What a pass elsewhere (a worker, or with findings of its own) found of
    its logs: their valid lines; their anchors were settled there."""
    logs.valid_lines.update(valid)
    for rel in valid:
        logs.fixed.pop(rel, None)
        logs.wfixed.pop(rel, None)


# What a check raises on a field of the wrong type that it did not foresee.
CHECK_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError, RecursionError)


def guarded(f: Findings, invariant: int, where: str, check: Callable[..., Any], *args: Any) -> Any:
    """``check(*args)``; if it raises on what it read, a violation of
    ``invariant`` instead: a run verify cannot check never passes."""
    try:
        return check(*args)
    except CHECK_ERRORS as exc:
        f.fail(invariant, where, None, f"cannot be checked: {type(exc).__name__}: {exc} (a field of the wrong type?)")
        return None


def _check_one(ctx: RunContext, name: str) -> tuple[Findings, dict[str, int], ModelState]:
    """One model's checks with findings of its own; what the run-level checks need back."""
    own = Findings(stage=ctx.logs.stage)
    ctx.findings = ctx.logs.f = own
    log = model_log(name, "run.jsonl")
    st = guarded(own, 1, log, lambda: ModelCheck(name, ctx).run())
    if st is None:
        st = ModelState(name, {}, [])
    else:
        guarded(own, 4, model_log(name, "admission.jsonl"), check_admission, ctx, st)
        under_way = set(own.under_way.get(name, ()))
        for h, where, line, message in st.cut_short_records:
            if h in under_way:
                own.explain(1, where, line, f"{message}: {h} was under way when the run was cut short")
            else:
                own.fail(1, where, line, message)
        guarded(own, 9, log, check_stops, ctx, st)
        guarded(own, 10, log, check_resumes, ctx, st)
    # (a round a crash cut short is not an end of its own: its household ran again)
    figures = {
        "households_ended": sum(1 for e in st.ends.values() if not e.crash),
        "unfinished": sum(1 for e in st.ends.values() if not e.finished and not e.crash),
        "results_by_class": dict(sorted(st.by_class.items())),
    }
    # the one count of money (core.money.model_spend): show and the page call it too
    spent = model_spend((o for _, o in st.control), recorded_nusd=st.attempt_cost, settled=st.ends.keys())
    figures["spend_nusd"], figures["spend"] = spent.total_nusd, spent.as_dict()
    slim = ModelState(
        st.name,
        {},
        st.control,
        attempt_cost=st.attempt_cost,
        ceiling_known_nusd=st.ceiling_known_nusd,
        ceiling_upper_nusd=st.ceiling_upper_nusd,
        outcome=model_outcome(st),
        tally=st.tallies(),
        figures=figures,
    )
    return (*_log_part(own, ctx.logs, [model_log(name, n) for n in MODEL_LOG_NAMES]), slim)
