"""Continuations killed at wall-clock times, and three kills in a row.

The second family of the continuation kill suite: points chosen by time,
not by what is on disk. The crashed run of continuation_kills.make_base is
continued, and the continuation SIGKILLed at times spread uniformly over
an uncut continuation's life (CONFIRMATORY_KILL_POINTS of them, 10 by
default; the README's testing section runs 100). Then three kills in a
row: a fresh run killed after its 10th, 40th or 80th record, its
continuation killed, the second continuation killed, and a last one run to
the end. Each ends in a complete run that verifies, every household of
every draw ended, every line acknowledged before each kill kept.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import continuation_kills as ck  # noqa: E402

POINTS = int(os.environ.get("CONFIRMATORY_KILL_POINTS") or 10)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return ck.make_base(tmp_path_factory.mktemp("times"))


@pytest.mark.slow
@pytest.mark.parametrize("k", range(POINTS), ids=[f"{(k + 0.5) / POINTS:.3f} of its life" for k in range(POINTS)])
def test_a_continuation_killed_at_a_time_is_continued_to_a_complete_run(base, k):
    ck.carried_on(base, [{"seconds": base.duration_s * (k + 0.5) / POINTS}])


@pytest.mark.slow
@pytest.mark.parametrize("records", [10, 40, 80], ids=lambda n: f"run killed after its record {n}")
def test_three_kills_in_a_row_end_in_a_complete_run(tmp_path, records):
    """The run killed after its 10th, 40th or 80th record (of about 120);
    its continuation killed at its third admission decision (a household of
    its own under way), the second at its second household line (a
    crash-cut one, or one it ran); then carried on to its end."""
    run_dir, code = ck.run_killed(tmp_path, at=r"/records/.*\.json\tfile$", count=records)
    assert code == -signal.SIGKILL, "the run ended before its kill"
    snaps = [ck.snapshot(run_dir)]
    assert ck.crashed_ok(run_dir) == "crashed"
    kills = [{"at": r"/admission\.jsonl\tdecision$", "count": 3}, {"at": r"/run\.jsonl\thousehold", "count": 2}]
    for k, kill in enumerate(kills, 1):
        assert ck.continue_killed(run_dir, f"kill {k}", **kill) == -signal.SIGKILL, f"continuation {k} ended first"
        snaps.append(ck.snapshot(run_dir))
        assert ck.crashed_ok(run_dir) == "crashed"
    assert ck.continue_killed(run_dir, "last") == 0
    for snap in snaps:
        ck.assert_kept(snap, run_dir)
    ck.assert_complete(run_dir, 3)
