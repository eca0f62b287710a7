"""The report page in a real headless Chromium, JavaScript on: on the demo, a
ceiling crossing, an operator pause and resume, a harness stop, a tampered
run and a crashed one. Each page is checked against the records and against
verify: one timeline row per lane, the bars by class equal to the attempt
lines and to verify's counts, the results by class equal to verify's and to
the runner's own end summary, markers where the records put them, and no
request that could leave the page."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from pagedom import Node, needs_chromium, render, screenshot
from runhelpers import events, of

from confirmatory.commands.run import result_lines
from confirmatory.report import write_report
from confirmatory.report.charts import LEFT, WIDTH
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.verify import verify_run

pytestmark = [needs_chromium, pytest.mark.slow]

SCHEME = re.compile(r"^\s*([a-zA-Z][a-zA-Z0-9+.-]*:|//)")


def page_of(run_dir: Path, **kw) -> tuple[Node, object]:
    out, _ = write_report(run_dir, **kw)
    return render(out), verify_run(run_dir, **kw)


def attempt_lines(run_dir: Path, model: str) -> list[dict]:
    return of(events(run_dir, model), "attempt")


def summary_counts(run_dir: Path) -> dict[str, dict[str, int]]:
    """The runner's end summary (cli.run.result_lines), an account of its own: model -> class -> arm results."""
    out = {}
    for line in result_lines(run_dir):
        m = re.match(r"\s*(\S+): (\d+) arm results: (.*)$", line)
        assert m, line
        out[m.group(1)] = {c: int(n) for c, n in (part.rsplit(" ", 1) for part in m.group(3).split(", "))}
    return out


def check_offline(dom: Node) -> None:
    """The page's script ran, and no request can leave it: nothing names a
    scheme or a host, and its policy forbids any fetch."""
    body = dom.one("body")
    assert body.attrs.get("data-js") == "ready", body.attrs.get("data-js")  # its script ran, without error
    csp = dom.one("meta", http_equiv="Content-Security-Policy").attrs["content"]
    assert "default-src 'none'" in csp and "connect-src 'none'" in csp
    for n in dom.all():
        for attr in ("src", "href", "action", "data", "poster", "srcset", "xlink:href"):
            if attr in n.attrs:
                assert not SCHEME.match(n.attrs[attr]), (n.tag, attr, n.attrs[attr])
    assert not dom.all("link") and not dom.all("img") and not dom.all("iframe")
    assert all("src" not in s.attrs for s in dom.all("script"))


def check_page(dom: Node, run_dir: Path, report, *, summary: bool = True) -> None:
    """What every page must hold, whatever the run."""
    check_offline(dom)
    # The run directory holds no page: it stays what the runner wrote.
    assert not list(run_dir.rglob("*.html"))
    tallies = report.tallies
    for model in json.loads((run_dir / "manifest.json").read_text())["models"]:
        lanes = json.loads((run_dir / "models" / model / "manifest.json").read_text())["lanes"]
        svg = dom.one("svg", "timeline", data_model=model)
        assert [g.attrs["data-lane"] for g in svg.all("g", "lane")] == [str(i) for i in range(lanes)]
        bars = Counter(next(c[2:] for c in r.classes if c.startswith("c-")) for r in svg.all("rect", "a"))
        lines = attempt_lines(run_dir, model)
        assert bars == Counter(a["class"] for a in lines)
        ended = {h["household"] for h in of(events(run_dir, model), "household")}
        if all(a["household"] in ended for a in lines):
            assert dict(bars) == tallies[model]["attempts"]
        # every bar's hover names its attempt (the page's JSON, read by its script)
        assert len(svg.all("rect", "a")) == len(lines)
        results = dom.one("table", "results").one("tr", data_model=model)
        shown = {
            td.attrs["data-class"]: int(td.attrs["data-n"]) for td in results.all("td") if "data-class" in td.attrs
        }
        assert {c: n for c, n in shown.items() if n} == tallies[model]["results"]
        if summary:
            assert tallies[model]["results"] == summary_counts(run_dir)[model]
        reruns = dom.one("table", "reruns").one("tr", data_model=model)
        assert {
            td.attrs["data-class"]: int(td.attrs["data-n"])
            for td in reruns.all("td")
            if "data-class" in td.attrs and td.attrs["data-n"] != "0"
        } == tallies[model]["reruns"]
    verdict = dom.one("section", id="verdict")
    assert verdict.attrs["data-state"] == report.state
    assert [tr.attrs["data-status"] for tr in verdict.all("tr", "inv")] == [str(r.status) for r in report.results]


def x_at(svg: Node, t: float) -> float:
    t0, t1 = float(svg.attrs["data-t0"]), float(svg.attrs["data-t1"])
    return round(LEFT + (t - t0) * WIDTH / (t1 - t0), 1)


def test_the_demo_writes_its_report_beside_the_run_and_it_renders(demo_run, tmp_path):
    run_dir, stdout = demo_run
    page = run_dir.parent / f"{run_dir.name}.report.html"
    assert f"Report:        runs/{page.name}" in stdout
    assert "confirmatory report runs/demo" in stdout  # verify's table names the command
    households = Path(__file__).resolve().parents[2] / "confirmatory" / "demo" / "households.jsonl"
    dom, report = (
        render(page),
        verify_run(run_dir, witness=run_dir.parent / ".witness" / "clone", households=households),
    )
    check_page(dom, run_dir, report)
    verdict = dom.one("section", id="verdict")
    assert "ok" in verdict.classes and verdict.one("h2").content() == "ALL INVARIANTS HOLD"
    assert "holds every anchor of the run, unchanged" in verdict.one("p", "witness").content()
    assert len(dom.all("svg", "timeline")) == 4  # a timeline per model of the demo
    not_pinned = dom.one("div", "not-pinned")
    config = json.loads((run_dir / "config.json").read_text())
    assert int(not_pinned.attrs["data-n"]) == len(config["not_pinned_down"]) == len(not_pinned.all("li"))
    png = screenshot(page, tmp_path / "demo.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_the_ceiling_marker_is_where_the_records_put_the_crossing(ceiling_run):
    dom, report = page_of(ceiling_run)
    check_page(dom, ceiling_run, report)
    (ceiling,) = of(events(ceiling_run), "ceiling")
    svg = dom.one("svg", "timeline", data_model="m0")
    marker = svg.one("g", "m-ceiling")
    assert float(marker.attrs["data-t"]) == ceiling["t"]
    assert float(marker.one("line").attrs["x1"]) == x_at(svg, ceiling["t"])
    # ... inside the bar of the attempt whose call crossed it
    crossing = next(
        a
        for a in attempt_lines(ceiling_run, "m0")
        if a["start"] <= ceiling["t"] <= a["end"] and a["household"] == "hh-001"
    )
    i = json.loads(dom.one("script", "attempts", data_model="m0").content())
    bar = next(r for r in svg.all("rect", "a") if i[int(r.attrs["data-i"])][1:4] == ["hh-001", crossing["arm"], 0])
    assert (
        float(bar.attrs["x"])
        <= float(marker.one("line").attrs["x1"])
        <= float(bar.attrs["x"]) + float(bar.attrs["width"])
    )
    spend = dom.one("svg", "spend-total")
    assert float(spend.one("g", "m-ceiling").attrs["data-t"]) == ceiling["t"]
    assert float(spend.one("g", "level", data_name="ceiling").attrs["data-value"]) * 1e9 == pytest.approx(
        ceiling["ceiling_nusd"]
    )
    assert "ceiling" in dom.one("p", "outcome").content()


def test_an_operator_pause_is_drawn_until_its_accepted_resume_and_the_stale_one_is_shown(pause_run):
    dom, report = page_of(pause_run)
    check_page(dom, pause_run, report)
    ev = events(pause_run, "m0")
    (pause,) = of(ev, "pause")
    stale, accepted = of(ev, "resume")
    assert (stale["accepted"], accepted["accepted"]) == (False, True)
    svg = dom.one("svg", "timeline", data_model="m0")
    band = svg.one("g", "m-pause")
    assert (float(band.attrs["data-t"]), float(band.attrs["data-until"])) == (pause["t"], accepted["t"])
    assert float(svg.one("g", "m-resume").attrs["data-t"]) == accepted["t"]
    assert float(svg.one("g", "m-resume-refused").attrs["data-t"]) == stale["t"]
    assert report.tallies["m0"]["reruns"] == {"operator": 1}  # the resumed attempt replaced the paused one
    assert len(svg.all("path", "rerun")) == 1


def test_a_harness_stop_shows_its_trigger_and_stop_at_their_times(harness_run):
    dom, report = page_of(harness_run)
    check_page(dom, harness_run, report)
    ev = events(harness_run, "m0")
    (trigger,), (stop,) = of(ev, "trigger"), of(ev, "stop")
    svg = dom.one("svg", "timeline", data_model="m0")
    assert float(svg.one("g", "m-trigger").attrs["data-t"]) == trigger["t"]
    marker = svg.one("g", "m-stop")
    assert float(marker.attrs["data-t"]) == stop["t"] and "stop: harness" in marker.content()
    assert [g.attrs["data-lane"] for g in svg.all("g", "m-lane-end")] == [str(e["lane"]) for e in of(ev, "lane-end")]
    verdict = dom.one("section", id="verdict")  # a stopped run is not shown in a completed run's green
    assert "incomplete" in verdict.classes and verdict.one("h2").content().endswith("THE RUN WAS STOPPED")
    assert "stopped" in verdict.one("ul", "headline").content()


def test_a_tampered_run_says_verify_failed_and_names_the_invariant(tampered_run):
    run_dir, record = tampered_run
    dom, report = page_of(run_dir)
    assert 1 in report.failed()
    check_page(dom, run_dir, report)
    verdict = dom.one("section", id="verdict")
    assert "failed" in verdict.classes and "1" in verdict.attrs["data-failed"].split(",")
    banner = verdict.one("h2").content()
    assert banner.startswith("VERIFY FAILED") and "invariant 1 (one attempt line per record, hashes match)" in banner
    first = report.result(1).first[0]
    said = verdict.one("p", "sub").content()  # its first violation, named
    assert f"{first.where()}: {first.message}" in said and record.removeprefix("models/m0/") in said
    assert verdict.one("tr", data_invariant="1").attrs["data-status"] == "fail"


def test_a_crashed_run_says_it_is_not_complete_and_what_only_the_crash_explains(crashed_run):
    dom, report = page_of(crashed_run)
    assert report.state == "crashed" and report.ok, report.to_table()
    check_page(dom, crashed_run, report, summary=False)
    verdict = dom.one("section", id="verdict")
    assert "incomplete" in verdict.classes and verdict.attrs["data-state"] == "crashed"
    assert verdict.one("h2").content() == "NO VIOLATION, BUT THE RUN IS NOT COMPLETE (crashed)"
    assert report.next_step() in verdict.one("p", "sub").content()
    assert "crash" in verdict.one("div", "crash").content()


def test_an_attempts_hover_shows_its_line_and_links_to_its_record_file(harness_run):
    out, _ = write_report(harness_run)
    dom = render(out)
    svg = dom.one("svg", "timeline", data_model="m0")
    rows = json.loads(dom.one("script", "attempts", data_model="m0").content())
    i = next(int(r.attrs["data-i"]) for r in svg.all("rect", "a") if rows[int(r.attrs["data-i"])][7] == "harness")
    tip = render(out, f"#attempt=m0:{i}").one("div", id="tip")  # opens it as the hover does
    assert (tip.attrs["data-model"], tip.attrs["data-i"]) == ("m0", str(i))
    fields = dict(tuple(td.content() for td in tr.all("td")) for tr in tip.all("tr"))
    line = next(a for a in attempt_lines(harness_run, "m0") if a["class"] == "harness")
    assert (fields["household"], fields["arm"], fields["pass"], fields["class"], fields["action"]) == (
        line["household"],
        line["arm"],
        str(line["pass"]),
        "harness",
        line["action"],
    )
    assert fields["cost"] == f"${line['cost_nusd'] / 1e9:.6f}"
    href = tip.one("a", "record").attrs["href"]
    assert not SCHEME.match(href) and (out.parent / href).resolve() == (harness_run / "models" / "m0" / line["record"])


def test_markup_planted_in_the_records_stays_text_and_fetches_nothing(harness_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(harness_run, run_dir)
    log = run_dir / "models" / "m0" / "run.jsonl"
    planted = (
        '</script><img src="http://127.0.0.1:9/x"><script src="http://127.0.0.1:9/s"></script>'
        '<!--<script>fetch("http://127.0.0.1:9/")</script>'
    )
    lines = log.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if '"event":"attempt"' in line)
    obj = json.loads(lines[k])
    obj["signature"] = planted
    lines[k] = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    log.write_text("\n".join(lines) + "\n")
    out, _ = write_report(run_dir)
    dom = render(out)
    check_offline(dom)
    assert "failed" in dom.one("section", id="verdict").classes  # the edit breaks the chain
    rows = json.loads(dom.one("script", "attempts", data_model="m0").content())
    assert planted in [r[9] for r in rows]  # the hover shows it as the text it is


def test_every_section_counts_what_the_records_hold(tmp_path):
    """A generated run with a little of everything (provider, model and host
    failures, an operator pause, a harness stop, anchors): each section's
    numbers against the lines they come from."""
    run_dir = generate_run(tmp_path / "run", Plan())
    dom, report = page_of(run_dir)
    assert report.ok
    check_page(dom, run_dir, report)
    host = [json.loads(line) for line in (run_dir / "host.jsonl").read_text().splitlines()]
    counts = dom.one("p", "host-counts")
    hosts = [(m, a) for m in ("alpha", "beta", "gamma") for a in attempt_lines(run_dir, m) if a["class"] == "host"]
    assert hosts and int(counts.attrs["data-host-attempts"]) == len(hosts)
    assert int(counts.attrs["data-samples"]) == sum(1 for o in host if o["event"] == "sample")
    links = [a.attrs["href"] for a in dom.one("table", "host-attempts").all("a", "record")]
    assert sorted((run_dir.parent / h).resolve() for h in links) == sorted(
        (run_dir / "models" / m / a["record"]).resolve() for m, a in hosts
    )
    anchors = of(events(run_dir, log="anchors.jsonl"), "anchor")
    pushes = of(events(run_dir, log="anchor-pushes.jsonl"), "push")
    said = dom.one("p", "anchor-counts").attrs
    assert (int(said["data-anchors"]), int(said["data-pushes"]), int(said["data-failed"])) == (
        len(anchors),
        len(pushes),
        sum(1 for p in pushes if p["rc"] != 0),
    )
    strip = dom.one("svg", "anchors")
    assert len(strip.all("g", "anchor")) == len(anchors) and len(strip.all("g", "push")) == len(pushes)
    (close,) = of(events(run_dir), "close")
    assert int(dom.one("b", "total").attrs["data-nusd"]) == close["spend_total_nusd"]
    for m in ("alpha", "beta", "gamma"):
        (own,) = of(events(run_dir, m), "close")
        row = dom.one("table", "spend").one("tr", data_model=m)
        assert [int(td.attrs["data-nusd"]) for td in row.all("td") if "data-nusd" in td.attrs] == [own["spend_nusd"]]
        decisions = of(events(run_dir, m, "admission.jsonl"), "decision")
        said = dom.one("p", "admission-counts", data_model=m).attrs
        assert (int(said["data-admitted"]), int(said["data-refused"])) == (
            sum(d["admit"] for d in decisions),
            sum(not d["admit"] for d in decisions),
        )
    assert "config.json missing" in dom.one("section", id="config").content()
    gamma = dom.one("svg", "timeline", data_model="gamma")
    assert "stop: harness" in gamma.one("g", "m-stop").content()
    assert dom.one("svg", "timeline", data_model="beta").one("g", "m-pause")
