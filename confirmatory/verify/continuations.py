"""A continued run's continuation lines, against the logs they describe (invariant 8).

A continuation (docs/RUN.md "Continuing a crashed run") writes one line to
every log, saying in run.jsonl's what every log held at the crash: its line
count and head. Each log's own continuation line must stand exactly there
(its ``seq`` is that count, its ``prev`` that head); no line before it is
dated after the crash instant it names, and it is dated after it (the clock
starts above every time recorded); every log has one for each continuation;
a torn tail it moved aside is in its kept file, hashing as it says. Read only
for a run that was continued: one more pass over its logs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from confirmatory.records.chain import sha256_hex
from confirmatory.records.reader import iter_objects
from confirmatory.verify.context import RunContext


def _num(v) -> bool:
    return type(v) in (int, float) and v == v


def check_continuations(ctx: RunContext) -> None:
    conts = [o for _, o in ctx.run_events if o.get("event") == "continuation"]
    if not conts:
        return
    f, root = ctx.findings, ctx.layout.root
    for spec in ctx.layout.logs():
        rel = spec.relpath
        path = root / rel
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
        except OSError:
            continue  # a missing log is the chain check's
        k, latest = 0, float("-inf")
        for o in iter_objects(path):
            if o.get("event") != "continuation":
                t = o.get("t")
                if _num(t) and t > latest:
                    latest = t
                continue
            if k >= len(conts):
                f.fail(8, rel, o.get("seq"), "a continuation line that run.jsonl does not have")
                break
            said = conts[k]
            at = (said.get("logs") or {}).get(rel)
            f.check(8, 3)
            if rel != "run.jsonl" and o.get("t") != said.get("t"):
                f.fail(8, rel, o.get("seq"), f"continuation {k + 1} dated {o.get('t')!r}, run.jsonl's {said.get('t')!r}")
            if not (isinstance(at, dict) and at.get("lines") == o.get("seq") and at.get("head") == o.get("prev")):
                f.fail(8, rel, o.get("seq"), f"continuation {k + 1} stands at line {o.get('seq')!r}; run.jsonl's says "
                       f"the log held {at!r} at the crash")
            crash_t = said.get("crash_t")
            if not (_num(crash_t) and latest <= crash_t < said.get("t", float("-inf"))):
                f.fail(8, rel, o.get("seq"), f"continuation {k + 1}: a line before it is dated {latest}, after the "
                       f"crash instant {crash_t!r} it names, or it is not dated after that instant")
            k += 1
        f.check(8)
        if k < len(conts) and ctx.logs.stage is None:
            f.fail(8, rel, None, f"{len(conts) - k} continuation line(s) of run.jsonl missing from this log")
    for k, said in enumerate(conts, 1):
        for torn in said.get("torn_tails") or ():
            f.check(8)
            kept = Path(root) / str(torn.get("kept"))
            try:
                ok = sha256_hex(kept.read_bytes()) == torn.get("sha256")
            except OSError:
                ok = False
            if not ok:
                f.fail(8, str(torn.get("kept")), None, f"continuation {k}: the torn tail it kept is missing or does "
                       "not hash as it says")
