"""``confirmatory show RUN_DIR``: what a run directory holds, without reading JSONL.

Owns a cheap read of a run directory (its manifests and logs read once, line
by line; no record file opened, no hash recomputed: that is `verify`'s work)
and its two renderings: text for a person, JSON (``--json``) for machines.
On a folder of run directories, one line each.

The state is verify's (docs/VERIFY.md "States"): running while a runner
holds the run's lock; complete once a close line is written and the final
anchor's push recorded; else crashed, with how far it got. The figures
(households ended, arm results by class, spend) are the ones verify's report
gives under ``figures``, counted the same way: only households whose
household line is on disk; its tests compare the two on every kind of run.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

from confirmatory.core.money import Spend, format_usd, model_spend
from confirmatory.records.checkpoints import logged_evidence, read_evidence
from confirmatory.records.reader import iter_objects

RUN_FILES = ("manifest.json", "run.jsonl", "anchors.jsonl")


def _objects(path: Path) -> list[dict[str, Any]]:
    """The readable lines of a log, up to its first unreadable one (a torn tail)."""
    out: list[dict[str, Any]] = []
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return out
        for obj in iter_objects(path):
            out.append(obj)
    except (OSError, ValueError):
        pass
    except Exception:  # noqa: BLE001 - a damaged line: verify says what; show what was read
        pass
    return out


def _json(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def when(t: Any) -> str:
    if not isinstance(t, (int, float)) or t != t:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def is_run_dir(path: Path) -> bool:
    return any((path / rel).exists() for rel in RUN_FILES)


def run_state(root: Path, anchors: list[dict[str, Any]], pushes: list[dict[str, Any]]) -> tuple[str, str]:
    """verify's state (complete, running, crashed) and, for a crashed run, how far it got."""
    from confirmatory.verify.verification import run_stage

    live, stage = run_stage(root)
    if live:
        return "running", "a runner holds the run's lock"
    if stage != "closed":
        return "crashed", (
            f"no close line, and no runner holds its lock; carry it on with: confirmatory continue {root} --reason TEXT"
        )
    lines = [a for a in anchors if a.get("event") == "anchor"]
    final_seq = (
        next((a.get("seq") for a in reversed(anchors) if a.get("event") == "anchor" and a.get("final") is True), None)
        if lines
        else None
    )
    last_push = next((p for p in reversed(pushes) if p.get("event") == "push"), None)
    if final_seq is None:
        return "crashed", "closed, but its final anchor was not written"
    if last_push is None or last_push.get("anchor_seq") != final_seq:
        return "crashed", f"closed, but the final anchor is not on the witness: confirmatory push-anchor {root}"
    return "complete", "a close line and a pushed final anchor"


def model_figures(root: Path, name: str) -> dict[str, Any]:
    man = _json(root / "models" / name / "manifest.json")
    lines = _objects(root / "models" / name / "run.jsonl")
    ended = {o.get("household"): o for o in lines if o.get("event") == "household"}
    standing: dict[tuple[Any, Any], str] = {}
    before: dict[tuple[Any, Any], str] = {}
    reruns: dict[str, int] = {}
    attempts = [o for o in lines if o.get("event") == "attempt"]
    for a in sorted(attempts, key=lambda a: (a.get("pass") or 0, a.get("start") or 0)):
        key = (a.get("household"), a.get("arm"))
        if (a.get("pass") or 0) > 0:
            why = str(before.get(key, "unknown"))
            reruns[why] = reruns.get(why, 0) + 1
        before[key] = str(a.get("class"))
        if key[0] in ended:
            standing[key] = str(a.get("class"))
    # the one count of money (verify's figures call it too): attempts of ended
    # households, late costs, lost costs, journaled costs in flight
    spent = model_spend(lines)
    by_class: dict[str, int] = {}
    for cls in standing.values():
        by_class[cls] = by_class.get(cls, 0) + 1
    resumes = [o for o in lines if o.get("event") == "resume"]
    return {
        "households_ended": len(ended),
        "unfinished": sum(1 for o in ended.values() if o.get("finished") is not True),
        "draw": len(man.get("draw") or []),
        "results_by_class": dict(sorted(by_class.items())),
        "attempts": len(attempts),
        "reruns_by_class": dict(sorted(reruns.items())),
        "spend_nusd": spent.total_nusd,
        "spend": spent.as_dict(),
        "cap_nusd": man.get("cap_nusd"),
        "pauses": [
            {"t": o.get("t"), "household": o.get("household"), "arm": o.get("arm"), "pass": o.get("pass")}
            for o in lines
            if o.get("event") == "pause"
        ],
        "resumes": [{"t": o.get("t"), "accepted": o.get("accepted")} for o in resumes],
        "stops": [
            {"t": o.get("t"), "cause": o.get("cause"), "detail": o.get("detail")}
            for o in lines
            if o.get("event") == "stop" and o.get("scope") == "model"
        ],
    }


def read_run(root: Path) -> dict[str, Any]:
    """What ``show`` says of one run directory, as a dict (``--json``)."""
    root = Path(root)
    man = _json(root / "manifest.json")
    run_lines = _objects(root / "run.jsonl")
    anchors = _objects(root / "anchors.jsonl")
    pushes = _objects(root / "anchor-pushes.jsonl")
    state, why = run_state(root, anchors, pushes)
    close = next((o for o in reversed(run_lines) if o.get("event") == "close"), None)
    ceiling = next((o for o in run_lines if o.get("event") == "ceiling"), None)
    last_push = next((p for p in reversed(pushes) if p.get("event") == "push"), None)
    models = {str(n): model_figures(root, str(n)) for n in (man.get("models") or []) if isinstance(n, str)}
    before = man.get("spend_before_nusd") if type(man.get("spend_before_nusd")) is int else 0
    try:
        logged = read_evidence(root)
        evidence, per_anchor = logged.evidence, logged_evidence(logged)
    except Exception:  # noqa: BLE001 - an unreadable anchors file: verify says what; show the rest
        evidence, per_anchor = None, []
    return {
        "run_dir": str(root),
        "state": state,
        "state_detail": why,
        "study": _study_id(root),
        "design_sha256": man.get("design_sha256"),
        "created_t": man.get("created_t"),
        "close_status": close.get("status") if close else None,
        "spend_total_nusd": before + sum(m["spend_nusd"] for m in models.values()),
        "spend": {**sum((_parts(m["spend"]) for m in models.values()), Spend()).as_dict(), "before_nusd": before},
        "close_spend_total_nusd": close.get("spend_total_nusd") if close else None,
        "ceiling_nusd": man.get("ceiling_nusd"),
        "spend_before_nusd": man.get("spend_before_nusd"),
        "ceiling_crossed": {"t": ceiling.get("t"), "total_nusd": ceiling.get("total_nusd")} if ceiling else None,
        "stops": [
            {"t": o.get("t"), "cause": o.get("cause"), "detail": o.get("detail")}
            for o in run_lines
            if o.get("event") == "stop"
        ],
        "stop_causes": sorted({str(o.get("cause")) for o in run_lines if o.get("event") == "stop"}),
        # each continuation of a crashed run (docs/RUN.md "Continuing a crashed run")
        "continuations": [
            {"t": o.get("t"), "crash_t": o.get("crash_t"), "reason": o.get("reason")}
            for o in run_lines
            if o.get("event") == "continuation"
        ],
        "anchors": sum(1 for a in anchors if a.get("event") == "anchor"),
        "final_anchor": any(a.get("event") == "anchor" and a.get("final") is True for a in anchors),
        "last_push": (
            {"t": last_push.get("t"), "anchor_seq": last_push.get("anchor_seq"), "rc": last_push.get("rc")}
            if last_push
            else None
        ),
        "models": models,
        # what proves each anchor, as its lines in anchor-pushes.jsonl say (verify checks them: invariant 12)
        "evidence": evidence,
        "anchor_evidence": per_anchor,
    }


def _parts_line(spend: dict[str, int]) -> str:
    """The total's parts, in the page's words and order (docs/REPORT.md "Spend")."""
    return (
        f"recorded {_usd(spend['recorded_nusd'])} + late costs {_usd(spend['late_nusd'])}"
        f" + lost costs {_usd(spend['lost_nusd'])} + in flight {_usd(spend['in_flight_nusd'])}"
        f" + before this stage {_usd(spend['before_nusd'])}"
    )


def _iso(t: Any) -> str:
    return t.replace("T", " ").replace("Z", " UTC") if isinstance(t, str) else "?"


def proves(e: dict[str, Any]) -> str:
    """What proves one anchor, in words: its git push, the study's signature, each cosignature, each stamp."""
    parts = ["git push ok" if e["git"] else "not on the git witness"]
    parts.append("signed by the study" if e["signature"] else "no signed checkpoint")
    parts += [f"cosigned by {c['name']} at {when(c['time'])}" for c in e["cosignatures"]]
    parts += [
        f"stamped by TSA {s['tsa']}" + (f" ({s['url']})" if s.get("url") else "") + f" at {_iso(s['gen_time'])}"
        for s in e["stamps"]
    ]
    return "; ".join(parts)


def evidence_lines(info: dict[str, Any], shown: int = 3) -> list[str]:
    """Per anchor what proves it (the first and last ``shown`` when there are more)."""
    rows = info.get("anchor_evidence") or []
    if info.get("evidence") is None:
        return ["evidence: the git witness only (the design names no signer, time-stamping authority or witness)"]
    out = ["what proves each anchor (as logged; confirmatory verify checks every signature and stamp):"]
    cut = len(rows) > 2 * shown
    picked = rows[:shown] + rows[-shown:] if cut else rows
    for n, a in enumerate(picked):
        if cut and n == shown:
            out.append(f"  ... {len(rows) - 2 * shown} more (show --json lists every one)")
        out.append(f"  anchor {a['seq']}{' (final)' if a['final'] else ''}: {proves(a['evidence'])}")
    return out


def _parts(d: dict[str, int]) -> Spend:
    return Spend(d["recorded_nusd"], d["late_nusd"], d["lost_nusd"], d["in_flight_nusd"])


def _study_id(root: Path) -> str | None:
    """The study id, from design.toml as the run recorded it."""
    import tomllib

    try:
        sid = tomllib.loads((root / "design.toml").read_text())["study"]["id"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return str(sid)


def _usd(nusd: Any) -> str:
    return format_usd(nusd) if type(nusd) is int else "?"


def render(info: dict[str, Any], report: Any = None) -> str:
    lines = [f"run: {info['run_dir']}", f"state: {info['state']} ({info['state_detail']})"]
    if report is None:
        lines.append(
            f"verified: not checked (show reads the records, it does not check them: confirmatory verify {info['run_dir']})"
        )
    elif report.ok:
        lines.append(f"verified: every invariant holds ({report.state})")
    else:
        lines.append(
            "verified: VERIFY FAILS (invariants "
            + ", ".join(str(i) for i in sorted(report.failed()))
            + "): the figures below are read from records that fail verify"
        )
    if info["close_status"]:
        shown = [c for c in info["stop_causes"] if c != "crash"]  # a crash's stop: its continuation, below
        causes = f" ({', '.join(shown)})" if shown else ""
        lines.append(f"ended: {info['close_status']}{causes}")
    lines += [
        f"study: {info['study']}; design sha256 {info['design_sha256']}",
        f"started: {when(info['created_t'])}",
        f"spend: {_usd(info['spend_total_nusd'])} of ceiling {_usd(info['ceiling_nusd'])}"
        f" (spent before this stage: {_usd(info['spend_before_nusd'])})",
        "  = " + _parts_line(info["spend"]),
    ]
    if info["ceiling_crossed"]:
        c = info["ceiling_crossed"]
        lines.append(f"ceiling crossed at {when(c['t'])} (spend then {_usd(c['total_nusd'])})")
    for s in info["stops"]:
        if s["cause"] != "crash":
            lines.append(
                f"run stopped at {when(s['t'])}: {s['cause']}" + (f": {s['detail']}" if s.get("detail") else "")
            )
    for c in info.get("continuations", ()):
        lines.append(f"the runner died at {when(c['crash_t'])}; continued at {when(c['t'])}: {c['reason']}")
    for name, m in info["models"].items():
        results = ", ".join(f"{c} {n}" for c, n in m["results_by_class"].items()) or "none"
        reruns = ", ".join(f"{c} {n}" for c, n in m["reruns_by_class"].items())
        lines.append(
            f"  {name}: {m['households_ended']} of {m['draw']} households ended"
            + (f" ({m['unfinished']} unfinished)" if m["unfinished"] else "")
            + f"; arm results: {results}; attempts {m['attempts']}, reruns "
            + (f"{sum(m['reruns_by_class'].values())} ({reruns})" if reruns else "0")
            + f"; spend {_usd(m['spend_nusd'])} of cap {_usd(m['cap_nusd'])}"
        )
        for p in m["pauses"]:
            lines.append(f"    paused at {when(p['t'])} ({p['household']}/{p['arm']}, pass {p['pass']})")
        for r in m["resumes"]:
            lines.append(f"    resume at {when(r['t'])}: {'accepted' if r['accepted'] else 'refused'}")
        for s in m["stops"]:
            lines.append(
                f"    stopped at {when(s['t'])}: {s['cause']}" + (f": {s['detail']}" if s.get("detail") else "")
            )
    push = info["last_push"]
    lines.append(
        f"anchors: {info['anchors']}"
        + (", the last one final" if info["final_anchor"] else ", none final yet")
        + (
            "; last push: none"
            if push is None
            else f"; last push: anchor line {push['anchor_seq']} at {when(push['t'])}, "
            + ("ok" if push["rc"] == 0 else f"FAILED (rc {push['rc']})")
        )
    )
    if info["anchors"]:
        lines += evidence_lines(info)
    return "\n".join(lines) + "\n"


def state_of(info: dict[str, Any]) -> str:
    """The state as the table shows it: verify's, how the run ended when not
    plainly completed, and a mark for a run that was continued after a crash."""
    words = [info["state"]]
    if info["close_status"] and info["close_status"] != "completed":
        words.append(str(info["close_status"]))
    if info.get("continuations"):
        n = len(info["continuations"])
        words.append("continued" + (f" x{n}" if n > 1 else ""))
    return ", ".join(words)


def verdict_of(report: Any) -> str:
    """verify's word on a run, for the table's last column."""
    if report is None:
        return "not checked"
    if not report.ok:
        return "FAILS " + ",".join(str(i) for i in sorted(report.failed()))
    return "holds" if report.complete else f"holds so far ({report.state})"


HEADER = ("run", "state", "models", "households", "spend", "verified")


def table(infos: list[dict[str, Any]], verdicts: list[Any] | None = None) -> str:
    """A folder of runs: one aligned row each under a header, then what the
    marks mean. Households are those ended of the draw, summed over models."""
    rows = [HEADER]
    for k, info in enumerate(infos):
        ended = sum(m["households_ended"] for m in info["models"].values())
        draw = sum(m["draw"] for m in info["models"].values())
        rows.append(
            (
                Path(info["run_dir"]).name,
                state_of(info),
                ", ".join(info["models"]) or "none",
                f"{ended}/{draw}",
                f"{_usd(info['spend_total_nusd'])} of {_usd(info['ceiling_nusd'])}",
                verdict_of(verdicts[k] if verdicts is not None else None),
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(HEADER))]
    right = {3, 4}  # counts and money line up on their right
    out = [
        "  ".join(
            cell.rjust(w) if c in right else cell.ljust(w) for c, (cell, w) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    ]
    notes = []
    if any(i.get("continuations") for i in infos):
        notes.append("continued: the runner died and the run was carried on (confirmatory show RUN says when and why)")
    if verdicts is None:
        notes.append(
            "verified: show reads the records, it does not check them; "
            "confirmatory show --verify DIR, or confirmatory verify RUN, does"
        )
    elif any(not v.ok for v in verdicts):
        notes.append("FAILS: verify finds violations of the invariants named; the figures are read from those records")
    return "\n".join(out + [""] * bool(notes) + notes) + "\n"


def show_command(path: Path, as_json: bool = False, *, verify: bool = False) -> int:
    """Print what RUN_DIR holds (or a table of the runs in a folder); 0, or 1
    when it is neither. With ``verify``, verify's verdict on each run too."""
    path = Path(path)
    if is_run_dir(path):
        info = read_run(path)
        report = _verify(path) if verify else None
        if as_json:
            sys.stdout.write(json.dumps(_with_verdict(info, report), indent=2, sort_keys=True) + "\n")
        else:
            sys.stdout.write(render(info, report))
        return 0
    runs = sorted(p for p in path.iterdir() if p.is_dir() and is_run_dir(p)) if path.is_dir() else []
    if not runs:
        print(
            f"show: {path} is not a run directory, nor a folder holding any (none has a manifest.json, "
            "run.jsonl or anchors.jsonl)",
            file=sys.stderr,
        )
        return 1
    infos = [read_run(p) for p in runs]
    verdicts = [_verify(p) for p in runs] if verify else None
    if as_json:
        shown = [_with_verdict(i, verdicts[k] if verdicts else None) for k, i in enumerate(infos)]
        sys.stdout.write(json.dumps(shown, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(table(infos, verdicts))
    return 0


def _verify(root: Path) -> Any:
    from confirmatory.verify.verification import verify_run

    return verify_run(root)


def _with_verdict(info: dict[str, Any], report: Any) -> dict[str, Any]:
    """``--json``: with ``--verify``, ``verified`` holds verify's ok, state and failed invariants."""
    if report is None:
        return info
    return {**info, "verified": {"ok": report.ok, "state": report.state, "failed": sorted(report.failed())}}
