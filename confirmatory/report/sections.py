"""The page's sections, each HTML text made from the records and verify's report.

Owns what each section says: the verdict (verify's state and every
invariant, in words and colour), the lane timelines, spend, admission, arm
results by class (verify's own tallies), host evidence, anchors and pushes,
and config.json (what was not pinned down first). Long lists are cut to
their first rows (`SHOWN`) and the page says how many there were.
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from typing import TYPE_CHECKING, Any, cast

from confirmatory.core.money import Spend, format_usd, model_spend
from confirmatory.report.charts import (
    CLASS_COLOURS,
    MODEL_COLOURS,
    Axis,
    esc,
    klass,
    line_chart,
    timeline,
)

if TYPE_CHECKING:
    from confirmatory.report.data import RunView
    from confirmatory.verify.report import Report

SHOWN = 200  # rows of a long table shown (the page says how many there were)
NUSD = 10**9


def usd(nusd: object) -> str:
    """Dollars to the micro-dollar, half up: core.money.format_usd, as show, the display and verify print them."""
    return format_usd(nusd) if type(nusd) is int else esc(nusd)


def model_money(mv: Any) -> Spend:
    """A model's spend by the one count (core.money.model_spend) verify's figures and show make."""
    return model_spend([*mv.attempts, *mv.households, *mv.control])


def rel_t(t: Any, t0: float) -> str:
    return f"{t - t0:.3f} s" if type(t) in (int, float) else esc(t)


def _table(head: list[str], rows: list[str], cls: str = "") -> str:
    return (
        f'<table class="{cls}"><thead><tr>{"".join(f"<th>{esc(h)}</th>" for h in head)}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _cut(total: int, shown: int, what: str) -> str:
    if total <= shown:
        return ""
    return f'<p class="cut" data-total="{total}" data-shown="{shown}">{shown} of {total} {esc(what)} shown.</p>'


# ------------------------------------------------------------------ verdict


def utc(t: Any, t0: float | None = None) -> str:
    """UTC ISO 8601 to the second, and the seconds since the run began."""
    if type(t) not in (int, float) or t != t:
        return esc(t)
    when = _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return when + (f" (+{t - t0:.1f} s)" if t0 is not None else "")


def headline(report: Report, view: RunView) -> str:
    """The outcome first: state, how the run ended, the money against the
    cap and the ceiling (each part shown), what did not run, and each
    continuation (its reason, the attempts the crash lost, the households run again)."""
    fig = report.figures or {}
    t0 = view.span()[0]
    status = fig.get("close_status")
    causes = [c for c in fig.get("stop_causes") or [] if c != "crash"]
    ended = {
        None: "not ended (no close line)",
        "completed": "completed",
        "ceiling": "stopped at the ceiling",
        "stopped": "stopped",
    }.get(status, esc(status))
    if causes:
        ended += f": {esc(', '.join(causes))}"
    sp = fig.get("spend") or {}
    parts = [
        f"{what} {usd(sp[k])}"
        for k, what in (("late_nusd", "late costs"), ("lost_nusd", "lost costs"), ("in_flight_nusd", "in flight"))
        if sp.get(k)
    ]
    tainted = "" if report.ok else " (read from records that FAIL verify)"
    money = (
        f'spent{tainted} <b data-nusd="{fig.get("spend_total_nusd")}">{usd(fig.get("spend_total_nusd"))}</b>'
        + (f" ({', '.join(parts)} included)" if parts else "")
        + f" of the ceiling {usd(view.ceiling_nusd)} (overall cap {usd(view.overall_cap_nusd)})"
    )
    not_run = []
    for name, m in (fig.get("models") or {}).items():
        draw = len(view.models[name].manifest.get("draw") or []) if name in view.models else 0
        left = draw - int(m.get("households_ended") or 0)
        if left > 0:
            not_run.append(f"{esc(name)}: {left} of {draw} households did not end")
    items = [
        f"<li>state: <b>{esc(report.state)}</b>; ended: <b>{ended}</b></li>",
        f"<li>{money}</li>",
        f"<li>did not run: {'; '.join(not_run) if not_run else 'nothing: every household of every draw ended'}</li>",
    ]
    for c in (o for o in view.run_events if o.get("event") == "continuation"):
        lost, again = [], []
        for mv in view.models.values():
            for mc in mv.events("continuation"):
                if mc.get("continuation") == c.get("continuation"):
                    lost += [f"{mv.name} {k}" for k in mc.get("lost") or []]
                    again += [f"{mv.name} {h}" for h in mc.get("under_way") or []]
        items.append(
            f'<li class="continuation">CONTINUED after a crash at {utc(c.get("crash_t"), t0)}, at '
            f"{utc(c.get('t'), t0)}: reason given: \u201c{esc(c.get('reason'))}\u201d; attempts the crash lost: "
            f"{esc(', '.join(map(str, lost))) or 'none'}; households run again: {esc(', '.join(map(str, again))) or 'none'}</li>"
        )
    return f'<ul class="headline">{"".join(items)}</ul>'


def evidence_line(report: Report) -> str:
    """Which kinds of evidence prove the run's final (else last) anchor, as verify checked them, and which it lacks."""
    if not report.anchors:
        return '<p class="evidence" data-kinds="">No anchor: nothing proves the run.</p>'
    last = report.anchors[-1]
    e = last["evidence"]
    has = {
        "git": ("the git witness", bool(e.get("git"))),
        "signature": ("the study's signature", bool(e.get("signature"))),
        "cosignatures": (f"{len(e.get('cosignatures') or [])} witness cosignature(s)", bool(e.get("cosignatures"))),
        "stamps": (f"{len(e.get('stamps') or [])} RFC 3161 time stamp(s)", bool(e.get("stamps"))),
    }
    names = {
        "git": "git witness",
        "signature": "signature by the study",
        "cosignatures": "witness cosignature",
        "stamps": "RFC 3161 time stamp",
    }
    there = [k for k, (_, ok) in has.items() if ok]
    missing = [names[k] for k, (_, ok) in has.items() if not ok]
    which = "final" if last.get("final") else "last"
    return (
        f'<p class="evidence" data-kinds="{",".join(there)}">What proves the {which} anchor (checked by verify): '
        f"{esc(', '.join(has[k][0] for k in there) or 'nothing')}"
        + (f"; it has no {esc(', no '.join(missing))}" if missing else "")
        + '. <a href="#anchors">Per anchor</a>.</p>'
    )


def verdict(report: Report | None, problem: str | None, view: RunView | None = None) -> str:
    """verify's verdict: a banner in words and colour, the state, the outcome,
    START HERE, every invariant's row, the witness and households lines and
    what only a crash explains."""
    if report is None:
        return (
            f'<section id="verdict" class="verdict failed" data-ok="false" data-state="unknown">'
            f'<h2 class="banner">VERIFY COULD NOT RUN: {esc(problem)}</h2></section>'
        )
    failed = sorted(report.failed())
    names = {r.invariant: r.name for r in report.results}
    if failed:
        kind = "failed"
        # the cause first: a root violation (a changed line, a chain break) before its echoes
        first = report.start_here[0] if report.start_here else None
        first = first or next((v for r in report.results if r.invariant == failed[0] for v in r.first), None)
        words = "VERIFY FAILED: " + "; ".join(f"invariant {i} ({names[i]})" for i in failed)
        sub = (
            f"first violation: {first.where()}: {first.message}"
            if first is not None
            else next((r.note for r in report.results if r.invariant == failed[0] and r.note), "")
        )
    elif report.complete:
        kind, words, sub = "ok", "ALL INVARIANTS HOLD", "the run is complete and every invariant of RECORDS.md holds"
        status = (report.figures or {}).get("close_status")
        if status == "ceiling":
            kind, words = "incomplete", "ALL INVARIANTS HOLD; THE RUN STOPPED AT ITS CEILING"
        elif status == "stopped":
            kind, words = "incomplete", "ALL INVARIANTS HOLD; THE RUN WAS STOPPED"
    else:
        kind = "incomplete"
        words = f"NO VIOLATION, BUT THE RUN IS NOT COMPLETE ({report.state})"
        sub = report.next_step() or ""
    if report.state == "running":
        sub = (
            "THE RUN IS STILL RUNNING (a runner holds its lock): this page is provisional; its logs are "
            "still being written. Build it again after the run has ended."
        )
    out = [
        f'<section id="verdict" class="verdict {kind}" data-ok="{str(report.ok).lower()}" '
        f'data-state="{esc(report.state)}" data-failed="{",".join(map(str, failed))}">',
        f'<h2 class="banner">{esc(words)}</h2>',
        f'<p class="sub">{esc(sub)}</p>' if sub else "",
        headline(report, view) if view is not None else "",
        f'<p class="state">{esc(report.state_line())}</p>',
        f'<p class="outcome">the records say: {esc(report.outcome)}</p>' if report.outcome else "",
    ]
    if report.start_here:
        out.append(
            '<div class="start-here"><h3>START HERE</h3><p>verify reads each log only up to its first '
            "break; the violations below may follow from these:</p><ul>"
            + "".join(f"<li>{esc(v.where())}: {esc(v.message)}</li>" for v in report.start_here[:10])
            + "</ul></div>"
        )
    rows = []
    for r in report.results:
        firsts = ([esc(r.note)] if r.note else []) + [f"{esc(v.where())}: {esc(v.message)}" for v in r.first[:3]]
        if r.violations > len(r.first[:3]):
            firsts.append(f"... {r.violations} violations in all")
        rows.append(
            f'<tr class="inv s-{esc(r.status)}" data-invariant="{r.invariant}" data-status="{esc(r.status)}" '
            f'data-violations="{r.violations}"><td>{r.invariant}</td><td>{esc(r.name)}</td>'
            f'<td class="status">{esc(str(r.status).upper())}</td><td class="num">{r.checked}</td>'
            f'<td class="num">{r.violations}</td><td>{"<br>".join(firsts)}</td></tr>'
        )
    out.append(_table(["#", "invariant", "status", "checked", "violations", "first violations"], rows, "invariants"))
    out.append(
        f'<p class="witness">{esc(report.witness_line())}</p><p class="households">{esc(report.households_line())}</p>'
    )
    out.append(evidence_line(report))
    crash = report.crash if report.state != "complete" else None
    if crash:
        items = [
            f"{esc(m)}: households under way: {esc(', '.join(hh))}"
            for m, hh in sorted((crash.get("under_way") or {}).items())
        ]
        items += [
            f"torn tail of {esc(t['log'])}: {t['length']} bytes at offset {t['offset']}, never acknowledged"
            for t in crash.get("torn_tails") or []
        ]
        explained = crash.get("explained") or []
        items += [
            f"{esc(e['file'])}{'' if e['line'] is None else ':' + str(e['line'] + 1)}: {esc(e['message'])}"
            for e in explained[:30]
        ]
        out.append(
            f'<div class="crash"><h3>What only the {"crash" if report.state == "crashed" else "run being under way"}'
            f" explains (not violations)</h3><ul>{''.join(f'<li>{i}</li>' for i in items)}</ul>"
            + _cut(len(explained), min(30, len(explained)), "explained items")
            + "</div>"
        )
    out.append("</section>")
    return "".join(out)


# ------------------------------------------------------------------ timelines


def legend() -> str:
    items = "".join(f'<span class="key"><i class="{klass(c)}"></i>{esc(c)}</span>' for c in CLASS_COLOURS)
    return (
        f'<p class="legend">{items}<span class="key"><i class="c-ok p-rerun"></i>a rerun (pass &gt; 0; '
        'an arc links it to the attempt it replaced)</span><span class="key"><i class="pause"></i>paused</span>'
        '<span class="key"><i class="stopline"></i>trigger, stop, ceiling</span></p>'
    )


def timelines(view: RunView, axis: Axis, tallies: dict[str, Any], ceiling_t: float | None) -> tuple[str, list[str]]:
    """The timeline section, and the attempts' JSON scripts for the hover."""
    out = [
        '<section id="timeline"><h2>Lanes over time</h2>',
        legend(),
        "<p>Each bar is an attempt on its lane from its start to its end, coloured by its class; hover one "
        "for its record's fields and a link to its record file. Times are seconds since the run began.</p>",
    ]
    scripts = []
    for mv in view.models.values():
        counts = Counter(str(a.get("class")) for a in mv.attempts)
        verified = (tallies.get(mv.name) or {}).get("attempts")
        agree = verified is not None and dict(counts) == verified
        out.append(
            f'<div class="model" data-model="{esc(mv.name)}"><h3>{esc(mv.name)}</h3>'
            f'<p class="counts" data-attempts="{len(mv.attempts)}">{len(mv.attempts)} attempt lines: '
            + ", ".join(
                f'<span class="n {klass(c)}" data-class="{esc(c)}" data-n="{n}">{esc(c)} {n}</span>'
                for c, n in counts.most_common()
            )
            + "</p>"
        )
        if verified is not None and not agree:
            out.append(
                f'<p class="warn disagree">verify counted other numbers among the chain-valid lines of '
                f"the ended households: {esc(', '.join(f'{c} {n}' for c, n in sorted(verified.items())))}"
                "; the verdict above says why.</p>"
            )
        svg, data, note = timeline(mv, axis, view.run_events, ceiling_t)
        if note:
            out.append(f'<p class="note aggregated">{esc(note)}</p>')
        out.append(f'<div class="scroll">{svg}</div></div>')
        if data is not None:
            scripts.append(
                f'<script type="application/json" class="attempts" data-model="{esc(mv.name)}">{data}</script>'
            )
    out.append("</section>")
    return "".join(out), scripts


# ------------------------------------------------------------------ spend


def _cumulative(events: list[tuple[float, int]]) -> list[tuple[float, float]]:
    total, pts = 0, []
    for t, c in sorted(events):
        total += c
        pts.append((t, total / NUSD))
    return pts


def spend(view: RunView, axis: Axis, ceiling: dict[str, Any] | None, report: Report | None = None) -> str:
    """Cumulative spend: the run's total against the overall cap and the
    ceiling (its crossing and late costs marked), then each model's against its cap."""
    per_model: dict[str, list[tuple[float, int]]] = {}
    late_marks = []
    for mv in view.models.values():
        evs = [
            (a["end"], a["cost_nusd"])
            for a in mv.attempts
            if type(a.get("end")) in (int, float) and type(a.get("cost_nusd")) is int
        ]
        for lc in mv.events("late-cost"):
            if type(lc.get("t")) in (int, float) and type(lc.get("cost_nusd")) is int:
                evs.append((lc["t"], lc["cost_nusd"]))
                late_marks.append((mv.name, lc))
        for c in mv.events("continuation"):  # the crash's lost costs, at the crash
            if type(c.get("crash_t")) in (int, float) and type(c.get("lost_nusd")) is int and c["lost_nusd"]:
                evs.append((c["crash_t"], c["lost_nusd"]))
        per_model[mv.name] = evs
    before = view.spend_before_nusd
    all_evs = [e for evs in per_model.values() for e in evs]
    t0 = axis.t0
    total_pts = [(t0, before / NUSD)] + [(t, v + before / NUSD) for t, v in _cumulative(all_evs)]
    levels = []
    if view.overall_cap_nusd is not None:
        levels.append(("overall cap", "#555", view.overall_cap_nusd / NUSD))
    if view.ceiling_nusd is not None:
        levels.append(("ceiling", "#c62828", view.ceiling_nusd / NUSD))
    marks = []
    if ceiling is not None:
        marks.append(
            (
                "ceiling",
                ceiling["t"],
                ceiling.get("total_nusd", 0) / NUSD,
                f"ceiling crossed: total {usd(ceiling.get('total_nusd'))} over {usd(ceiling.get('ceiling_nusd'))}",
            )
        )
    for name, lc in late_marks:
        v = max((v for t, v in total_pts if t <= lc["t"]), default=0.0)
        marks.append(
            (
                "late",
                lc["t"],
                v,
                f"late cost of {name} {lc.get('household')}/{lc.get('arm')} pass "
                f"{lc.get('pass')}: {usd(lc.get('cost_nusd'))}",
            )
        )
    money = {name: model_money(view.models[name]) for name in per_model}
    run = sum(money.values(), Spend())
    total = before + run.total_nusd
    tainted = (
        '<p class="warn tainted">These figures are read from records that FAIL verify (invariants '
        f"{esc(', '.join(map(str, sorted(report.failed()))))}): they are what the changed records say, "
        "not what was spent.</p>"
        if report is not None and not report.ok
        else ""
    )
    close = next((o for o in reversed(view.run_events) if o.get("event") == "close"), None)
    said = close.get("spend_total_nusd") if close is not None else None
    differs = (
        f'<p class="warn close-differs">The close line says {usd(said)}; its lines add up to {usd(total)}.</p>'
        if said is not None and said != total
        else ""
    )
    parts = [
        ("recorded", "attempts of the households that ended", run.recorded_nusd),
        ("late", "late costs", run.late_nusd),
        ("lost", "lost with the attempts a crash killed (continuations' lost_nusd)", run.lost_nusd),
        ("in-flight", "journaled for households not ended yet (the spend journal)", run.in_flight_nusd),
        ("before", "spent before this stage", before),
    ]
    out = [
        '<section id="spend"><h2>Spend</h2>',
        tainted,
        f'<p>Total spent: <b class="total" data-nusd="{total}">{usd(total)}</b> of the ceiling '
        f"{usd(view.ceiling_nusd)} (overall cap {usd(view.overall_cap_nusd)}), counted as verify and "
        "<code>show</code> count it: "
        + " + ".join(
            f'<span class="part" data-part="{k}" data-nusd="{v}">{what} {usd(v)}</span>' for k, what, v in parts
        )
        + f". {len(late_marks)} late cost(s), marked. Dollars are nano-dollars rounded half up to the "
        "micro-dollar.</p>",
        differs,
        cost_disagreements(report),
        line_chart("spend-total", axis, [("run total", "#000", total_pts)], levels, marks, unit="usd", model="total"),
    ]
    rows = []
    for name in per_model:
        mv = view.models[name]
        cap, m = mv.cap_nusd, money[name]
        own = m.total_nusd
        rows.append(
            f'<tr data-model="{esc(name)}"><td>{esc(name)}</td><td class="num" data-nusd="{own}">{usd(own)}</td>'
            + "".join(
                f'<td class="num" data-part="{k}">{usd(v)}</td>'
                for k, v in (
                    ("recorded", m.recorded_nusd),
                    ("late", m.late_nusd),
                    ("lost", m.lost_nusd),
                    ("in-flight", m.in_flight_nusd),
                )
            )
            + f'<td class="num">{usd(cap)}</td><td class="num">'
            f"{'' if not cap else f'{100 * own / cap:.1f} %'}</td></tr>"
        )
    out.append(
        '<div class="scroll" data-scrolls="table">'
        + _table(["model", "spent", "recorded", "late", "lost", "in flight", "cap", "of its cap"], rows, "spend")
        + "</div>"
    )
    for i, (name, evs) in enumerate(per_model.items()):
        cap = view.models[name].cap_nusd
        colour = MODEL_COLOURS[i % len(MODEL_COLOURS)]
        pts = [(t0, 0.0)] + _cumulative(evs)
        lv = [("cap", "#555", cap / NUSD)] if cap is not None else []
        out.append(
            f"<h3>{esc(name)}</h3>"
            + line_chart("spend-model", axis, [(name, colour, pts)], lv, [], unit="usd", height=110, model=name)
        )
    out.append("</section>")
    return "".join(out)


def cost_disagreements(report: Report | None, shown: int = 10) -> str:
    """The calls where litellm's cost differs from the runner's (verify's
    listing, ``figures["cost_disagreements"]``): a line in the spend section,
    never a violation (the spend counts the runner's cost)."""
    listing = ((report.figures or {}) if report is not None else {}).get("cost_disagreements")
    if not isinstance(listing, dict):
        return ""
    n = listing.get("count", 0)
    if not n:
        return (
            '<p class="cost-disagreements" data-count="0">litellm\'s cost agrees with the runner\'s '
            "(within 1 %) on every call.</p>"
        )
    rows = [
        f"<tr><td><code>{esc(c['where'])}</code></td><td><code>{esc(c['record'])}</code> call {c['call']}</td>"
        f'<td class="num">{usd(c["runner_nusd"])}</td><td class="num">'
        f"{'none' if c['litellm_nusd'] is None else usd(c['litellm_nusd'])}</td></tr>"
        for c in listing.get("calls", [])[:shown]
    ]
    return (
        f'<div class="cost-disagreements" data-count="{n}"><p class="warn">{n} call(s) where litellm\'s cost '
        "differs from the runner's by more than 1 % (or litellm gave none): not a violation, the spend counts "
        "the runner's cost (usage by kind times the model's frozen prices); litellm's price map is the one "
        "to doubt.</p>"
        + _table(["attempt line", "call", "runner", "litellm"], rows, "disagreements")
        + _cut(n, min(n, shown), "calls")
        + "</div>"
    )


# ------------------------------------------------------------------ admission


def admission(view: RunView) -> str:
    out = [
        '<section id="admission"><h2>Admission</h2><p>A household is admitted iff finished + reserve &times; '
        "(under way + 1) &le; cap. Each decision with what it saw:</p>"
    ]
    t0 = view.span()[0]
    for mv in view.models.values():
        ds = sorted(mv.decisions, key=lambda d: cast(float, d.get("t")) if type(d.get("t")) in (int, float) else 0)
        admitted = sum(1 for d in ds if d.get("admit") is True)
        refused = len(ds) - admitted
        shown = [d for d in ds if d.get("admit") is not True][:SHOWN]
        shown = sorted(
            shown + [d for d in ds if d.get("admit") is True][: max(0, SHOWN - len(shown))],
            key=lambda d: cast(float, d.get("t")) if type(d.get("t")) in (int, float) else 0,
        )
        rows = []
        for d in shown:
            seen: list[Any] = [d.get(k) for k in ("finished_nusd", "reserve_nusd", "under_way", "cap_nusd")]
            lhs = (seen[0] + seen[1] * (seen[2] + 1)) if all(type(v) is int for v in seen) else None
            rows.append(
                f'<tr class="{"admit" if d.get("admit") is True else "refuse"}" data-household="{esc(d.get("household"))}">'
                f'<td class="num">{rel_t(d.get("t"), t0)}</td><td>{esc(d.get("lane"))}</td>'
                f"<td>{esc(d.get('household'))}</td><td>{'admitted' if d.get('admit') is True else 'REFUSED'}</td>"
                f'<td class="num">{usd(seen[0])}</td><td class="num">{esc(seen[2])}</td>'
                f'<td class="num">{usd(seen[1])}</td><td class="num">{usd(lhs)}</td><td class="num">{usd(seen[3])}</td></tr>'
            )
        out.append(
            f'<h3>{esc(mv.name)}</h3><p class="admission-counts" data-model="{esc(mv.name)}" '
            f'data-admitted="{admitted}" data-refused="{refused}">{len(ds)} decisions: {admitted} admitted, '
            f"{refused} refused.</p>"
            + _table(
                [
                    "t",
                    "lane",
                    "household",
                    "decision",
                    "finished",
                    "under way",
                    "reserve",
                    "finished + reserve × (under way + 1)",
                    "cap",
                ],
                rows,
                "admission",
            )
            + _cut(len(ds), len(shown), "decisions (every refusal first, then the earliest admissions)")
        )
    out.append("</section>")
    return "".join(out)


# ------------------------------------------------------------------ results


def results(view: RunView, tallies: dict[str, Any]) -> str:
    """Arm results, attempts and reruns by class per model: verify's own counts."""
    if not tallies:
        return (
            '<section id="results"><h2>Arm results by class</h2><p class="warn">verify counted nothing '
            "(see the verdict).</p></section>"
        )
    classes = [
        c
        for c in CLASS_COLOURS
        if any(c in (t.get(k) or {}) for t in tallies.values() for k in ("results", "attempts", "reruns"))
    ]
    classes += sorted(
        {
            c
            for t in tallies.values()
            for k in ("results", "attempts", "reruns")
            for c in (t.get(k) or {})
            if c not in CLASS_COLOURS
        }
    )

    def table(key: str, cls: str, label: str) -> str:
        rows = []
        for m, t in tallies.items():
            counts = t.get(key) or {}
            cells = "".join(
                f'<td class="num" data-class="{esc(c)}" data-n="{counts.get(c, 0)}">{counts.get(c, 0) or ""}</td>'
                for c in classes
            )
            rows.append(
                f'<tr data-model="{esc(m)}"><td>{esc(m)}</td><td class="num total" '
                f'data-n="{sum(counts.values())}">{sum(counts.values())}</td>{cells}</tr>'
            )
        return _table(["model", label, *classes], rows, cls)

    return (
        '<section id="results"><h2>Arm results by class</h2>'
        "<p>Counted by verify on the chain-valid lines of each model's ended households. An arm result is "
        "the class of the last attempt of a household's arm (as the runner's end summary says it).</p>"
        + table("results", "results", "arm results")
        + "<h3>Reruns by class</h3><p>Each rerun (an attempt of pass &gt; 0) counted under the class of the "
        "attempt of its arm it replaced (an operator pause's resumed attempt included).</p>"
        + table("reruns", "reruns", "reruns")
        + "<h3>Attempts by class</h3>"
        + table("attempts", "attempts", "attempts")
        + _table(
            ["model", "households ended", "of them unfinished"],
            [
                f'<tr data-model="{esc(m)}"><td>{esc(m)}</td><td class="num">{t.get("households")}</td>'
                f'<td class="num">{t.get("unfinished")}</td></tr>'
                for m, t in tallies.items()
            ],
            "households",
        )
        + "</section>"
    )
