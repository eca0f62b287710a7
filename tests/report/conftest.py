"""Real runs of each kind the report must show, one per module (they take seconds):
the demo (a real process on the simulated provider), a ceiling crossing, an
operator pause and resume, a harness stop, a tampered copy and a run killed
with SIGKILL."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runhelpers import events, execute, in_background, make_run, verified

from confirmatory.engine.resume import request_resume
from confirmatory.testing.designs import write_design

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "confirmatory_run.py"
FAST = {"engine_factory": "confirmatory.testing.fakes:null_engine"}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[Path, str]:
    """``confirmatory demo`` as a person runs it: its run directory and its output."""
    tmp = tmp_path_factory.mktemp("demo")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "demo", "--out", "runs/demo"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp / "runs" / "demo", done.stdout


@pytest.fixture(scope="module")
def ceiling_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("ceiling")
    hh = [
        {"id": "hh-000", "plan": {"alone/0": "hang"}},
        {"id": "hh-001", "plan": {"alone/0": ["slow", "expensive"]}, "slow_s": 0.3, "expensive_usd": 2.0},
    ]
    result, run_dir = execute(
        tmp, households=hh, models=1, arms=("alone", "calculator"), overall_cap_usd=1.0, margin_usd=0.5, **FAST
    )
    assert result.status == "ceiling"
    verified(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def pause_run(tmp_path_factory) -> Path:
    """A model paused for an operator: one stale resume request (refused), then a fresh one."""
    tmp = tmp_path_factory.mktemp("pause")
    hh = [{"id": "hh-000", "plan": {"calculator/0": "operator"}}, {"id": "hh-001"}, {"id": "hh-002"}]
    run = make_run(tmp, households=hh, models=1, **FAST)
    run.start()
    m = run.models["m0"]

    def operator():
        while not m.paused:
            time.sleep(0.01)
        request_resume(run.run_dir, "m0", wall=m.pause_t - 30.0)  # written before the pause began
        while not any(e.get("event") == "resume" for e in events(run.run_dir, "m0")):
            time.sleep(0.01)
        request_resume(run.run_dir, "m0")

    helper = in_background(operator)
    result = run.wait()
    helper.join(5)
    assert result.status == "completed"
    verified(run.run_dir)
    return run.run_dir


@pytest.fixture(scope="module")
def harness_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("harness")
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.02, "plan": {"alone/0": "harness"} if i == 3 else {}} for i in range(8)]
    result, run_dir = execute(tmp, households=hh, models=1, **FAST)
    assert result.status == "stopped" and result.stop_cause == "harness"
    verified(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def tampered_run(harness_run, tmp_path_factory) -> tuple[Path, str]:
    """A copy of the harness run with one record's cost changed after the fact."""
    run_dir = tmp_path_factory.mktemp("tampered") / "run"
    shutil.copytree(harness_run, run_dir)
    attempt = next(e for e in events(run_dir, "m0") if e.get("event") == "attempt" and e["cost_nusd"] > 0)
    path = run_dir / "models" / "m0" / attempt["record"]
    rec = json.loads(path.read_text())
    rec["cost_nusd"] = attempt["cost_nusd"] // 2
    path.write_text(json.dumps(rec, sort_keys=True))
    return run_dir, f"models/m0/{attempt['record']}"


@pytest.fixture(scope="module")
def crashed_run(tmp_path_factory) -> Path:
    """A runner process killed with SIGKILL once a third of its households ended."""
    tmp = tmp_path_factory.mktemp("crashed")
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.02} for i in range(30)]
    design = write_design(tmp / "design", households=hh, models=2, anchors={"interval_s": 0.3}, **FAST)
    run_dir = tmp / "run"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "run", str(design), "--out", str(run_dir), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    try:
        while sum(p.read_bytes().count(b'"event":"household"') for p in run_dir.glob("models/*/run.jsonl")) < 10:
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "a third of the households never ended"
            time.sleep(0.002)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return run_dir
