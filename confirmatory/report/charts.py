"""The page's pictures, as SVG text made here (no chart library, nothing fetched).

Owns the time axis shared by every chart of a page (`Axis`), the lane
timeline of a model (`timeline`: each attempt a bar, or past `BAR_CAP`
attempts a model's lanes in time bins stacked by class), the spend charts
(`spend_chart`), the host chart (`host_chart`) and the anchors strip
(`anchors_strip`). Every number drawn is passed in from the records; every
text is escaped. Elements carry classes and ``data-`` attributes that say
what they stand for (a test reads them from the rendered page).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from html import escape
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from confirmatory.report.data import ModelView

# The classes of core.rules.Cls, each with its colour (and one for a class the rules do not know).
CLASS_COLOURS = {
    "ok": "#2e7d32",
    "model": "#ef6c00",
    "provider": "#1565c0",
    "host": "#8e24aa",
    "operator": "#f9a825",
    "harness": "#c62828",
    "stopped": "#616161",
    "inconclusive": "#00838f",
}
OTHER_COLOUR = "#000000"
MODEL_COLOURS = ("#1565c0", "#ef6c00", "#2e7d32", "#8e24aa", "#c62828", "#00838f", "#6d4c41", "#546e7a")

BAR_CAP = 3000  # a model with more attempts is drawn in time bins (said on the page)
BINS = 400  # time bins of an aggregated lane
POINTS_CAP = 600  # a line drawn with more points is thinned to its value at each of this many x positions
LEFT = 110  # the label gutter
WIDTH = 1000  # the plot's width
ROW = 20  # one lane's height


def klass(cls: object) -> str:
    """A CSS class for an attempt class (one of the rules' or "other")."""
    return f"c-{cls}" if cls in CLASS_COLOURS else "c-other"


def esc(v: object) -> str:
    return escape(str(v), quote=True)


class Axis:
    """Run times to x positions: ``t0`` at LEFT, ``t1`` at LEFT + WIDTH."""

    def __init__(self, t0: float, t1: float) -> None:
        self.t0, self.t1 = t0, t1
        self.k = WIDTH / (t1 - t0)

    def x(self, t: float) -> float:
        return round(LEFT + (t - self.t0) * self.k, 1)

    def ticks(self, top: float, bottom: float) -> str:
        """Grid lines and their labels (seconds, minutes or hours since t0)."""
        span = self.t1 - self.t0
        step = next(
            (
                s
                for s in (
                    0.1,
                    0.2,
                    0.5,
                    1,
                    2,
                    5,
                    10,
                    15,
                    30,
                    60,
                    120,
                    300,
                    600,
                    900,
                    1800,
                    3600,
                    7200,
                    14400,
                    21600,
                    43200,
                    86400,
                )
                if span / s <= 10
            ),
            86400 * max(1, int(span / 864000)),
        )
        out = []
        k = 0
        while k * step <= span + 1e-9:
            x = self.x(self.t0 + k * step)
            out.append(
                f'<line class="grid" x1="{x}" x2="{x}" y1="{top}" y2="{bottom}"/>'
                f'<text class="tick" x="{x}" y="{bottom + 12}">{_dur(k * step)}</text>'
            )
            k += 1
        return "".join(out)


def _dur(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:g} h"
    if s >= 60:
        return f"{s / 60:g} min"
    return f"{round(s, 1):g} s"


def _svg(cls: str, height: float, body: str, **data: object) -> str:
    attrs = "".join(f' data-{k.replace("_", "-")}="{esc(v)}"' for k, v in data.items())
    w = LEFT + WIDTH + 20
    return (
        f'<svg class="{cls}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {height}" '
        f'width="{w}" height="{height}"{attrs}>{body}</svg>'
    )


def _num(v: object) -> float | None:
    return float(v) if type(v) in (int, float) and v == v else None  # type: ignore[arg-type]


def timeline(
    mv: ModelView, axis: Axis, run_events: list[dict[str, Any]], ceiling_t: float | None
) -> tuple[str, str | None, str]:
    """A model's lane timeline: (svg, the attempts' JSON for the hover, a note).

    One ``g.lane`` per lane of the model; each attempt a ``rect.a`` (class
    ``c-<class>``, ``p-rerun`` for a pass > 0, ``data-i`` its index in the
    JSON), each rerun a ``path.rerun`` from the attempt it replaced; past
    BAR_CAP attempts, ``rect.bin`` per lane and time bin, stacked by class,
    with its counts in its title. Markers (``g.marker``, ``data-t``): pauses,
    resumes, triggers, stops, the ceiling's crossing, lane ends."""
    lanes = mv.lanes
    index = {lane: i for i, lane in enumerate(lanes)}
    attempts = [
        a
        for a in mv.attempts
        if _num(a.get("start")) is not None and _num(a.get("end")) is not None and a.get("lane") in index
    ]
    top = 38
    aggregated = len(attempts) > BAR_CAP
    row = 2 * ROW if aggregated else ROW  # a lane of stacked bins is drawn taller
    height = top + row * max(1, len(lanes)) + 30
    bottom = top + row * max(1, len(lanes))
    body = [axis.ticks(top, bottom)]
    bars: dict[int, list[str]] = {i: [] for i in index.values()}
    data = None
    note = ""
    if not aggregated:
        rows_json: list[list[Any]] = []
        by_arm: dict[tuple[Any, Any], tuple[float, float]] = {}
        order = sorted(range(len(attempts)), key=lambda i: (attempts[i]["start"], attempts[i].get("pass", 0)))
        links = []
        for i in order:
            a = attempts[i]
            li = index[a["lane"]]
            y: float = top + li * ROW + 2
            x0, x1 = axis.x(a["start"]), axis.x(a["end"])
            p = a.get("pass")
            cls = klass(a.get("class")) + (" p-rerun" if type(p) is int and p > 0 else "")
            bars[li].append(
                f'<rect class="a {cls}" data-i="{len(rows_json)}" x="{x0}" y="{y}" '
                f'width="{max(1.0, round(x1 - x0, 1))}" height="{ROW - 6}"/>'
            )
            key = (a.get("household"), a.get("arm"))
            if type(p) is int and p > 0 and key in by_arm:
                px, py = by_arm[key]
                mid = round((px + x0) / 2, 1)
                links.append(
                    f'<path class="rerun" data-i="{len(rows_json)}" d="M{px} {py} Q{mid} {py - 10} {x0} {y}"/>'
                )
            by_arm[key] = (x1, y)
            rows_json.append(
                [
                    a.get("lane"),
                    a.get("household"),
                    a.get("arm"),
                    p,
                    a.get("start"),
                    a.get("end"),
                    a.get("cost_nusd"),
                    a.get("class"),
                    a.get("action"),
                    a.get("signature"),
                    a.get("record"),
                ]
            )
        body.append(_lanes(lanes, top, bars, row))
        body.append("".join(links))
        # inside a script element: no "<" at all (no "</script>", no "<!--"); JSON reads \u003c as "<"
        data = json.dumps(rows_json, separators=(",", ":"), ensure_ascii=True).replace("<", "\\u003c")
    else:
        span = (axis.t1 - axis.t0) / BINS
        counts: dict[tuple[int, int], Counter[Any]] = {}
        for a in attempts:
            b = min(BINS - 1, max(0, int((a["start"] - axis.t0) / span)))
            counts.setdefault((index[a["lane"]], b), Counter())[a.get("class")] += 1
        peak = max((sum(c.values()) for c in counts.values()), default=1)
        bw = round(WIDTH / BINS, 2)
        for (li, b), c in sorted(counts.items()):
            x = round(LEFT + b * bw, 1)
            y = top + li * row + row - 2
            total = sum(c.values())
            h_all = max(2.0, (row - 4) * total / peak)
            title = esc(
                f"lane {lanes[li]}, {_dur(b * span)} to {_dur((b + 1) * span)}: {total} attempts: "
                + ", ".join(f"{k} {n}" for k, n in c.most_common())
            )
            for cls_name, n in sorted(c.items(), key=lambda kv: str(kv[0])):
                h = round(h_all * n / total, 2)
                y -= h
                bars[li].append(
                    f'<rect class="bin {klass(cls_name)}" data-n="{n}" x="{x}" y="{round(y, 2)}" '
                    f'width="{bw}" height="{h}"><title>{title}</title></rect>'
                )
        body.append(_lanes(lanes, top, bars, row))
        note = (
            f"{len(attempts)} attempts: more than {BAR_CAP}, so each lane is drawn in {BINS} time bins, "
            "each a column stacked by class (its height: the bin's attempts, against the busiest bin); "
            "hover a bin for its counts. Rerun links are not drawn."
        )
    body.append(markers(mv, axis, run_events, ceiling_t, top, bottom, index, row))
    svg = _svg(
        "timeline",
        height,
        "".join(body),
        model=mv.name,
        t0=axis.t0,
        t1=axis.t1,
        lanes=len(lanes),
        aggregated=int(aggregated),
    )
    return svg, data, note


def _lanes(lanes: list[int], top: float, bars: dict[int, list[str]], row: int) -> str:
    out = []
    for i, lane in enumerate(lanes):
        y = top + i * row
        out.append(
            f'<g class="lane" data-lane="{esc(lane)}"><rect class="lane-bg" x="{LEFT}" y="{y}" '
            f'width="{WIDTH}" height="{row - 2}"/><text class="lane-label" x="{LEFT - 6}" '
            f'y="{y + row / 2 + 3}">lane {esc(lane)}</text>{"".join(bars[i])}</g>'
        )
    return "".join(out)


def markers(
    mv: ModelView,
    axis: Axis,
    run_events: list[dict[str, Any]],
    ceiling_t: float | None,
    top: float,
    bottom: float,
    index: dict[int, int],
    row: int = ROW,
) -> str:
    out = []
    placed: list[list[float]] = [[], [], []]  # the x of the labels on each of three rows above the lanes

    def label_y(x: float) -> float:
        """The lowest row whose labels leave room at ``x`` (labels of markers close in time stack up)."""
        row = next((k for k, xs in enumerate(placed) if all(abs(x - o) > 75 for o in xs)), len(placed) - 1)
        placed[row].append(x)
        return top - 4 - 11 * row

    def vline(kind: str, t: float, label: str, title: str) -> None:
        x = axis.x(t)
        y = label_y(x)
        out.append(
            f'<g class="marker m-{kind}" data-t="{t!r}"><line x1="{x}" x2="{x}" y1="{y + 2}" y2="{bottom}"/>'
            f'<text x="{x + 2}" y="{y}">{esc(label)}</text><title>{esc(title)}</title></g>'
        )

    resumes = sorted((o for o in mv.events("resume") if _num(o.get("t")) is not None), key=lambda o: o["t"])
    for p in mv.events("pause"):
        t = _num(p.get("t"))
        if t is None:
            continue
        end = next((r["t"] for r in resumes if r.get("accepted") is True and r["t"] >= t), None)
        x0 = axis.x(t)
        x1 = axis.x(end) if end is not None else LEFT + WIDTH
        y = label_y(x0)
        out.append(
            f'<g class="marker m-pause" data-t="{t!r}" data-until="{"" if end is None else repr(end)}">'
            f'<rect x="{x0}" y="{top}" width="{max(1.0, round(x1 - x0, 1))}" height="{bottom - top}"/>'
            f'<text x="{x0 + 2}" y="{y}">paused</text><title>{esc(_pause_title(p, end))}</title></g>'
        )
    for r in resumes:
        ok = r.get("accepted") is True
        vline(
            "resume" if ok else "resume-refused",
            r["t"],
            "resumed" if ok else "stale resume",
            f"resume request written at {_clock(r.get('request_t'), axis)}: "
            f"{'accepted' if ok else 'not accepted (written before the pause)'}",
        )
    for o in mv.events("trigger"):
        if _num(o.get("t")) is not None:
            vline(
                "trigger",
                o["t"],
                f"trigger: {o.get('cause')}",
                f"trigger {o.get('cause')} by {o.get('household')}/{o.get('arm')} pass {o.get('pass')}",
            )
    for o in mv.events("stop"):
        if _num(o.get("t")) is not None:
            vline("stop", o["t"], f"stop: {o.get('cause')}", f"stop ({o.get('scope')} scope), cause {o.get('cause')}")
    if ceiling_t is not None:
        vline("ceiling", ceiling_t, "ceiling crossed", "the spend ceiling was crossed here (run.jsonl's ceiling line)")
    for o in mv.events("lane-end"):
        t, lane = _num(o.get("t")), o.get("lane")
        if t is None or lane not in index:
            continue
        x, y = axis.x(t), top + index[lane] * row
        out.append(
            f'<g class="marker m-lane-end" data-t="{t!r}" data-lane="{esc(lane)}">'
            f'<path d="M{x} {y} l4 {row / 2 - 1} l-4 {row / 2 - 1} z"/>'
            f"<title>lane {esc(lane)} ended: {esc(o.get('reason'))}</title></g>"
        )
    return "".join(out)


def _clock(t: object, axis: Axis) -> str:
    """A run time as UTC to the second and its place on the chart's axis (never a raw epoch)."""
    import datetime as _dt

    if type(t) not in (int, float) or t != t:
        return escape(str(t))
    when = _dt.datetime.fromtimestamp(float(t), _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # type: ignore[arg-type]
    return f"{when} (+{float(t) - axis.t0:.1f} s)"  # type: ignore[arg-type]


def _pause_title(p: dict[str, Any], end: float | None) -> str:
    what = f"paused for an operator at {p.get('household')}/{p.get('arm')} pass {p.get('pass')}"
    return what + ("; resumed" if end is not None else "; never resumed")


def thin(
    points: list[tuple[float, float]], axis: Axis, how: Callable[[Iterable[float]], float] = max
) -> list[tuple[float, float]]:
    """At most POINTS_CAP points: past it, one per x bin (``how`` of its values; the last time)."""
    if len(points) <= POINTS_CAP:
        return points
    span = (axis.t1 - axis.t0) / POINTS_CAP
    bins: dict[int, list[tuple[float, float]]] = {}
    for t, v in points:
        bins.setdefault(int((t - axis.t0) / span), []).append((t, v))
    return [(b[-1][0], how(v for _, v in b)) for _, b in sorted(bins.items())]


def line_chart(
    cls: str,
    axis: Axis,
    series: list[tuple[str, str, list[tuple[float, float]]]],
    levels: list[tuple[str, str, float]],
    marks: list[tuple[str, float, float, str]],
    *,
    unit: str,
    ymax: float | None = None,
    height: int = 160,
    bands: Sequence[tuple[float, float, str]] = (),
    **data: object,
) -> str:
    """Step lines (``series``: name, colour, (t, value) points), horizontal levels
    (``g.level``: name, colour, value), point marks (``g.mark``: kind, t, value,
    title) and shaded bands (``rect.band``: t0, t1, title)."""
    top, bottom = 14, height - 24
    peak = max([v for _, _, pts in series for _, v in pts] + [v for _, _, v, _ in marks] + [1e-12])
    if ymax is None:
        # a level far above what was reached (a cap four times the spend) is named, not drawn:
        # drawn, it would flatten the line to the chart's floor
        ymax = max([peak] + [v for _, _, v in levels if v <= 4 * peak]) * 1.08
    above = [(name, v) for name, _, v in levels if v > ymax]
    levels = [lv for lv in levels if lv[2] <= ymax]

    def y(v: float) -> float:
        return round(bottom - (bottom - top) * v / ymax, 1)

    body = [
        axis.ticks(top, bottom),
        f'<text class="tick" x="{LEFT - 6}" y="{top + 4}" text-anchor="end">{esc(_fmt(ymax, unit))}</text>',
        f'<text class="tick" x="{LEFT - 6}" y="{bottom}" text-anchor="end">0</text>',
    ]
    if above:
        body.append(
            f'<text class="above" x="{LEFT + 4}" y="{top + 4}">above the chart: '
            + esc(", ".join(f"{name} {_fmt(v, unit)}" for name, v in above))
            + "</text>"
        )
    for t0, t1, title in bands:
        x0, x1 = axis.x(t0), axis.x(t1)
        body.append(
            f'<rect class="band" data-t="{t0!r}" x="{x0}" y="{top}" width="{max(1.0, round(x1 - x0, 1))}" '
            f'height="{bottom - top}"><title>{esc(title)}</title></rect>'
        )
    for name, colour, v in levels:
        body.append(
            f'<g class="level" data-name="{esc(name)}" data-value="{v!r}"><line x1="{LEFT}" x2="{LEFT + WIDTH}" '
            f'y1="{y(v)}" y2="{y(v)}" stroke="{colour}"/><text x="{LEFT + WIDTH - 4}" y="{y(v) - 3}" '
            f'text-anchor="end" fill="{colour}">{esc(name)} {esc(_fmt(v, unit))}</text></g>'
        )
    for name, colour, pts in series:
        pts = thin(pts, axis)
        if not pts:
            continue
        d, last = [], None
        for t, v in pts:
            x = axis.x(t)
            d.append(f"{x},{y(last) if last is not None else y(v)} {x},{y(v)}")
            last = v
        body.append(
            f'<g class="series" data-name="{esc(name)}" data-last="{pts[-1][1]!r}"><polyline fill="none" '
            f'stroke="{colour}" points="{" ".join(d)}"/><title>{esc(name)}: {esc(_fmt(pts[-1][1], unit))} '
            f"at the end</title></g>"
        )
    for kind, t, v, title in marks:
        x = axis.x(t)
        body.append(
            f'<g class="mark m-{esc(kind)}" data-t="{t!r}"><path d="M{x} {y(v) - 7} l-4 -6 h8 z"/>'
            f'<line x1="{x}" x2="{x}" y1="{top}" y2="{bottom}"/><title>{esc(title)}</title></g>'
        )
    return _svg(cls, height, "".join(body), **data)


def _fmt(v: float, unit: str) -> str:
    if unit == "usd":
        return f"${v:,.6f}" if v < 10 else f"${v:,.2f}"
    return f"{v:g}{unit}"


def anchors_strip(axis: Axis, anchors: list[dict[str, Any]], pushes: list[dict[str, Any]]) -> str:
    """Each anchor a dot (``g.anchor``, a final one ringed) and each push a
    tick below it (``g.push``, green when it returned 0, red otherwise)."""
    body = [axis.ticks(10, 56)]
    for a in anchors:
        t = _num(a.get("t"))
        if t is None:
            continue
        x = axis.x(t)
        final = a.get("final") is True
        logs = cast(dict[str, Any], a.get("logs")) if isinstance(a.get("logs"), dict) else {}
        body.append(
            f'<g class="anchor{" final" if final else ""}" data-t="{t!r}" data-seq="{esc(a.get("seq"))}">'
            f'<circle cx="{x}" cy="22" r="{6 if final else 4}"/><title>anchor {esc(a.get("seq"))}'
            f"{' (final)' if final else ''}: {len(logs)} logs</title></g>"
        )
    for p in pushes:
        t = _num(p.get("t"))
        if t is None:
            continue
        x = axis.x(t)
        ok = p.get("rc") == 0
        body.append(
            f'<g class="push {"ok" if ok else "failed"}" data-t="{t!r}" data-rc="{esc(p.get("rc"))}">'
            f'<rect x="{x - 1.5}" y="36" width="3" height="14"/><title>push of anchor '
            f"{esc(p.get('anchor_seq'))}: rc {esc(p.get('rc'))}</title></g>"
        )
    body.append(
        f'<text class="lane-label" x="{LEFT - 6}" y="26">anchors</text>'
        f'<text class="lane-label" x="{LEFT - 6}" y="47">pushes</text>'
    )
    return _svg("anchors", 80, "".join(body))
