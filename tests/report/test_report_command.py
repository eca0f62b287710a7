"""`confirmatory report` as a command: where it writes, what it refuses, its
exit status whatever the verdict, and a large run's lanes drawn in time bins
whose counts add up to verify's."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pagedom import parse
from runhelpers import events

from confirmatory.report import write_report
from confirmatory.report.charts import BAR_CAP
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.verify import verify_run

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "confirmatory_run.py"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "report", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_the_page_is_written_beside_the_run_and_the_run_directory_is_left_as_it_was(harness_run):
    before = tree(harness_run)
    done = cli(str(harness_run))
    page = harness_run.parent / f"{harness_run.name}.report.html"
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"report: {page} (") and page.stat().st_size > 10_000
    assert tree(harness_run) == before


def test_an_out_inside_the_run_directory_is_refused_in_one_line(harness_run):
    before = tree(harness_run)
    done = cli(str(harness_run), "--out", str(harness_run / "models" / "page.html"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "is inside the run directory" in done.stderr
    assert tree(harness_run) == before


def test_a_directory_that_is_not_a_run_is_refused_in_one_line(tmp_path):
    done = cli(str(tmp_path))
    assert done.returncode == 1 and done.stderr == (
        f"report: {tmp_path} is not a run directory (it has no manifest.json, run.jsonl or anchors.jsonl)\n"
    )
    assert not list(tmp_path.parent.glob(f"{tmp_path.name}.report.html"))


def test_an_out_in_a_folder_that_does_not_exist_is_refused(harness_run, tmp_path):
    done = cli(str(harness_run), "--out", str(tmp_path / "no" / "page.html"))
    assert done.returncode == 1 and "does not exist" in done.stderr and done.stderr.count("\n") == 1


def test_a_tampered_run_still_gets_its_page_exit_0_the_verdict_is_on_it(tampered_run, tmp_path):
    run_dir, _ = tampered_run
    out = tmp_path / "review.html"
    done = cli(str(run_dir), "--out", str(out))
    assert done.returncode == 0, done.stderr
    verdict = parse(out.read_text()).one("section", id="verdict")
    assert "failed" in verdict.classes
    # the hover's links to record files are relative to where the page is
    href = parse(out.read_text()).one("body").attrs["data-run-href"]
    attempts = [e for e in events(run_dir, "m0") if e.get("event") == "attempt"]
    assert attempts and not os.path.isabs(href)
    assert all((out.parent / href / "models" / "m0" / a["record"]).is_file() for a in attempts)


def test_building_the_page_never_imports_litellm(harness_run, tmp_path):
    code = (
        "import sys\nfrom confirmatory.report.command import report_command\n"
        f"assert report_command({str(harness_run)!r}, {str(tmp_path / 'p.html')!r}, quiet=True) == 0\n"
        "print('litellm' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_a_large_model_is_drawn_in_time_bins_whose_counts_are_verifys(tmp_path):
    run_dir = generate_run(
        tmp_path / "run",
        Plan(models=("alpha",), households=1100, operator=None, harness=None, cap_usd=1e6, reserve_usd=0.001),
    )
    out, _ = write_report(run_dir)
    dom = parse(out.read_text())
    svg = dom.one("svg", "timeline", data_model="alpha")
    assert svg.attrs["data-aggregated"] == "1" and not svg.all("rect", "a")
    assert len(svg.all("g", "lane")) == 2
    bins = Counter()
    for r in svg.all("rect", "bin"):
        bins[next(c[2:] for c in r.classes if c.startswith("c-"))] += int(r.attrs["data-n"])
    report = verify_run(run_dir)
    assert sum(bins.values()) > BAR_CAP and dict(bins) == report.tallies["alpha"]["attempts"]
    assert f"more than {BAR_CAP}" in dom.one("p", "aggregated").content()


def test_no_raw_epoch_time_is_shown_on_the_page_of_a_run_with_pauses_and_resumes(tmp_path):
    import re

    run_dir = generate_run(tmp_path / "run", Plan(households=4))
    assert any(o["event"] == "resume-request" for o in events(run_dir, log="resume.jsonl")), "the plan resumes"
    page = tmp_path / "page.html"
    write_report(run_dir, page)
    html = page.read_text()
    shown = re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)\b.*?</\1>", "", html, flags=re.S))
    epochs = [shown[max(0, m.start() - 60) : m.end()] for m in re.finditer(r"\b1[0-9]{9}(\.[0-9]+)?\b", shown)]
    assert epochs == [], epochs
    assert "resume request written at 2027-" in shown  # the resume markers' labels, as UTC
