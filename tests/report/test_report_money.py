"""The page's, show's and verify's money agree to the nano-dollar on every
kind of run the report's tests make: the demo, a ceiling crossing, a pause
and resume, a harness stop, a tampered run, a run killed with SIGKILL
(before `continue`: the journal's total) and the same run continued (the
attempts' total and the lost costs, each shown)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from moneycheck import money_agrees

from confirmatory.core.money import format_usd
from confirmatory.verify import verify_run

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["demo_run", "ceiling_run", "pause_run", "harness_run", "tampered_run"])
def test_the_page_show_and_verify_agree_on_the_money(kind, request):
    run_dir = request.getfixturevalue(kind)
    run_dir = run_dir[0] if isinstance(run_dir, tuple) else run_dir
    report = verify_run(run_dir)
    assert report.ok is (kind != "tampered_run"), report.to_table()
    fig = money_agrees(run_dir, report)
    assert fig["spend_total_nusd"] == fig["close_spend_total_nusd"]  # a closed run: its close line's total


def test_a_crashed_run_shows_the_journals_total_and_once_continued_the_lost_costs(crashed_run, tmp_path):
    fig = money_agrees(crashed_run)
    journaled = fig["spend"]["in_flight_nusd"] + fig["spend"]["recorded_nusd"] + fig["spend"]["late_nusd"]
    assert fig["spend_total_nusd"] == journaled and fig["close_spend_total_nusd"] is None
    run_dir = tmp_path / "run"
    shutil.copytree(crashed_run, run_dir)
    done = subprocess.run(
        [sys.executable, "-m", "confirmatory", "continue", str(run_dir), "--reason", "the machine was rebooted"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = verify_run(run_dir)
    assert report.ok and report.complete, report.to_table()
    after = money_agrees(run_dir, report)
    assert after["spend_total_nusd"] == after["close_spend_total_nusd"]
    assert after["spend"]["in_flight_nusd"] == 0
    # what the crash lost is counted, and said, beside the attempts' total
    assert after["spend_total_nusd"] == sum(after["spend"][k] for k in ("recorded_nusd", "late_nusd", "lost_nusd"))
    assert f"lost {format_usd(after['spend']['lost_nusd'])}" in report.to_table() or not after["spend"]["lost_nusd"]
