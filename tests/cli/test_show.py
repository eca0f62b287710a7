"""`confirmatory show`: its figures equal verify's (the report's `figures`
and state) on every kind of run: the demo, a paused-then-resumed run, a
ceiling run, a harness-stopped run and a crashed one (SIGKILL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runhelpers import in_background, make_run

from confirmatory.cli.show import read_run, render, show_command
from confirmatory.engine.resume import request_resume
from confirmatory.testing.designs import write_design
from confirmatory.verify import verify_run

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "confirmatory_run.py"
FAST = {"engine_factory": "confirmatory.testing.fakes:null_engine"}


def same_as_verify(run_dir: Path) -> dict:
    """show's figures and state, each asserted equal to verify's; show's dict."""
    info = read_run(run_dir)
    report = verify_run(run_dir)
    assert report.ok, report.to_table(shown=10)
    assert info["state"] == report.state, (info["state_detail"], report.state_line())
    fig = report.figures
    for name, m in fig["models"].items():
        mine = info["models"][name]
        assert {k: mine[k] for k in m} == m, (name, mine, m)
    assert set(info["models"]) == set(fig["models"])
    assert info["close_status"] == fig["close_status"]
    assert info["stop_causes"] == fig["stop_causes"]
    if fig["spend_total_nusd"] is not None:
        assert info["spend_total_nusd"] == fig["spend_total_nusd"]
    text = render(info)  # and what a person reads says the same
    assert f"state: {report.state} " in text
    for name, m in fig["models"].items():
        assert f"  {name}: {m['households_ended']} of " in text
    return info


def finished(run, meanwhile=lambda: None):
    helper = in_background(meanwhile)
    result = run.wait()
    helper.join(10)
    run.close()
    return result


@pytest.mark.slow
def test_show_on_the_demo_run_says_what_verify_says(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "demo", "--out", str(tmp_path / "run")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    info = same_as_verify(tmp_path / "run")
    assert info["state"] == "complete" and info["study"] == "reference-calculator"
    assert info["models"]["careful"]["reruns_by_class"] == {"provider": 2}
    assert info["last_push"]["rc"] == 0 and info["final_anchor"]
    # a folder of runs: one line each, and JSON for machines
    out = subprocess.run([sys.executable, str(SCRIPT), "show", str(tmp_path / "run"), "--json"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert json.loads(out.stdout) == json.loads(json.dumps(info))


def test_show_on_a_paused_then_resumed_run(tmp_path):
    hh = [{"id": "hh-000", "plan": {"calculator/0": "operator"}}, {"id": "hh-001"}]
    run = make_run(tmp_path, households=hh, models=1, **FAST)
    run.start()

    def operator():
        while not run.models["m0"].paused:
            time.sleep(0.02)
        request_resume(run.run_dir, "m0")

    assert finished(run, operator).status == "completed"
    info = same_as_verify(run.run_dir)
    m = info["models"]["m0"]
    assert len(m["pauses"]) == 1 and [r["accepted"] for r in m["resumes"]] == [True]
    assert m["reruns_by_class"] == {"operator": 1}
    assert "    paused at " in render(info) and "resume at " in render(info)


def test_show_on_a_ceiling_run(tmp_path):
    hh = [{"id": f"hh-{i:03d}"} for i in range(12)]
    run = make_run(tmp_path, households=hh, models=2, overall_cap_usd=0.005, margin_usd=0.0, **FAST)
    run.start()
    assert finished(run).status == "ceiling"
    info = same_as_verify(run.run_dir)
    assert info["close_status"] == "ceiling" and info["ceiling_crossed"] is not None
    assert info["spend_total_nusd"] > info["ceiling_nusd"]
    assert "ceiling crossed at " in render(info)


def test_show_on_a_harness_stopped_run(tmp_path):
    hh = [{"id": "hh-000", "plan": {"alone/0": "harness"}}, {"id": "hh-001"}]
    run = make_run(tmp_path, households=hh, models=2, arms=("alone",), **FAST)
    run.start()
    finished(run)
    info = same_as_verify(run.run_dir)
    stops = [s["cause"] for m in info["models"].values() for s in m["stops"]]
    assert "harness" in stops, info
    assert "stopped at " in render(info) and "KeyError" in render(info)


@pytest.mark.slow
def test_show_on_a_crashed_run_and_on_a_folder_of_runs(tmp_path, capsys):
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.02} for i in range(30)]
    design = write_design(tmp_path / "design", households=hh, models=2, anchors={"interval_s": 0.3}, **FAST)
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "run", str(design), "--out", str(runs / "a"), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    try:
        log = runs / "a" / "models" / "m0" / "run.jsonl"
        while not (log.exists() and log.read_bytes().count(b'"event":"household"') >= 3):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    info = same_as_verify(runs / "a")
    assert info["state"] == "crashed" and info["close_status"] is None
    assert "confirmatory continue" in info["state_detail"]
    assert show_command(runs) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("a  crashed  fake-study  spend ")


def test_show_refuses_a_directory_that_holds_no_run(tmp_path, capsys):
    assert show_command(tmp_path) == 1
    assert "is not a run directory, nor a folder holding any" in capsys.readouterr().err


def test_show_leaves_out_a_household_whose_attempt_lines_are_on_disk_but_not_its_household_line(
        tmp_path, monkeypatch):
    """A household's attempt lines are written, then the write of its
    household line fails (the disk): the run ends as a crash does, and that
    household is under way. show counts its results no more than verify
    does (a household ends with its household line, not its attempt lines)."""
    from runhelpers import execute, fail_first_write

    failed = fail_first_write(monkeypatch, "household", "/models/m0/run.jsonl")
    result, run_dir = execute(tmp_path, households=4, models=1, **FAST)
    monkeypatch.undo()
    assert failed and result.disk_failed
    lines = [json.loads(x) for x in (run_dir / "models" / "m0" / "run.jsonl").read_text().splitlines()]
    lined = {o["household"] for o in lines if o["event"] == "attempt"}
    ended = {o["household"] for o in lines if o["event"] == "household"}
    assert lined - ended, "no household with attempt lines and no household line"
    info = same_as_verify(run_dir)
    assert info["state"] == "crashed"
