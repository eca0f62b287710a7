"""Invariant 8 on continuation lines: paired with run.jsonl's by number, and
a gap only where a continuation was killed while it wrote them.

A continuation writes its line to every log in a fixed order (docs/RUN.md,
"A continuation cut short"); a SIGKILL between two of those writes leaves
the line in a prefix of that order and nothing else written, which the
next continuation carries on from (tests/engine/test_continue_again.py).
Any other gap (a log without the line while a log after it in the order
has it) is a violation, found here on a run whose logs were re-chained
after a continuation line was taken out, so the chain itself still holds.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from confirmatory.records.chain import dumps, log_seed, sha256_hex
from confirmatory.verify import verify_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_states as states  # noqa: E402


def rechain_without(path: Path, manifest_sha: str, rel: str, event: str) -> None:
    """Take the first ``event`` line out of a log and chain the rest again."""
    objs = [json.loads(x) for x in path.read_bytes().splitlines()]
    drop = next(i for i, o in enumerate(objs) if o.get("event") == event)
    head, out = log_seed(manifest_sha, rel), []
    for i, o in enumerate(o for k, o in enumerate(objs) if k != drop):
        line = dumps({**{k: v for k, v in o.items() if k not in ("seq", "prev")}, "seq": i, "prev": head})
        head = sha256_hex(line)
        out.append(line + b"\n")
    path.write_bytes(b"".join(out))


@pytest.fixture(scope="module")
def continued(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lines")
    run_dir, ended = states.kill_at(tmp, "a third of the households ended")
    assert not ended
    done = subprocess.run(
        [sys.executable, str(states.SCRIPT), "continue", str(run_dir), "--reason", "r", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def _messages(report) -> list[str]:
    return [v.message for r in report.results for v in r.first if r.invariant == 8]


@pytest.mark.slow
def test_a_continuation_line_missing_from_a_log_before_one_that_has_it_is_a_violation(continued, tmp_path):
    assert verify_run(continued).ok
    run_dir = tmp_path / "run"
    shutil.copytree(continued, run_dir)
    manifest_sha = sha256_hex((run_dir / "manifest.json").read_bytes())
    rechain_without(run_dir / "host.jsonl", manifest_sha, "host.jsonl", "continuation")
    report = verify_run(run_dir)
    assert not report.ok
    missing = [m for m in _messages(report) if m.startswith("continuation 1's line is missing from 1 log(s)")]
    assert missing and "a log after them in its writing order has it" in missing[0], _messages(report)


@pytest.mark.slow
def test_a_kept_torn_tail_no_continuation_names_is_a_violation(continued, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(continued, run_dir)
    (run_dir / "host.jsonl.torn-1").write_bytes(b'{"event":"sam')
    report = verify_run(run_dir)
    assert "a kept torn tail that no continuation line names" in _messages(report), _messages(report)
