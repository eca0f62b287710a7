"""The report of a run signed, stamped by a local TSA and cosigned by a local witness (real processes on
127.0.0.1), in a real headless Chromium: the anchor table says per anchor what proves it (the git push, the
study's signature, each cosignature with its time, each stamp's TSA and genTime), exactly as verify checked
it; the verdict says which of them the run has; and at 420 px nothing of the anchors section or of the
verdict's evidence line spills past the window."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from pagedom import BROWSER_FLAGS, CHROMIUM, needs_chromium, parse, render

from confirmatory.design.load import load_design
from confirmatory.engine.run import Run
from confirmatory.report import write_report
from confirmatory.testing.designs import write_design
from confirmatory.testing.evidence import local_evidence
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.testing.tsa import openssl_missing
from confirmatory.verify import verify_run

pytestmark = [
    needs_chromium,
    pytest.mark.slow,
    pytest.mark.skipif(openssl_missing() is not None, reason=str(openssl_missing())),
]

# Injected into a copy of the page: every element of the anchors section (a scrolling box counts as
# one, its content scrolls inside it) and the verdict's evidence line must end inside the window.
MEASURE = """<script>(function () {
  var w = document.documentElement.clientWidth, bad = [];
  document.querySelectorAll('#anchors, #anchors *, #verdict p.evidence, #verdict p.evidence *').forEach(function (n) {
    var box = n.parentElement && n.parentElement.closest('.scroll');
    if (box && box !== n) return;
    var r = n.getBoundingClientRect();
    if (r.width && r.right > w + 0.5) bad.push(n.tagName + '.' + n.className + ' ends at ' + r.right);
  });
  document.body.setAttribute('data-width', String(w));
  document.body.setAttribute('data-overflow', JSON.stringify(bad));
})();</script>"""


@pytest.fixture(scope="module")
def evidenced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report-evidence")
    with local_evidence(tmp / "ev", origin="example.org/study/report", tsas=1, witnesses=2) as ev:
        design = write_design(tmp / "design", households=4, anchors=ev.anchors(interval_s=0.3))
        result = Run(load_design(design), tmp / "run").execute()
        assert result.status == "completed"
    return tmp / "run"


def test_the_anchor_table_says_what_proves_each_anchor_as_verify_checked_it(evidenced):
    run_dir = evidenced
    report = verify_run(run_dir)
    assert report.ok and report.complete, report.to_table()
    out, _ = write_report(run_dir)
    dom = render(out)
    assert dom.one("body").attrs.get("data-js") == "ready"
    table = dom.one("table", "anchors")
    rows = {tr.attrs["data-seq"]: tr for tr in table.all("tr") if "data-seq" in tr.attrs}
    assert len(report.anchors) >= 2 and set(rows) == {str(a["seq"]) for a in report.anchors}
    witnesses = 0
    for a in report.anchors:
        e, items = a["evidence"], rows[str(a["seq"])].one("ul", "proof").all("li")
        kinds = [li.attrs["data-kind"] for li in items]
        assert kinds == [
            "git",
            *(["signature"] if e["signature"] else []),
            *["cosignature"] * len(e["cosignatures"]),
            *["stamp"] * len(e["stamps"]),
        ]
        assert e["signature"] and e["git"]
        cos = [li for li in items if li.attrs["data-kind"] == "cosignature"]
        assert [(li.attrs["data-name"], int(li.attrs["data-time"])) for li in cos] == [
            (c["name"], c["time"]) for c in e["cosignatures"]
        ]
        stamps = [li for li in items if li.attrs["data-kind"] == "stamp"]
        assert [li.attrs["data-gen-time"] for li in stamps] == [s["gen_time"] for s in e["stamps"]]
        assert all(f"stamped by {s['name']} at " in li.content() for li, s in zip(stamps, e["stamps"]))
        witnesses = max(witnesses, len(cos))
    final = report.anchors[-1]["evidence"]
    assert len(final["cosignatures"]) == 2 and len(final["stamps"]) == 1 and witnesses == 2
    line = dom.one("section", id="verdict").one("p", "evidence")
    assert line.attrs["data-kinds"] == "git,signature,cosignatures,stamps"
    assert "2 witness cosignature(s)" in line.content() and "1 RFC 3161 time stamp(s)" in line.content()
    assert dom.one("p", "anchor-evidence-note").attrs["data-checked"] == "true"


def test_a_forged_cosignature_is_not_shown_as_proof_and_a_run_without_evidence_says_git_only(evidenced, tmp_path):
    bad = tmp_path / "run"
    shutil.copytree(evidenced, bad)
    pushes = bad / "anchor-pushes.jsonl"
    objs = [json.loads(x) for x in pushes.read_bytes().splitlines()]
    last = max(o["anchor_seq"] for o in objs if o["event"] == "cosignature")
    ok = [o for o in objs if o["event"] == "cosignature" and o.get("ok") and o["anchor_seq"] == last]
    assert len({o["name"] for o in ok}) == len(ok) == 2  # one ok line per witness
    name, sig = ok[0]["line"].rsplit(" ", 1)
    forged = f"{name} {sig[:-4]}{'AAAA' if sig[-4:] != 'AAAA' else 'BBBB'}"
    pushes.write_text(pushes.read_text().replace(ok[0]["line"], forged))
    dom = render(write_report(bad)[0])
    shown = [li.attrs["data-name"] for li in dom.one("tr", data_seq=str(last)).all("li", data_kind="cosignature")]
    assert shown == [ok[1]["name"]]  # the forged one is not listed as proof; the other witness's is
    assert "12" in dom.one("section", id="verdict").attrs["data-failed"].split(",")
    plain = generate_run(tmp_path / "plain", Plan(households=2, anchor_every_s=120, cap_usd=0.3))
    dom = render(write_report(plain)[0])
    line = dom.one("section", id="verdict").one("p", "evidence")
    assert line.attrs["data-kinds"] == "git" and "it has no the study's signature" not in line.content()
    assert "no signature by the study" in line.content()
    for tr in dom.one("table", "anchors").all("tr"):
        if "data-seq" in tr.attrs:
            assert [li.attrs["data-kind"] for li in tr.all("li")] == ["git"]


# Chromium's window is at least 500 px wide: the page is measured in a 420 px frame of a page that
# copies what the frame's own script measured (file pages read each other with --allow-file-access-from-files).
FRAME = """<html><body><iframe id="f" src="{page}" style="width:420px;height:4000px;border:0"></iframe><script>
document.getElementById('f').addEventListener('load', function () {{
  var b = this.contentDocument.body;
  document.body.setAttribute('data-width', b.getAttribute('data-width'));
  document.body.setAttribute('data-overflow', b.getAttribute('data-overflow'));
}});</script></body></html>"""


def overflow_at_420(html: str, tmp_path: Path, name: str) -> tuple[int, list[str]]:
    (tmp_path / f"{name}.html").write_text(html.replace("</body>", MEASURE + "</body>"))
    frame = tmp_path / f"{name}-frame.html"
    frame.write_text(FRAME.format(page=f"{name}.html"))
    done = subprocess.run(
        [CHROMIUM, *BROWSER_FLAGS, "--allow-file-access-from-files", "--dump-dom", frame.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    body = parse(done.stdout).one("body")
    return int(body.attrs["data-width"]), json.loads(body.attrs["data-overflow"])


def test_nothing_of_the_anchors_or_the_evidence_line_overflows_at_420_px(evidenced, tmp_path):
    out, _ = write_report(evidenced, tmp_path / "page.html")
    html = out.read_text()
    width, spilled = overflow_at_420(html, tmp_path, "measured")
    assert width <= 420 and spilled == []
    # the same page without the table's narrow layout spills: the measure can fail
    wide = html.replace("@media (max-width:700px)", "@media (max-width:1px)")
    wide = wide.replace("table.anchors td{overflow-wrap:anywhere}", "")
    width, spilled = overflow_at_420(wide, tmp_path, "wide")
    assert width <= 420 and spilled, spilled
