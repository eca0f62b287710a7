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
from typing import Any, cast

from confirmatory.core.money import format_usd
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
        return "crashed", ("no close line, and no runner holds its lock; carry it on with: "
                           f"confirmatory continue {root} --reason TEXT")
    lines = [a for a in anchors if a.get("event") == "anchor"]
    final_seq = next((a.get("seq") for a in reversed(anchors) if a.get("event") == "anchor"
                      and a.get("final") is True), None) if lines else None
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
    spend = 0
    attempts = [o for o in lines if o.get("event") == "attempt"]
    for a in sorted(attempts, key=lambda a: (a.get("pass") or 0, a.get("start") or 0)):
        key = (a.get("household"), a.get("arm"))
        if (a.get("pass") or 0) > 0:
            why = str(before.get(key, "unknown"))
            reruns[why] = reruns.get(why, 0) + 1
        before[key] = str(a.get("class"))
        if key[0] in ended:
            standing[key] = str(a.get("class"))
            spend += cast(int, a.get("cost_nusd")) if type(a.get("cost_nusd")) is int else 0
    spend += sum(o["cost_nusd"] for o in lines if o.get("event") == "late-cost" and type(o.get("cost_nusd")) is int)
    # what each continuation found lost with the attempts its crash killed (docs/RUN.md)
    spend += sum(o["lost_nusd"] for o in lines if o.get("event") == "continuation" and type(o.get("lost_nusd")) is int)
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
        "spend_nusd": spend,
        "cap_nusd": man.get("cap_nusd"),
        "pauses": [{"t": o.get("t"), "household": o.get("household"), "arm": o.get("arm"), "pass": o.get("pass")}
                   for o in lines if o.get("event") == "pause"],
        "resumes": [{"t": o.get("t"), "accepted": o.get("accepted")} for o in resumes],
        "stops": [{"t": o.get("t"), "cause": o.get("cause"), "detail": o.get("detail")}
                  for o in lines if o.get("event") == "stop" and o.get("scope") == "model"],
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
    return {
        "run_dir": str(root),
        "state": state,
        "state_detail": why,
        "study": _study_id(root),
        "design_sha256": man.get("design_sha256"),
        "created_t": man.get("created_t"),
        "close_status": close.get("status") if close else None,
        "spend_total_nusd": close.get("spend_total_nusd") if close else sum(m["spend_nusd"] for m in models.values())
        + (man.get("spend_before_nusd") or 0),
        "ceiling_nusd": man.get("ceiling_nusd"),
        "spend_before_nusd": man.get("spend_before_nusd"),
        "ceiling_crossed": {"t": ceiling.get("t"), "total_nusd": ceiling.get("total_nusd")} if ceiling else None,
        "stops": [{"t": o.get("t"), "cause": o.get("cause"), "detail": o.get("detail")}
                  for o in run_lines if o.get("event") == "stop"],
        "stop_causes": sorted({str(o.get("cause")) for o in run_lines if o.get("event") == "stop"}),
        # each continuation of a crashed run (docs/RUN.md "Continuing a crashed run")
        "continuations": [{"t": o.get("t"), "crash_t": o.get("crash_t"), "reason": o.get("reason")}
                          for o in run_lines if o.get("event") == "continuation"],
        "anchors": sum(1 for a in anchors if a.get("event") == "anchor"),
        "final_anchor": any(a.get("event") == "anchor" and a.get("final") is True for a in anchors),
        "last_push": ({"t": last_push.get("t"), "anchor_seq": last_push.get("anchor_seq"), "rc": last_push.get("rc")}
                      if last_push else None),
        "models": models,
    }


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


def render(info: dict[str, Any]) -> str:
    lines = [f"run: {info['run_dir']}",
             f"state: {info['state']} ({info['state_detail']})"]
    if info["close_status"]:
        shown = [c for c in info["stop_causes"] if c != "crash"]  # a crash's stop: its continuation, below
        causes = f" ({', '.join(shown)})" if shown else ""
        lines.append(f"ended: {info['close_status']}{causes}")
    lines += [f"study: {info['study']}; design sha256 {info['design_sha256']}",
              f"started: {when(info['created_t'])}",
              f"spend: {_usd(info['spend_total_nusd'])} of ceiling {_usd(info['ceiling_nusd'])}"
              f" (spent before this stage: {_usd(info['spend_before_nusd'])})"]
    if info["ceiling_crossed"]:
        c = info["ceiling_crossed"]
        lines.append(f"ceiling crossed at {when(c['t'])} (spend then {_usd(c['total_nusd'])})")
    for s in info["stops"]:
        if s["cause"] != "crash":
            lines.append(f"run stopped at {when(s['t'])}: {s['cause']}" + (f": {s['detail']}" if s.get("detail") else ""))
    for c in info.get("continuations", ()):
        lines.append(f"the runner died at {when(c['crash_t'])}; continued at {when(c['t'])}: {c['reason']}")
    for name, m in info["models"].items():
        results = ", ".join(f"{c} {n}" for c, n in m["results_by_class"].items()) or "none"
        reruns = ", ".join(f"{c} {n}" for c, n in m["reruns_by_class"].items())
        lines.append(f"  {name}: {m['households_ended']} of {m['draw']} households ended"
                     + (f" ({m['unfinished']} unfinished)" if m["unfinished"] else "")
                     + f"; arm results: {results}; attempts {m['attempts']}, reruns "
                     + (f"{sum(m['reruns_by_class'].values())} ({reruns})" if reruns else "0")
                     + f"; spend {_usd(m['spend_nusd'])} of cap {_usd(m['cap_nusd'])}")
        for p in m["pauses"]:
            lines.append(f"    paused at {when(p['t'])} ({p['household']}/{p['arm']}, pass {p['pass']})")
        for r in m["resumes"]:
            lines.append(f"    resume at {when(r['t'])}: {'accepted' if r['accepted'] else 'refused'}")
        for s in m["stops"]:
            lines.append(f"    stopped at {when(s['t'])}: {s['cause']}" + (f": {s['detail']}" if s.get("detail") else ""))
    push = info["last_push"]
    lines.append(f"anchors: {info['anchors']}" + (", the last one final" if info["final_anchor"] else ", none final yet")
                 + ("; last push: none" if push is None else
                    f"; last push: anchor line {push['anchor_seq']} at {when(push['t'])}, "
                    + ("ok" if push["rc"] == 0 else f"FAILED (rc {push['rc']})")))
    lines.append(f"check it: confirmatory verify {info['run_dir']}")
    return "\n".join(lines) + "\n"


def one_line(info: dict[str, Any]) -> str:
    models = ", ".join(f"{n} {m['households_ended']}/{m['draw']}" for n, m in info["models"].items())
    ended = f" {info['close_status']}" if info["close_status"] and info["close_status"] != "completed" else ""
    return (f"{Path(info['run_dir']).name}  {info['state']}{ended}  {info['study']}  "
            f"spend {_usd(info['spend_total_nusd'])} of {_usd(info['ceiling_nusd'])}  {models}")


def show_command(path: Path, as_json: bool = False) -> int:
    """Print what RUN_DIR holds (or one line per run in a folder of runs); 0, or 1 when it is neither."""
    path = Path(path)
    if is_run_dir(path):
        info = read_run(path)
        sys.stdout.write(json.dumps(info, indent=2, sort_keys=True) + "\n" if as_json else render(info))
        return 0
    runs = sorted(p for p in path.iterdir() if p.is_dir() and is_run_dir(p)) if path.is_dir() else []
    if not runs:
        print(f"show: {path} is not a run directory, nor a folder holding any (none has a manifest.json, "
              "run.jsonl or anchors.jsonl)", file=sys.stderr)
        return 1
    infos = [read_run(p) for p in runs]
    if as_json:
        sys.stdout.write(json.dumps(infos, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write("".join(one_line(i) + "\n" for i in infos))
    return 0
