"""The reference study, killed, continued, the continuation killed in its turn.

The cases as a user met them: the bundled reference study on the simulated
provider with a hang fault on 15% of its calls (so attempts are slow and
households are under way at any instant), run by `confirmatory demo`,
SIGKILLed 7, 13 or 19 s after its first line (10, 16 or 22 s after the
start of a process on an idle machine); continued, and the continuation
SIGKILLed 9 s after its first write (while it runs the crash-cut households
again), or right after its crash-cut household lines (before any round-1
attempt), or as its first such line is written. Each: verify says crashed
with no violation, `continue` carries it on, and the run ends complete with
every household of every draw ended and every acknowledged line kept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import procserver
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
import continuation_kills as ck  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "confirmatory" / "demo"
STARTUP_S = 3.0  # an idle machine's start-up to the run's first line: the kill times count from it


def hang_design(directory: Path) -> Path:
    """reference.toml with its pins and households named from ``directory``, and a hang fault."""
    directory.mkdir(parents=True)
    text = (DEMO / "reference.toml").read_text()
    for name in ("harness.py", "calculator.py", "engine.py"):
        text = text.replace(f'"{name}" =', f'"{os.path.relpath(DEMO / name, directory)}" =')
    text = text.replace(
        'path = "households.jsonl"', f'path = "{os.path.relpath(DEMO / "households.jsonl", directory)}"'
    )
    text += '\n[[simulator.faults]]\nkind = "hang"\nrate = 0.15\nhang_s = 1.0\n'
    path = directory / "reference-hang.toml"
    path.write_text(text)
    return path


def demo_killed_at(tmp_path: Path, seconds: float) -> Path:
    design = hang_design(tmp_path / "design")
    run_dir = tmp_path / "runs" / "run"
    run_dir.parent.mkdir()
    proc = procserver.popen(
        [sys.executable, str(ck.SCRIPT), "demo", "--design", str(design), "--out", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # the clock starts at its first line: a loaded machine can take
        # seconds to start a process and import litellm
        ck.first_write(proc, run_dir, {})
        proc.wait(timeout=seconds - STARTUP_S)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the demo ended before its kill"
    assert ck.crashed_ok(run_dir) == "crashed"
    return run_dir


def carried_on(run_dir: Path, **kill) -> None:
    first = ck.snapshot(run_dir)
    code = ck.continue_killed(run_dir, "the machine was rebooted", **kill)
    report = ck.crashed_report(run_dir)
    if code == 0 or report["state"] == "complete":
        # the continuation ended before its kill time, or the kill landed
        # after its final push, as it exited (a late first kill leaves little
        # to run): complete, as it must be
        assert "seconds" in kill and report["state"] == "complete", (code, report["state"])
        ck.assert_kept(first, run_dir)
        ck.assert_complete(run_dir, 1)
        return
    crash = report["crash"]
    assert crash is not None
    second = ck.snapshot(run_dir)
    assert ck.continue_killed(run_dir, "rebooted again") == 0
    ck.assert_kept(first, run_dir)
    ck.assert_kept(second, run_dir)
    # killed after its close line (a late kill on a loaded machine), the
    # continuation left only its final anchor or push: the second `continue`
    # finishes those, as push-anchor would, and is no continuation of its own
    ck.assert_complete(run_dir, 2 if crash["stage"] == "under way" else 1)


@pytest.mark.slow
@pytest.mark.parametrize("seconds", [10.0, 16.0, 22.0])
def test_the_reference_study_killed_then_its_continuation_killed_9s_in_ends_complete(tmp_path, seconds):
    carried_on(demo_killed_at(tmp_path, seconds), seconds=9.0)


@pytest.mark.slow
def test_a_continuation_killed_after_its_cut_lines_before_any_round_1_attempt_ends_complete(tmp_path):
    # its first anchor comes right after the crash-cut household lines
    carried_on(demo_killed_at(tmp_path, 12.5), at=r"/runs/run/anchors\.jsonl\tanchor$")


@pytest.mark.slow
def test_a_continuation_killed_as_its_first_cut_line_is_written_ends_complete(tmp_path):
    carried_on(demo_killed_at(tmp_path, 12.5), at=r"/models/[^/]+/run\.jsonl\thousehold$")
