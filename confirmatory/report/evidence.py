"""The page's sections on what stands behind the run: host evidence, anchors
and their pushes, and config.json (what was pinned down and what was not).

Host evidence: memory pressure over time against the threshold, the gaps
between samples longer than `max_gap_s` and failed samples shaded, the
outside log lines, and the attempts the evidence made `host`. Anchors: each
anchor and push over time, the pushes' results. config.json: `not_pinned_down`
and `known_confounds` first, then each model's identity and whether it is
sufficient for replication.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any, cast

from confirmatory.report.charts import Axis, anchors_strip, esc, line_chart
from confirmatory.report.sections import SHOWN, _cut, _table, rel_t

if TYPE_CHECKING:
    from confirmatory.report.data import RunView
    from confirmatory.verify.report import Report


def host(view: RunView, axis: Axis, record_href: str) -> str:
    rules = cast(dict[str, Any], view.manifest.get("rules")) if isinstance(view.manifest.get("rules"), dict) else {}
    hr = cast(dict[str, Any], rules.get("host")) if isinstance(rules.get("host"), dict) else {}
    max_gap = hr.get("max_gap_s") if type(hr.get("max_gap_s")) in (int, float) else None
    threshold = hr.get("pressure_threshold") if type(hr.get("pressure_threshold")) in (int, float) else None
    samples = [
        (o["t"], o["mem_pressure"])
        for o in view.host
        if o.get("event") == "sample"
        and type(o.get("t")) in (int, float)
        and type(o.get("mem_pressure")) in (int, float)
    ]
    failed = [o for o in view.host if o.get("event") == "sample-failed"]
    evidence = [o for o in view.host if o.get("event") == "evidence"]
    gaps = []
    if max_gap is not None:
        gaps = [(a[0], b[0]) for a, b in zip(samples, samples[1:]) if b[0] - a[0] > max_gap]
    above = sum(1 for _, v in samples if threshold is not None and v > threshold)
    bands = [(a, b, f"no sample for {b - a:.2f} s (more than max_gap_s {max_gap} s)") for a, b in gaps]
    bands += [(o["t"], o["t"], f"sample failed: {o.get('error')}") for o in failed if type(o.get("t")) in (int, float)]
    marks = [
        ("evidence", o["t"], 0.0, f"{o.get('source')}: {o.get('line')}")
        for o in evidence[:SHOWN]
        if type(o.get("t")) in (int, float)
    ]
    levels = [("pressure threshold", "#c62828", float(threshold))] if threshold is not None else []
    t0 = axis.t0
    hosts = [(mv.name, a) for mv in view.models.values() for a in mv.attempts if a.get("class") == "host"]
    out = [
        '<section id="host"><h2>Host evidence</h2>',
        f'<p class="host-counts" data-samples="{len(samples)}" data-gaps="{len(gaps)}" data-failed="{len(failed)}" '
        f'data-evidence="{len(evidence)}" data-host-attempts="{len(hosts)}">{len(samples)} memory-pressure samples '
        f"({above} above the threshold {esc(threshold)}), {len(gaps)} gap(s) longer than max_gap_s "
        f"{esc(max_gap)} s, {len(failed)} failed sample(s), {len(evidence)} outside log line(s); "
        f"{len(hosts)} attempt(s) that host evidence made <b>host</b> (each rerun).</p>",
        line_chart(
            "host-chart",
            axis,
            [("memory pressure", "#8e24aa", samples)],
            levels,
            marks,
            unit="",
            ymax=max([v for _, v in samples] + [float(threshold or 0), 1.0]) * 1.1,
            bands=bands,
        ),
    ]
    if evidence:
        rows = [
            f'<tr><td class="num">{rel_t(o.get("t"), t0)}</td><td>{esc(o.get("source"))}</td>'
            f"<td><code>{esc(o.get('line'))}</code></td></tr>"
            for o in evidence[:SHOWN]
        ]
        out.append(
            "<h3>Outside log lines</h3>"
            + _table(["t", "source", "line"], rows, "evidence")
            + _cut(len(evidence), min(len(evidence), SHOWN), "outside log lines")
        )
    if hosts:
        rows = [
            f"<tr><td>{esc(m)}</td><td>{esc(a.get('household'))}</td><td>{esc(a.get('arm'))}</td>"
            f'<td>{esc(a.get("pass"))}</td><td class="num">{rel_t(a.get("start"), t0)}</td>'
            f'<td class="num">{rel_t(a.get("end"), t0)}</td><td>{esc(a.get("action"))}</td>'
            f"<td>{_record_link(record_href, m, a.get('record'))}</td></tr>"
            for m, a in hosts[:SHOWN]
        ]
        out.append(
            "<h3>Attempts host evidence invalidated</h3>"
            + _table(["model", "household", "arm", "pass", "start", "end", "action", "record"], rows, "host-attempts")
            + _cut(len(hosts), min(len(hosts), SHOWN), "host attempts")
        )
    out.append("</section>")
    return "".join(out)


def _record_link(record_href: str, model: str, record: object) -> str:
    if type(record) is not str or ".." in record.split("/") or record.startswith("/") or ":" in record:
        return esc(record)
    href = "/".join(p for p in (record_href, "models", model, record) if p)
    return f'<a class="record" href="{esc(href)}">{esc(record)}</a>'


def record_href(run_dir: str | os.PathLike[str], out_file: str | os.PathLike[str]) -> str:
    """The run directory as a relative link from the page's folder (a link
    never leaves the machine, and never names a scheme)."""
    rel = os.path.relpath(os.path.abspath(run_dir), os.path.dirname(os.path.abspath(out_file)))
    return "/".join(rel.split(os.sep))


def anchor_evidence(view: RunView, report: Report | None) -> tuple[list[dict[str, Any]], bool]:
    """Per anchor what proves it, and whether verify checked it: verify's (``Report.anchors``), or,
    when verify could not run, what the records log (``records.checkpoints.logged_evidence``)."""
    if report is not None:
        return list(report.anchors), True
    from confirmatory.records.checkpoints import logged_evidence, read_evidence

    try:
        return logged_evidence(read_evidence(view.root)), False
    except Exception:  # noqa: BLE001 - an unreadable anchors file: the page says the rest
        return [], False


def _when(t: object) -> str:
    if type(t) in (int, float):
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(cast(float, t)))
    if isinstance(t, str):
        return t.replace("T", " ").replace("Z", " UTC")
    return "?"


def _proved_by(e: dict[str, Any] | None, push: str) -> str:
    """One anchor's evidence as a list: git, the study's signature, each cosignature, each stamp."""
    if e is None:
        return f'<ul class="proof"><li data-kind="git">{push}</li></ul>'
    items = [f'<li data-kind="git">git: {push if e.get("git") else "not on the git witness"}</li>']
    if e.get("signature"):
        items.append('<li data-kind="signature">signed by the study</li>')
    for c in e.get("cosignatures") or []:
        items.append(
            f'<li data-kind="cosignature" data-name="{esc(c.get("name"))}" data-time="{esc(c.get("time"))}">'
            f"cosigned by {esc(c.get('name'))} at {esc(_when(c.get('time')))}</li>"
        )
    for st in e.get("stamps") or []:
        name = st.get("name") or st.get("url") or f"TSA {st.get('tsa')}"
        items.append(
            f'<li data-kind="stamp" data-tsa="{esc(st.get("tsa"))}" data-gen-time="{esc(st.get("gen_time"))}">'
            f"stamped by {esc(name)} at {esc(_when(st.get('gen_time')))}</li>"
        )
    return f'<ul class="proof">{"".join(items)}</ul>'


def anchors(view: RunView, axis: Axis, report: Report | None = None) -> str:
    pushes = view.pushes
    failed = [p for p in pushes if p.get("rc") != 0]
    finals = [a for a in view.anchors if a.get("final") is True]
    t0 = axis.t0
    by_seq = {p.get("anchor_seq"): p for p in pushes}
    proofs, checked = anchor_evidence(view, report)
    proof_of = {a.get("seq"): a.get("evidence") for a in proofs}
    rows = []
    shown = view.anchors[: SHOWN // 2] + (view.anchors[-(SHOWN // 2) :] if len(view.anchors) > SHOWN else [])
    for a in shown:
        p = by_seq.get(a.get("seq"))
        logs = cast(dict[str, Any], a.get("logs")) if isinstance(a.get("logs"), dict) else {}
        lines = sum(v.get("lines", 0) for v in logs.values() if isinstance(v, dict) and type(v.get("lines")) is int)
        result = "not pushed" if p is None else ("pushed" if p.get("rc") == 0 else f"FAILED (rc {esc(p.get('rc'))})")
        rows.append(
            f'<tr class="{"final" if a.get("final") is True else ""}" data-seq="{esc(a.get("seq"))}">'
            f'<td data-label="anchor">{esc(a.get("seq"))}{" final" if a.get("final") is True else ""}</td>'
            f'<td class="num" data-label="t">{rel_t(a.get("t"), t0)}</td>'
            f'<td class="num" data-label="logs">{len(logs)}</td><td class="num" data-label="lines">{lines}</td>'
            f'<td data-label="what proves it">{_proved_by(proof_of.get(a.get("seq")), result)}</td>'
            f'<td data-label="push output"><code>{esc((p or {}).get("output", ""))[-300:]}</code></td></tr>'
        )
    said = (
        "What proves each anchor, as verify checked it (invariant 12): a stamp or cosignature that does not "
        "verify is not listed."
        if checked
        else "What proves each anchor, as the records log it: verify could not run, so none of it is checked."
    )
    return (
        '<section id="anchors"><h2>Anchors and what proves them</h2>'
        f'<p class="anchor-counts" data-anchors="{len(view.anchors)}" data-pushes="{len(pushes)}" '
        f'data-failed="{len(failed)}" data-final="{len(finals)}">{len(view.anchors)} anchor(s) '
        f"({len(finals)} final), {len(pushes)} push(es), {len(failed)} failed.</p>"
        f'<p class="anchor-evidence-note" data-checked="{str(checked).lower()}">{esc(said)}</p>'
        + '<div class="scroll">'
        + anchors_strip(axis, view.anchors, pushes)
        + "</div>"
        + _table(["anchor", "t", "logs", "lines", "what proves it", "push output (its end)"], rows, "anchors")
        + _cut(len(view.anchors), len(shown), "anchors (the first and the last)")
        + "</section>"
    )


def config(view: RunView) -> str:
    c = view.config
    if c is None:
        return (
            f'<section id="config"><h2>What was pinned down</h2><p class="warn">config.json '
            f"{esc(view.config_problem)}.</p></section>"
        )
    npd = cast(list[Any], c.get("not_pinned_down")) if isinstance(c.get("not_pinned_down"), list) else []
    kc = cast(list[Any], c.get("known_confounds")) if isinstance(c.get("known_confounds"), list) else []
    out = [
        '<section id="config"><h2>What was pinned down, and what was not</h2>',
        f'<div class="callout not-pinned" data-n="{len(npd)}"><h3>Not pinned down ({len(npd)})</h3>'
        + ("<ul>" + "".join(f"<li>{esc(s)}</li>" for s in npd) + "</ul>" if npd else "<p>nothing</p>")
        + "</div>",
        f'<div class="callout confounds" data-n="{len(kc)}"><h3>Known confounds ({len(kc)})</h3>'
        + (
            "<ul>" + "".join(f"<li>{esc(s)}</li>" for s in kc) + "</ul>"
            if kc
            else "<p>none (no pair of models declared matched)</p>"
        )
        + "</div>",
    ]
    models = cast(dict[str, Any], c.get("models")) if isinstance(c.get("models"), dict) else {}
    rows = []
    for name, m in models.items():
        if not isinstance(m, dict):
            continue
        ident = cast(dict[str, Any], m.get("identity")) if isinstance(m.get("identity"), dict) else {}
        ok = m.get("sufficient_for_replication") is True
        missing = cast(list[Any], m.get("missing")) if isinstance(m.get("missing"), list) else []
        rows.append(
            f'<tr data-model="{esc(name)}" data-sufficient="{str(ok).lower()}"><td>{esc(name)}</td>'
            f"<td>{esc(m.get('litellm_model'))}</td><td>{esc(m.get('provider'))}</td>"
            f'<td class="{"yes" if ok else "no"}">{"yes" if ok else "NO"}</td>'
            f"<td>{esc(', '.join(map(str, missing)))}</td>"
            f"<td><code>{esc(json.dumps(m.get('params_sent'), sort_keys=True))}</code></td>"
            f"<td><details><summary>identity</summary><code>{esc(json.dumps(ident, indent=1, sort_keys=True))}"
            f"</code></details></td></tr>"
        )
    out.append(
        "<h3>Models</h3>"
        + _table(
            [
                "model",
                "litellm model",
                "provider",
                "sufficient for replication",
                "identity fields missing",
                "parameters sent",
                "identity",
            ],
            rows,
            "identity",
        )
    )
    runner = cast(dict[str, Any], c.get("runner")) if isinstance(c.get("runner"), dict) else {}
    study = cast(dict[str, Any], c.get("study")) if isinstance(c.get("study"), dict) else {}
    out.append(
        f"<p>Study {esc(study.get('id'))}, seed {esc(study.get('seed'))}; design sha256 "
        f"<code>{esc(c.get('design_sha256'))}</code>; runner {esc(runner.get('name'))} "
        f"{esc(runner.get('version'))} on Python {esc(runner.get('python'))}, {esc(runner.get('platform'))}.</p>"
    )
    out.append("</section>")
    return "".join(out)
