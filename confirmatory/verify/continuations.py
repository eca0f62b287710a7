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
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from confirmatory.records.chain import sha256_hex
from confirmatory.records.reader import iter_objects
from confirmatory.verify.context import RunContext
from confirmatory.verify.report import UNDER_WAY

if TYPE_CHECKING:
    from confirmatory.records.layout import RunLayout


def _num(v: object) -> TypeGuard[float]:
    return type(v) in (int, float) and v == v


def continuation_order(layout: RunLayout) -> list[str]:
    """The logs a continuation writes its line to, in the order it writes
    them (engine.continuation.begin): a SIGKILL between two of them leaves
    the line in a prefix of this list."""
    out = ["run.jsonl", "host.jsonl", "anchors.jsonl", "anchor-pushes.jsonl", "resume.jsonl"]
    for name in layout.models:
        out.extend(f"models/{name}/{log}" for log in ("run.jsonl", "admission.jsonl"))
    return out


_KEPT = re.compile(r"(.+\.jsonl)\.torn-([1-9]\d*)(?:\.\d+)?")


def final_anchors(root: Path) -> list[dict[str, Any]]:
    try:
        return [
            o for o in iter_objects(root / "anchors.jsonl") if o.get("event") == "anchor" and o.get("final") is True
        ]
    except Exception:  # noqa: BLE001 - an unreadable anchors.jsonl is the chain check's
        return []


def _kept_whole(root: Path, torn: object) -> bool:
    if not isinstance(torn, dict):
        return False
    try:
        return sha256_hex((Path(root) / str(torn.get("kept"))).read_bytes()) == torn.get("sha256")
    except OSError:
        return False


def kept_files(ctx: RunContext, conts: list[dict[str, Any]]) -> None:
    """Every torn tail kept beside a log (``<log>.torn-<k>``) is named by
    continuation k; one no continuation line names is the crash's only if a
    continuation k was killed before its run.jsonl line (k is the next)."""
    f, root = ctx.findings, ctx.layout.root
    # named by a continuation line, or by the final anchor `continue` wrote
    # for a run killed after its close line (cli.continue_run.finish_close)
    finals = final_anchors(root)
    for said in finals:
        for torn in said.get("torn_tails") or ():
            f.check(8)
            if not _kept_whole(root, torn):
                f.fail(
                    8,
                    str(torn.get("kept")),
                    None,
                    "the final anchor's kept torn tail is missing or does not hash as it says",
                )
    named = {str(t.get("kept")) for o in (*conts, *finals) for t in (o.get("torn_tails") or ()) if isinstance(t, dict)}
    for spec in ctx.layout.logs():
        parent = (root / spec.relpath).parent
        base = Path(spec.relpath).name
        try:
            names = [p.name for p in parent.iterdir() if p.name.startswith(base + ".torn-")]
        except OSError:
            continue
        for name in sorted(names):
            rel = (Path(spec.relpath).parent / name).as_posix()
            m = _KEPT.fullmatch(name)
            f.check(8)
            if rel in named:
                continue
            if m and int(m.group(2)) == len(conts) + 1 and ctx.logs.stage == UNDER_WAY:
                f.explain(
                    8,
                    rel,
                    None,
                    f"a torn tail moved aside by continuation {m.group(2)}, killed before "
                    "its first line: the next continuation names it",
                )
            else:
                f.fail(8, rel, None, "a kept torn tail that no continuation line names")


def check_continuations(ctx: RunContext) -> None:
    conts = [o for _, o in ctx.run_events if o.get("event") == "continuation"]
    f, root = ctx.findings, ctx.layout.root
    kept_files(ctx, conts)
    if not conts:
        return
    number = {}
    for k, said in enumerate(conts, 1):
        f.check(8)
        if said.get("continuation") != k:
            f.fail(
                8,
                "run.jsonl",
                said.get("seq"),
                f"continuation line {k} of run.jsonl is numbered {said.get('continuation')!r}",
            )
        number[k] = said
    # per log: the numbers of its continuation lines, and whether a line of
    # another event follows each (a continuation that wrote nothing else)
    held: dict[str, dict[int, bool]] = {}
    for spec in ctx.layout.logs():
        rel = spec.relpath
        path = root / rel
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
        except OSError:
            continue  # a missing log is the chain check's (or holds no continuation line yet)
        mine = held[rel] = {}
        k, latest, last = 0, float("-inf"), None
        for o in iter_objects(path):
            if o.get("event") != "continuation":
                if last is not None:
                    mine[last] = True
                    last = None
                t = o.get("t")
                if _num(t) and t > latest:
                    latest = t
                continue
            n = o.get("continuation")
            if type(n) is not int or n not in number or n <= k:
                f.fail(
                    8, rel, o.get("seq"), f"a continuation line ({n!r}) that run.jsonl does not have, or out of order"
                )
                break
            said, k, last = number[n], n, n
            mine[n] = False
            at = (said.get("logs") or {}).get(rel)
            f.check(8, 3)
            if rel != "run.jsonl" and o.get("t") != said.get("t"):
                f.fail(8, rel, o.get("seq"), f"continuation {n} dated {o.get('t')!r}, run.jsonl's {said.get('t')!r}")
            if not (isinstance(at, dict) and at.get("lines") == o.get("seq") and at.get("head") == o.get("prev")):
                f.fail(
                    8,
                    rel,
                    o.get("seq"),
                    f"continuation {n} stands at line {o.get('seq')!r}; run.jsonl's says "
                    f"the log held {at!r} at the crash",
                )
            crash_t = said.get("crash_t")
            if not (_num(crash_t) and latest <= crash_t < said.get("t", float("-inf"))):
                f.fail(
                    8,
                    rel,
                    o.get("seq"),
                    f"continuation {n}: a line before it is dated {latest}, after the "
                    f"crash instant {crash_t!r} it names, or it is not dated after that instant",
                )
    # A continuation killed while it wrote its lines (docs/RUN.md "A
    # continuation cut short"): its line is in a prefix of the logs in the
    # order it writes them, and it wrote nothing else; the next continuation
    # (or this crash) explains the rest. Any other gap is a violation.
    order = continuation_order(ctx.layout)
    for n in number:
        f.check(8)
        have = [rel in held and n in held[rel] for rel in order]
        if all(have):
            continue
        cut = have.index(False)
        last = n == len(conts)
        if any(have[cut:]) or any(held[rel][n] for rel in order[:cut]) or (last and ctx.logs.stage is None):
            missing = [rel for rel, h in zip(order, have) if not h]
            f.fail(
                8,
                missing[0],
                None,
                f"continuation {n}'s line is missing from {len(missing)} log(s) "
                f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}), yet "
                + (
                    "a log after them in its writing order has it, or it wrote more than its lines"
                    if not (last and ctx.logs.stage is None)
                    else "the run ended"
                ),
            )
        else:
            f.explain(
                8,
                order[cut],
                None,
                f"continuation {n} was killed while it wrote its lines: "
                f"{cut} of its {len(order)} written, nothing else",
            )
    for k, said in enumerate(conts, 1):
        for torn in said.get("torn_tails") or ():
            f.check(8)
            if not _kept_whole(root, torn):
                f.fail(
                    8,
                    str(torn.get("kept")),
                    None,
                    f"continuation {k}: the torn tail it kept is missing or does not hash as it says",
                )
