"""The reviewer's page: one self-contained HTML file of a run.

Owns `build_page` (verify's report, computed now by verify's own code, and
the records read by `data.read_run`, made into one page: style and script
inline, charts as inline SVG, a Content-Security-Policy that forbids every
request) and `write_report` (the file written beside the run directory,
never inside it). Links on the page are relative paths to the run's record
files, or anchors within the page: no URL names a scheme or a host.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confirmatory.report import evidence, sections
from confirmatory.report.charts import CLASS_COLOURS, Axis, esc
from confirmatory.report.data import RunView, read_run

# No request may leave the page: nothing is fetched, not even from the page's own folder.
CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
    "font-src 'none'; connect-src 'none'; frame-src 'none'; base-uri 'none'; form-action 'none'"
)

STYLE = (
    """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 24px 48px;color:#1b1b1b;background:#fff}
h1{font-size:22px;margin:18px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:16px 0 6px}code{font:12px/1.3 ui-monospace,monospace;white-space:pre-wrap}
nav a{margin-right:12px}table{border-collapse:collapse;margin:6px 0}
table.anchors{max-width:100%}table.anchors td{overflow-wrap:anywhere}ul.proof{margin:0;padding-left:16px}
@media (max-width:700px){table.anchors,table.anchors tbody,table.anchors tr,table.anchors td{display:block}
table.anchors thead{display:none}table.anchors tr{border:1px solid #ddd;margin:6px 0}table.anchors td{border:0}
table.anchors td::before{content:attr(data-label) ": ";font-weight:bold}table.anchors td.num{text-align:left}}td,th{border:1px solid #ddd;padding:2px 6px;
vertical-align:top;text-align:left}th{background:#f4f4f4}.num{text-align:right;font-variant-numeric:tabular-nums}
.verdict{padding:10px 16px;border-radius:6px;margin-top:12px;border:2px solid}.verdict .banner{border:0;margin:4px 0;font-size:24px}
.verdict.ok{background:#e8f5e9;border-color:#2e7d32}.verdict.ok .banner{color:#1b5e20}
.verdict.failed{background:#ffebee;border-color:#c62828}.verdict.failed .banner{color:#b71c1c}
.verdict.incomplete{background:#fff8e1;border-color:#f9a825}.verdict.incomplete .banner{color:#8d6e00}
tr.s-fail td.status,tr.s-unanchored td.status{color:#b71c1c;font-weight:bold}tr.s-pass td.status{color:#1b5e20}
.callout{border-left:6px solid #f9a825;background:#fffde7;padding:4px 12px;margin:8px 0}
.callout.confounds{border-color:#ef6c00}.warn{color:#b71c1c;font-weight:bold}.cut,.note{color:#555;font-style:italic}
td.no{color:#b71c1c;font-weight:bold}td.yes{color:#1b5e20}tr.refuse td{background:#ffebee}
.scroll{overflow-x:auto}svg{display:block;font-size:10px}svg text{fill:#333}.grid{stroke:#eee}.tick{fill:#777}
.lane-bg{fill:#fafafa}.lane-label{text-anchor:end}rect.a{stroke:#fff;stroke-width:.5}rect.a:hover{stroke:#000;stroke-width:1.5}
rect.p-rerun,i.p-rerun{stroke:#000 !important;stroke-width:1;stroke-dasharray:2 1}
path.rerun{fill:none;stroke:#000;stroke-width:.7;opacity:.55}
.m-pause rect{fill:#f9a825;opacity:.18}.m-pause text{fill:#8d6e00}.marker line{stroke-width:1.5}
.m-stop line,.m-trigger line{stroke:#c62828}.m-stop text,.m-trigger text{fill:#c62828}
.m-ceiling line{stroke:#b71c1c;stroke-width:3;stroke-dasharray:6 3}.m-ceiling text{fill:#b71c1c;font-weight:bold}
.m-resume line{stroke:#2e7d32}.m-resume-refused line{stroke:#9e9e9e;stroke-dasharray:3 2}.m-lane-end path{fill:#555}
.level line{stroke-dasharray:5 3}.band{fill:#c62828;opacity:.15;stroke:#c62828;stroke-width:.5}
.mark path{fill:#c62828}.mark line{stroke:#c62828;stroke-dasharray:2 2}.m-evidence path{fill:#8e24aa}
.anchor circle{fill:#1565c0}.anchor.final circle{fill:#fff;stroke:#1565c0;stroke-width:3}.push.ok rect{fill:#2e7d32}
.push.failed rect{fill:#c62828}.legend .key{margin-right:12px;white-space:nowrap}
.legend i{display:inline-block;width:14px;height:10px;margin-right:4px;vertical-align:middle;border:1px solid #fff}
.legend i.pause{background:#f9a825;opacity:.4}.legend i.stopline{background:#c62828;width:3px}
#tip{position:fixed;display:none;background:#fff;border:1px solid #333;padding:6px 8px;box-shadow:2px 2px 6px #0004;
max-width:460px;z-index:5;font-size:12px}#tip table td{border:0;padding:0 6px 0 0}
"""
    + "".join(
        f".c-{c}{{fill:{v};background:{v}}}span.n.c-{c}{{background:none;color:{v};font-weight:bold}}"
        for c, v in CLASS_COLOURS.items()
    )
    + ".c-other{fill:#000;background:#000}"
)

# The hover: an attempt's fields from its model's JSON, and a relative link to its record file.
SCRIPT = r"""
(function () {
  var body = document.body;
  try {
    var tip = document.getElementById('tip'), data = {}, t0 = parseFloat(body.dataset.t0);
    document.querySelectorAll('script.attempts').forEach(function (s) {
      data[s.dataset.model] = JSON.parse(s.textContent);
    });
    var names = ['lane', 'household', 'arm', 'pass', 'start', 'end', 'cost', 'class', 'action', 'signature'];
    function row(k, v) {
      var tr = document.createElement('tr'), a = document.createElement('td'), b = document.createElement('td');
      a.textContent = k; b.textContent = v; tr.appendChild(a); tr.appendChild(b); return tr;
    }
    function show(ev) {
      var r = ev.target;
      if (!r.classList || !r.classList.contains('a')) return;
      showAttempt(r, ev.clientX, ev.clientY);
    }
    function showAttempt(r, x, y) {
      var model = r.closest('svg').dataset.model, a = (data[model] || [])[+r.dataset.i];
      if (!a) return;
      tip.textContent = '';
      var h = document.createElement('b'); h.textContent = model; tip.appendChild(h);
      var tb = document.createElement('table');
      for (var i = 0; i < names.length; i++) {
        var v = a[i];
        if (names[i] === 'start' || names[i] === 'end') v = (v - t0).toFixed(3) + ' s';
        if (names[i] === 'cost' && typeof v === 'number') {  // half up to the micro-dollar, as format_usd
          var micro = Math.floor((v + 500) / 1000);
          v = '$' + Math.floor(micro / 1e6) + '.' + String(micro % 1e6).padStart(6, '0');
        }
        tb.appendChild(row(names[i], v === null ? 'none' : String(v)));
      }
      tip.appendChild(tb);
      if (typeof a[10] === 'string' && a[10].indexOf('..') < 0 && a[10].indexOf(':') < 0) {
        var link = document.createElement('a');
        link.href = [body.dataset.runHref, 'models', model, a[10]].filter(Boolean).join('/');
        link.textContent = 'record: ' + a[10]; link.className = 'record'; tip.appendChild(link);
      }
      tip.style.left = Math.max(0, Math.min(x + 12, window.innerWidth - 470)) + 'px';
      tip.style.top = (y + 12) + 'px';
      tip.style.display = 'block';
      tip.dataset.model = model; tip.dataset.i = r.dataset.i;
    }
    document.addEventListener('mouseover', show);
    // #attempt=MODEL:I opens attempt I of MODEL's timeline as its hover does (a link to one attempt)
    var m = /^#attempt=(.+):(\d+)$/.exec(decodeURIComponent(location.hash));
    if (m) {
      var svg = document.querySelector('svg.timeline[data-model="' + CSS.escape(m[1]) + '"]');
      var r = svg && svg.querySelector('rect.a[data-i="' + m[2] + '"]');
      if (r) { r.scrollIntoView(); var b = r.getBoundingClientRect(); showAttempt(r, b.left, b.bottom); }
    }
    document.addEventListener('keydown', function (e) { if (e.key === 'Escape') tip.style.display = 'none'; });
    body.dataset.js = 'ready';
  } catch (err) {
    body.dataset.js = 'error: ' + err;
  }
})();
"""


def _section(name: str, fn: Callable[..., str], *args: Any) -> str:
    """A section's HTML; if the records hold what it did not foresee, a line saying
    so in its place (the rest of the page, the verdict first, is still shown)."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - one section lost, never the page
        return _broken(name, exc)


def _broken(name: str, exc: Exception) -> str:
    return (
        f'<section class="broken"><h2>{esc(name)}</h2><p class="warn">This section could not be drawn '
        f"from the records: {esc(type(exc).__name__)}: {esc(exc)}</p></section>"
    )


def _utc(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def build_page(
    run_dir: Path, out_file: Path, *, witness: Path | None = None, households: Path | None = None
) -> tuple[str, dict[str, float]]:
    """The page's HTML, and what building it took (seconds per step)."""
    from confirmatory.verify import verify_run  # noqa: PLC0415

    times: dict[str, float] = {}
    start = time.perf_counter()
    report, problem = None, None
    try:
        report = verify_run(run_dir, witness=witness, households=households)
    except Exception as exc:  # noqa: BLE001 - the page says verify could not run, and why
        problem = f"{type(exc).__name__}: {exc}"
    times["verify_s"] = time.perf_counter() - start
    start = time.perf_counter()
    view: RunView = read_run(run_dir)
    times["read_s"] = time.perf_counter() - start
    start = time.perf_counter()
    t0, t1 = view.span()
    axis = Axis(t0, t1)
    tallies = (report.tallies or {}) if report is not None else {}
    ceilings = [o for o in view.run_events if o.get("event") == "ceiling" and type(o.get("t")) in (int, float)]
    ceiling = min(ceilings, key=lambda o: o["t"]) if ceilings else None
    try:
        timeline_html, scripts = sections.timelines(view, axis, tallies, ceiling["t"] if ceiling else None)
    except Exception as exc:  # noqa: BLE001 - one section lost, never the page
        timeline_html, scripts = _broken("Lanes over time", exc), []
    href = evidence.record_href(run_dir, out_file)
    run_id = view.manifest.get("run_id") or Path(run_dir).name
    unread = "".join(f"<li>{esc(rel)}: {esc(p)}</li>" for rel, p in sorted(view.unread.items()))
    npd = (view.config or {}).get("not_pinned_down") or []
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>confirmatory report: {esc(run_id)}</title><style>{STYLE}</style></head>",
        f'<body data-t0="{t0!r}" data-run-href="{esc(href)}" data-js="off">',
        f"<h1>confirmatory report: {esc(run_id)}</h1>",
        f"<p>Run directory <code>{esc(run_dir)}</code>; began {_utc(t0)}, last line {_utc(t1)} "
        f"({t1 - t0:.1f} s). Models: {esc(', '.join(view.models))}. "
        f'<a href="#config">{len(npd)} thing(s) not pinned down</a>.</p>',
        '<nav><a href="#verdict">verdict</a><a href="#timeline">lanes</a><a href="#spend">spend</a>'
        '<a href="#admission">admission</a><a href="#results">results by class</a><a href="#host">host</a>'
        '<a href="#anchors">anchors</a><a href="#config">pinned down</a></nav>',
        sections.verdict(report, problem, view),
        (
            f'<div class="warn unread">What the page could not read (it shows the rest):<ul>{unread}</ul></div>'
            if unread
            else ""
        ),
        timeline_html,
        _section("Spend", sections.spend, view, axis, ceiling, report),
        _section("Admission", sections.admission, view),
        _section("Arm results by class", sections.results, view, tallies),
        _section("Host evidence", evidence.host, view, axis, href),
        _section("Anchors", evidence.anchors, view, axis, report),
        _section("Configuration", evidence.config, view),
        '<div id="tip" role="tooltip"></div>',
        *scripts,
        f"<script>{SCRIPT}</script>",
        f'<p class="note">Made by confirmatory report at {_utc(time.time())}; verify was run now on the run '
        "directory (its code, not the runner's). Nothing on this page is fetched.</p></body></html>",
    ]
    times["render_s"] = time.perf_counter() - start
    return "\n".join(parts), times


def default_out(run_dir: Path) -> Path:
    """``<RUN_DIR>.report.html`` beside the run directory."""
    root = Path(os.path.abspath(run_dir))
    return root.parent / f"{root.name}.report.html"


def inside(path: Path, run_dir: Path) -> bool:
    p, r = Path(os.path.realpath(path)), Path(os.path.realpath(run_dir))
    return p == r or r in p.parents


def write_report(
    run_dir: Path, out: Path | None = None, *, witness: Path | None = None, households: Path | None = None
) -> tuple[Path, dict[str, float]]:
    """Build the page and write it (to a temporary name, then renamed)."""
    out = Path(out) if out is not None else default_out(run_dir)
    html, times = build_page(Path(run_dir), out, witness=witness, households=households)
    data = html.encode("utf-8")
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, out)
    times["bytes"] = len(data)
    return out, times


__all__ = ["build_page", "write_report", "default_out", "inside"]
