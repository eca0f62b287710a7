"""Carrying a crashed run on (``confirmatory continue``): where its records stood.

A runner killed by SIGKILL, the OOM killer, a reboot or a power cut leaves
every acknowledged line on disk and nothing after it. ``read_position``
reads back, from the records alone, what the Run needs to carry on as if
it had not died: per model the admission state (refusals, the spend of the
households that ended, none under way once the crash has cut them short),
the stop and pause state, each lane's next draw index, the households the
crash cut short and their records, the inconclusive signatures, and the
spend (every attempt line, late cost, and the journaled cost of each attempt
the crash left without a record). ``Run`` (continuation mode) then writes
the crash's lines (``crash_lines``) and starts its threads from there.

The readings (a household the crash cut short is under way until the crash's
stop at the last durable instant, then its spend counts as finished, and it
runs again whole at its next round; what is kept, moved and written) are in
docs/RUN.md, "Continuing a crashed run"; verify checks each of them.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confirmatory.core import rules
from confirmatory.records import killpoint
from confirmatory.records.chain import log_seed, sha256_hex
from confirmatory.records.layout import load_layout
from confirmatory.records.reader import iter_lines
from confirmatory.records.writer import ChainWriter

CRASH = "crash"  # the stop cause of a crash, as a continuation writes it
ENDED_BY_CONTINUATION = (CRASH, "runner-error")  # run-scope stops a continuation carries the run on from


def household_key(obj: dict[str, Any]) -> tuple[str, int]:
    """(household, round) of a line that names one."""
    r = obj.get("round", 0)
    return str(obj.get("household")), r if type(r) is int else 0


@dataclass
class Replaced:
    """One record of a household the crash cut short, as the continuation classifies it."""

    record: dict[str, Any]
    rel: str
    sha256: str
    reruns_used: int
    cls: str = ""
    action: str = ""
    signature: str | None = None
    stop_cause: str | None = None
    lined: bool = False  # its attempt line was written before the crash (its household line was not)


@dataclass
class CutShort:
    """A household under way at the crash: its lane, round and records."""

    household: str
    lane: int
    round_index: int
    records: list[Replaced] = field(default_factory=list)


@dataclass
class ModelPosition:
    name: str
    refused: bool = False
    finished_nusd: int = 0
    spend_nusd: int = 0  # attempts, late costs and lost costs so far (the model's share of the total)
    lost_nusd: int = 0  # this crash's: journaled costs of attempts that left no record
    lost_keys: list[str] = field(default_factory=list)
    decided: int = 0
    households_done: int = 0
    attempts: int = 0
    reruns: int = 0
    stopped: bool = False
    stop_cause: str | None = None
    paused: bool = False
    pause_t: float | None = None
    lane_ended: dict[int, str] = field(default_factory=dict)
    lane_start: dict[int, int] = field(default_factory=dict)
    lane_done: dict[int, str] = field(default_factory=dict)
    rounds: dict[str, int] = field(default_factory=dict)
    cut: list[CutShort] = field(default_factory=list)
    inconclusive: dict[str, set[str]] = field(default_factory=dict)
    resumes_seen: int = 0
    closed: bool = False  # its close line is on disk
    run_stops: list[dict[str, Any]] = field(default_factory=list)  # its log's run-scope stops
    triggered: set[tuple[Any, ...]] = field(default_factory=set)
    paused_keys: set[tuple[Any, ...]] = field(default_factory=set)


@dataclass
class Position:
    """Where a crashed run's records stood (``read_position``)."""

    continuation: int  # this continuation's number: 1 for the first
    crash_t: float  # just above the last durable instant
    run_stopped: str | None
    crossed_t: float | None
    spend_total_nusd: int
    models: dict[str, ModelPosition]
    logs: dict[str, dict[str, Any]]  # every log's lines and head at the crash
    last_anchor: dict[str, Any] | None
    host_lines: int
    run_stops: list[dict[str, Any]] = field(default_factory=list)  # run.jsonl's run-scope stops


def _times(obj: dict[str, Any]) -> list[float]:
    out = []
    for key in ("t", "start", "end"):
        v: Any = obj.get(key)
        if type(v) in (int, float) and math.isfinite(v):
            out.append(float(v))
    return out


def read_position(
    run_dir: Path, *, precedence: Any, class_lists: Any, max_reruns: int, inconclusive_limit: int, host_summary: Any
) -> Position:
    """Read a crashed run's records (every torn tail already moved aside)."""
    run_dir = Path(run_dir)
    layout = load_layout(run_dir)
    man = layout.manifest.obj
    latest = float(man.get("created_t") or 0.0)
    logs: dict[str, dict[str, Any]] = {}
    objects: dict[str, list[dict[str, Any]]] = {}
    for spec in layout.logs():
        path = run_dir / spec.relpath
        lines, head, objs = 0, spec.seed, []
        if path.exists():
            for line in iter_lines(path):
                lines, head = line.seq + 1, line.hash
                objs.append(line.obj)
                for t in _times(line.obj):
                    latest = max(latest, t)
        logs[spec.relpath] = {"lines": lines, "head": head}
        objects[spec.relpath] = objs
    continuation = 1 + sum(1 for o in objects["run.jsonl"] if o.get("event") == "continuation")
    # A crash's stop, and a runner error's (the runner's own failure: a run
    # file it could not write, its own bug), end at the continuation: they are
    # the runner's, not the study's. Any other stop of the run stands.
    run_stops = [o for o in objects["run.jsonl"] if o.get("event") == "stop"]
    run_stop = next((o.get("cause") for o in run_stops if o.get("cause") not in ENDED_BY_CONTINUATION), None)
    ceilings = [o for o in objects["run.jsonl"] if o.get("event") == "ceiling"]
    crossed_t = min((o["t"] for o in ceilings), default=None)
    anchors = [o for o in objects["anchors.jsonl"] if o.get("event") == "anchor"]
    last_anchor = None
    if anchors:
        a = anchors[-1]
        last_anchor = {"seq": a.get("seq"), "t": a.get("t"), "final": a.get("final") is True}
    models: dict[str, ModelPosition] = {}
    replaced_all: list[tuple[ModelPosition, CutShort]] = []
    for name, mf in layout.models.items():
        mobj = mf.obj
        pos = ModelPosition(name)
        run_log = objects[f"models/{name}/run.jsonl"]
        # (Any: the name d of a decision line is rules.decide's Decision further on)
        decisions: list[Any] = [o for o in objects[f"models/{name}/admission.jsonl"] if o.get("event") == "decision"]
        ended: dict[tuple[str, int], dict[str, Any]] = {}
        lined: set[tuple[Any, ...]] = set()
        journal: dict[tuple[Any, ...], int] = {}
        for o in run_log:
            ev = o.get("event")
            if ev == "household":
                ended[household_key(o)] = o
                pos.households_done += 1
                if o.get("finished") is True or o.get("cut_by") == CRASH:
                    pos.finished_nusd += int(o.get("spend_nusd") or 0)
            elif ev == "attempt":
                h, r = household_key(o)
                lined.add((h, r, o.get("arm"), o.get("pass")))
                pos.spend_nusd += int(o.get("cost_nusd") or 0)
                pos.attempts += 1
                pos.reruns += (o.get("pass") or 0) > 0
                if o.get("class") == "inconclusive" and o.get("signature") is not None:
                    pos.inconclusive.setdefault(o["signature"], set()).add(h)
            elif ev == "late-cost":
                pos.spend_nusd += int(o.get("cost_nusd") or 0)
                h, r = household_key(o)
                lined.add((h, r, o.get("arm"), o.get("pass")))  # a lost record's cost: counted as late
            elif ev == "call-cost":
                h, r = household_key(o)
                key = (h, r, o.get("arm"), o.get("pass"))
                journal[key] = journal.get(key, 0) + int(o.get("cost_nusd") or 0)
            elif ev == "continuation":
                # lost with the households that crash cut short: finished spend
                pos.spend_nusd += int(o.get("lost_nusd") or 0)
                pos.finished_nusd += int(o.get("lost_nusd") or 0)
                # what was journaled before an earlier continuation is its (lost, or lined since)
                journal.clear()
            elif ev == "stop" and o.get("scope") == "run":
                pos.run_stops.append(o)
            elif ev == "stop" and o.get("scope") == "model" and not pos.stopped:
                pos.stopped, pos.stop_cause = True, o.get("cause")
            elif ev == "pause":
                pos.paused, pos.pause_t = True, o.get("t")
                h, r = household_key(o)
                pos.paused_keys.add((h, r, o.get("arm"), o.get("pass")))
            elif ev == "resume":
                pos.resumes_seen += 1
                if o.get("accepted") is True:
                    pos.paused, pos.pause_t = False, None
            elif ev == "trigger":
                h, r = household_key(o)
                pos.triggered.add((h, r, o.get("arm"), o.get("pass")))
            elif ev == "lane-end":
                pos.lane_ended[int(o["lane"])] = str(o.get("reason"))
            elif ev == "close":
                pos.closed = True
        pos.decided = len(decisions)
        pos.refused = any(d.get("admit") is False for d in decisions)
        lanes = int(mobj.get("lanes") or 1)
        draw = list(mobj.get("draw") or [])
        index = {h: k for k, h in enumerate(draw)}
        seen_rounds: dict[str, int] = {}
        last_on_lane: dict[int, tuple[dict[str, Any], int]] = {}
        for d in decisions:
            h = str(d.get("household"))
            r = seen_rounds.get(h, -1) + 1
            seen_rounds[h] = r
            last_on_lane[int(d["lane"])] = (d, r)
        for lane in range(lanes):
            if lane in pos.lane_ended:
                continue
            if lane not in last_on_lane:
                pos.lane_start[lane] = lane
                continue
            d, r = last_on_lane[lane]
            h = str(d["household"])
            k = index.get(h, len(draw))
            if d.get("admit") is not True:
                pos.lane_done[lane] = "refused"
            elif (h, r) in ended and ended[(h, r)].get("cut_by") == CRASH:
                # cut short by an earlier continuation that died before this
                # lane decided again: the household still runs again whole
                pos.rounds[h] = r + 1
                pos.lane_start[lane] = k
            elif (h, r) in ended:
                pos.lane_start[lane] = k + lanes
            else:
                cut = CutShort(h, lane, r)
                pos.cut.append(cut)
                pos.rounds[h] = r + 1
                pos.lane_start[lane] = k  # the household runs again whole
                replaced_all.append((pos, cut))
        # The journaled cost of every attempt the crash left without a record.
        on_disk = set()
        for cut in pos.cut:
            for rel_path in sorted((run_dir / "models" / name / "records" / cut.household).glob("*/*.json")):
                if rel_path.name.startswith("."):
                    continue
                rel = rel_path.relative_to(run_dir / "models" / name).as_posix()
                data = rel_path.read_bytes()
                record = iter_record(data)
                if record is None or record.get("round", 0) != cut.round_index:
                    continue
                key = (cut.household, cut.round_index, record.get("arm"), record.get("pass"))
                on_disk.add(key)
                cut.records.append(Replaced(record, rel, sha256_hex(data), 0, lined=key in lined))
            cut.records.sort(key=lambda x: (x.record.get("start"), x.record.get("pass")))
            used: dict[str, int] = {}
            for x in cut.records:
                arm = str(x.record.get("arm"))
                x.reruns_used = used.get(arm, -1) + 1
                used[arm] = x.reruns_used
                for t in _times(x.record):
                    latest = max(latest, t)
        for key, nusd in sorted(journal.items(), key=lambda kv: str(kv[0])):
            if key not in lined and key not in on_disk:
                pos.lost_nusd += nusd
                pos.lost_keys.append(f"{key[0]}/{key[2]}/{key[3]}" + (f" (round {key[1]})" if key[1] else ""))
        models[name] = pos
    crash_t = math.nextafter(latest, math.inf)
    host_lines = logs["host.jsonl"]["lines"]
    for pos, cut in replaced_all:
        for x in cut.records:
            if x.lined:
                continue  # classified, counted and lined before the crash
            verdict = host_summary.verdict(x.record["start"], x.record["end"], limit=host_lines)
            d = rules.decide(
                x.record,
                tuple(verdict.reasons),
                reruns_used=x.reruns_used,
                max_reruns=max_reruns,
                precedence=precedence,
                class_lists=class_lists,
                inconclusive_households={s: set(v) for s, v in pos.inconclusive.items()},
                inconclusive_limit=inconclusive_limit,
            )
            x.cls, x.action, x.signature, x.stop_cause = str(d.cls), str(d.action), d.signature, d.stop_cause
            if (
                rules.classify(x.record, tuple(verdict.reasons), precedence=precedence, class_lists=class_lists)
                == rules.Cls.INCONCLUSIVE
                and d.signature
            ):
                pos.inconclusive.setdefault(d.signature, set()).add(cut.household)
            pos.spend_nusd += int(x.record.get("cost_nusd") or 0)
            pos.attempts += 1
            pos.reruns += (x.record.get("pass") or 0) > 0
    spend_before = int(man.get("spend_before_nusd") or 0)
    for pos in models.values():
        # money the crash spent is not given back to the cap: the lost costs
        # are the crash-cut households' finished spend from now on
        pos.spend_nusd += pos.lost_nusd
        pos.finished_nusd += pos.lost_nusd
    total = spend_before + sum(p.spend_nusd for p in models.values())
    return Position(
        continuation,
        crash_t,
        run_stop,
        crossed_t,
        total,
        models,
        logs,
        last_anchor,
        host_lines,
        [o for o in run_stops if o.get("scope") == "run"],
    )


def iter_record(data: bytes) -> dict[str, Any] | None:
    import json

    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def move_torn_tail(run_dir: Path, rel: str, offset: int, continuation: int) -> dict[str, Any]:
    """Move the bytes a crash left after ``rel``'s last complete line into a
    kept file beside it (``<log>.torn-<k>``, fsynced), then cut the log back
    to its last complete line: what was never acknowledged is kept, named and
    hashed in the continuation line, and the log can be appended to again.
    A kept file an earlier try of this continuation wrote before it was
    killed, holding these bytes, is the one kept (it is not written twice)."""
    path = Path(run_dir) / rel
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
    kept, i = f"{rel}.torn-{continuation}", 1
    while True:
        kept_path = Path(run_dir) / kept
        try:
            fd = os.open(kept_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            if kept_path.read_bytes() == data:
                break  # kept by the try that was killed before it cut the log back
            i += 1
            kept = f"{rel}.torn-{continuation}.{i}"
            continue
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        break
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    if killpoint.ACTIVE:
        killpoint.wrote(path, "torn-tail")
    return {"log": rel, "offset": offset, "length": len(data), "sha256": sha256_hex(data), "kept": kept}


def kept_before(run_dir: Path, rels: list[str], continuation: int, moving: set[str]) -> list[dict[str, Any]]:
    """Torn tails an earlier try of this continuation moved aside before it
    was killed (its kept files, ``<log>.torn-<k>``, and no continuation line
    naming them): named now, as if this try had moved them. The log was cut
    back to where the tail stood and nothing was written to it since, so the
    offset is its length."""
    out = []
    for rel in rels:
        if rel in moving:
            continue  # still torn: move_torn_tail finds its kept file
        for kept_path in sorted(Path(run_dir).glob(f"{rel}.torn-{continuation}*")):
            if not re.fullmatch(rf"\.torn-{continuation}(\.\d+)?", kept_path.name[len(Path(rel).name) :]):
                continue
            data = kept_path.read_bytes()
            out.append(
                {
                    "log": rel,
                    "offset": (Path(run_dir) / rel).stat().st_size,
                    "length": len(data),
                    "sha256": sha256_hex(data),
                    "kept": kept_path.relative_to(run_dir).as_posix(),
                }
            )
    return out


def begin(
    run: Any, position: Position, *, reason: str, torn: list[dict[str, Any]], made: list[str] | None = None
) -> None:
    """Write what the crash leaves to the continuation, in this order: a
    ``continuation`` line in every log (the reason, every log's lines and
    head at the crash, the last anchor, the torn tails moved aside, this
    process); the crash's stop (cause ``crash``, scope run) at the crash
    instant in run.jsonl and every model's; per model, each household the
    crash cut short: its records' attempt lines (``replaced``), the stop or
    pause a record called for and the log lacks, its household line
    (unfinished, ``cut_by: crash``). Then set the Run's state from
    ``position``. The clock is already above ``position.crash_t``."""
    from filelock import FileLock

    from confirmatory.engine.modelstate import Attempt

    files = run.files
    t = run.clock.now()
    head = {
        "event": "continuation",
        "t": t,
        "continuation": position.continuation,
        "reason": reason,
        "crash_t": position.crash_t,
        "logs": position.logs,
        "last_anchor": position.last_anchor,
        "torn_tails": torn,
        "process": {"pid": os.getpid()},
        "made": list(made or []),
    }
    lost = {name: pos.lost_nusd for name, pos in position.models.items()}
    under_way = {name: [c.household for c in pos.cut] for name, pos in position.models.items() if pos.cut}
    files.run_log.append({**head, "lost_nusd": lost, "under_way": under_way})
    for log in (files.host_log, files.anchors_log, files.pushes_log):
        log.append(head)
    with FileLock(str(run.run_dir / "resume.jsonl.lock")):
        resume = ChainWriter(run.run_dir / "resume.jsonl", log_seed(files.manifest_sha256, "resume.jsonl"))
        try:
            resume.append(head)
        finally:
            resume.close()
    for name, mf in files.models.items():
        pos = position.models[name]
        mf.run_log.append(
            {**head, "lost_nusd": pos.lost_nusd, "lost": pos.lost_keys, "under_way": [c.household for c in pos.cut]}
        )
        mf.admission_log.append(head)
    crash_t = position.crash_t
    stop = {
        "event": "stop",
        "cause": CRASH,
        "scope": "run",
        "t": crash_t,
        "detail": f"the runner died; continuation {position.continuation} carried the run on",
    }
    files.run_log.append(stop)
    for name, mf in files.models.items():
        # a run-scope stop of run.jsonl that this log lacks (its write failed,
        # or the kill came between the two): copied, as the runner writes it
        have = {(o.get("cause"), o.get("t")) for o in position.models[name].run_stops}
        for o in position.run_stops:
            if (o.get("cause"), o.get("t")) not in have:
                mf.run_log.append({k: v for k, v in o.items() if k not in ("seq", "prev")})
        mf.run_log.append(stop)
        pos = position.models[name]
        for cut in pos.cut:
            lines, spend = [], 0
            for x in cut.records:
                r = x.record
                a = Attempt(
                    cut.household,
                    str(r["arm"]),
                    int(r["pass"]),
                    cut.lane,
                    r["start"],
                    r["end"],
                    r,
                    x.rel,
                    x.sha256,
                    x.reruns_used,
                    x.cls,
                    x.action,
                    x.signature,
                    host_lines=position.host_lines,
                    round_index=cut.round_index,
                    replaced=True,
                )
                spend += a.cost_nusd
                if x.lined:
                    continue
                lines.append(a.line())
                key = (cut.household, cut.round_index, a.arm, a.pass_index)
                rnd = {"round": cut.round_index} if cut.round_index else {}
                if x.action == rules.Action.STOP and key not in pos.triggered:
                    cause = x.stop_cause or "harness"
                    lines.append(
                        {
                            "event": "trigger",
                            "cause": cause,
                            "household": cut.household,
                            "arm": a.arm,
                            "pass": a.pass_index,
                            "t": crash_t,
                            **rnd,
                        }
                    )
                    if not pos.stopped:
                        pos.stopped, pos.stop_cause = True, cause
                        lines.append(
                            {
                                "event": "stop",
                                "cause": cause,
                                "scope": "model",
                                "t": crash_t,
                                "detail": f"models/{name}/{x.rel}: found by continuation {position.continuation}",
                            }
                        )
                elif x.action == rules.Action.PAUSE and key not in pos.paused_keys:
                    lines.append(
                        {
                            "event": "pause",
                            "household": cut.household,
                            "arm": a.arm,
                            "pass": a.pass_index,
                            "t": crash_t,
                            **rnd,
                        }
                    )
                    pos.paused, pos.pause_t = True, crash_t
            lines.append(
                {
                    "event": "household",
                    "lane": cut.lane,
                    "household": cut.household,
                    "t": crash_t,
                    "finished": False,
                    "spend_nusd": spend,
                    "cut_by": CRASH,
                    **({"round": cut.round_index} if cut.round_index else {}),
                }
            )
            for line in lines:
                mf.run_log.append(line)
            pos.finished_nusd += spend
            pos.households_done += 1
            if pos.stopped:
                pos.rounds.pop(cut.household, None)
    restore(run, position)


def restore(run: Any, position: Position) -> None:
    """The Run's and each model's state as the records leave them."""
    run.spend.restore(
        position.spend_total_nusd, {n: p.spend_nusd for n, p in position.models.items()}, position.crossed_t
    )
    if position.run_stopped is not None:
        run.stopped, run.stop_cause = True, position.run_stopped
        run.stop_detail = f"stopped before the crash ({position.run_stopped})"
        run.stop_event.set()
    run.resume_seen(sum(p.resumes_seen for p in position.models.values()))
    for name, m in run.models.items():
        pos = position.models[name]
        m.refused, m.finished_nusd, m.under_way = pos.refused, pos.finished_nusd, 0
        m.stopped, m.stop_cause = pos.stopped, pos.stop_cause
        if pos.stopped:
            m.stop_detail = f"stopped before the crash ({pos.stop_cause})"
        m.paused, m.pause_t = pos.paused, pos.pause_t
        if pos.paused:
            m.pause_detail = "paused before the crash: see its pause line"
        m.inconclusive = {sig: set(hh) for sig, hh in pos.inconclusive.items()}
        m.decided, m.households_done = pos.decided, pos.households_done
        m.attempts, m.reruns = pos.attempts, pos.reruns
        m.rounds, m.lane_start, m.lane_done = dict(pos.rounds), dict(pos.lane_start), dict(pos.lane_done)
        m.lane_ends = list(pos.lane_ended.values())
        m.closed = pos.closed
        m.lane_end_lines = len(pos.lane_ended)
        if m.stopped or run.stopped or position.crossed_t is not None:
            m.halt.set()
