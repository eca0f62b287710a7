"""Real disk faults under a real runner process (docs/RUN.md, 15a: the disk).

Each test runs ``confirmatory run`` as a process on the minimal design
against the bundled simulator (tests/diskfaults.py makes the faulted run
directories): a full tmpfs (ENOSPC), a file-size limit (EFBIG), and EIO
injected into an fsync by strace. Each time the runner exits 4, stops
with cause ``runner-error`` naming the file and the errno, never fsyncs a
descriptor again after a write or fsync of it failed (read from strace's
log), and ``confirmatory verify`` states the run honestly.

What was measured with these real faults (the run's free-space floor
lowered to 0 so that the fault is reached; docs/RUN.md, 15a-15c):

- ENOSPC: the run directory on a 160 KiB tmpfs. The disk fills about a
  third of the way in (in the runs measured, a record's write failed
  first); a model's log may end in a torn line (tmpfs writes what fits).
  Exit 4; ``verify`` says ``crashed`` (exit 3, no violation); once the tmpfs
  is remounted larger, ``continue`` completes the run and ``verify`` exits 0.
- EFBIG: RLIMIT_FSIZE of 8192 bytes (SIGXFSZ ignored), a model's run.jsonl
  cut at the limit mid-line: exit 4, ``crashed`` (exit 3); ``continue``, run
  without the limit, completes it (``verify`` exit 0).
- EIO injected by ``strace -e inject=fsync:error=EIO:when=N`` into: the 10th
  fsync of a model's run.jsonl (the line is on disk, never acknowledged); a
  record's directory (the record removed, a late cost); host.jsonl's 3rd;
  every thread's 90th fsync (a lane's, at a record's temporary file). Each:
  exit 4, ``crashed`` (exit 3, no violation), and ``continue`` without strace
  completes the run (exit 0). The final anchor (anchors.jsonl's 3rd fsync,
  after every close line): the run is not stopped, its close says
  ``completed``, but the command exits 4 saying the final anchor could not
  be written; ``verify`` says ``crashed after its close line``, exit 3,
  naming ``confirmatory push-anchor RUN_DIR``, after which it passes.
- strace's log (``-f -y``: every fsync, write, open and close of every
  process; about 300 fsyncs of run files in the every-thread run) shows no
  fsync of a descriptor after a write or fsync of it failed, and no fsync of
  that file at all afterwards; each fault but the final anchor's exits 4
  with a ``runner-error`` stop naming the file and the errno. Each test
  takes 10-25 s (strace slows the run about 2.5 times). Five planted faults
  (a retried fsync of a log or of a record, the errno's name dropped, a
  record kept after its directory's fsync failed, host.jsonl's failure
  called a sampler failure) each fail a named test (docs/MUTANTS.md).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from diskfaults import Faulted, FsyncAudit, _env, audit_fsyncs, efbig_run, eio_run, enospc_run, filled_run

from confirmatory.records.chain import ChainError
from confirmatory.records.reader import iter_lines

pytestmark = pytest.mark.slow

END_FAILED = "NOT EVERY LINE OF THE RUN'S END COULD BE WRITTEN"
WRITE_FAILED = "THE RUN'S FILES COULD NOT BE WRITTEN"
RECORDS_IN_A_FULL_RUN = 54  # 3 models x 6 households x 3 arms, each at least once


def _on_disk(path: Path) -> list[dict]:
    """A log's complete lines, up to a torn tail (what was acknowledged, and
    perhaps a line whose fsync failed)."""
    out: list[dict] = []
    try:
        out.extend(line.obj for line in iter_lines(path))
    except ChainError:
        pass
    return out


def _run_stops(run_dir: Path) -> list[tuple[str, dict]]:
    logs = [run_dir / "run.jsonl", *sorted((run_dir / "models").glob("*/run.jsonl"))]
    return [
        (str(p.relative_to(run_dir)), e)
        for p in logs
        for e in _on_disk(p)
        if e.get("event") == "stop" and e.get("scope") == "run"
    ]


def assert_stopped_naming(f: Faulted, errno_name: str) -> str:
    """Exit 4 without a traceback; the run stopped (runner-error) with a
    detail naming a file of the run and the errno by name. Returns the detail."""
    assert f.returncode == 4, f.stderr[-3000:]
    assert "Traceback" not in f.stderr, f.stderr[-3000:]
    stops = _run_stops(f.run_dir)
    assert stops, f"no run-scope stop on disk: {f.stderr[-2000:]}"
    assert {e["cause"] for _, e in stops} == {"runner-error"}, stops
    detail = stops[0][1]["detail"]
    assert all(e["detail"] == detail for _, e in stops), stops  # one stop, the same in every log
    named = re.search(rf"{re.escape(str(f.run_dir))}/\S+ .*\b{errno_name} \(", detail)
    assert named, f"the stop does not name the file and {errno_name}: {detail}"
    (said,) = [
        line for line in f.stderr.splitlines() if line.startswith(f"  stopped, cause runner-error: {WRITE_FAILED}: ")
    ]
    assert detail in said, (said, detail)
    return detail


def assert_mid_run(f: Faulted) -> None:
    records = list(f.run_dir.glob("models/*/records/*/*/*.json"))
    assert 0 < len(records) < RECORDS_IN_A_FULL_RUN, len(records)


def assert_no_fsync_retried(f: Faulted, errno_name: str, call: str = "") -> FsyncAudit | None:
    """From strace's log: the fault happened (a write or fsync of a run file
    returned the errno), and no descriptor whose write or fsync failed was
    fsynced again, nor the file through another one."""
    if f.strace_log is None:
        return None  # strace is not installed: the EIO tests skip, naming it; .ci/run installs it
    audit = audit_fsyncs(f.strace_log, f.run_dir)
    assert audit.failed_with(errno_name, call), audit.failed
    assert audit.retried == [], audit.retried
    assert audit.file_again == [], audit.file_again
    return audit


def verify(run_dir: Path) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "confirmatory", "verify", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    return done.returncode, done.stdout.splitlines()[0] if done.stdout else "", done.stdout


def assert_verify_honest(f: Faulted) -> tuple[int, str]:
    """verify says what the runner said: a run whose files could not be
    written ended as a crash does (no close line, no final anchor: docs/RUN.md
    "The disk"), so verify says crashed (exit 3) with no violation, and names
    continue as the way on."""
    rc, state, out = verify(f.run_dir)
    assert WRITE_FAILED in f.stderr and END_FAILED not in f.stderr, f.stderr[-3000:]
    assert not _on_disk(f.run_dir / "run.jsonl") or not [
        e for e in _on_disk(f.run_dir / "run.jsonl") if e.get("event") == "close"
    ], "a close line after a disk fault"
    assert rc == 3 and state.startswith("state: crashed"), out[:3000]
    assert f"confirmatory continue {f.run_dir}" in state, state
    return rc, state


def assert_continues(f: Faulted, closed_ok: bool = False) -> None:
    """Once the disk is fixed (no file-size limit, no injected error, more room),
    continue carries the run on to a complete run whose every invariant holds
    (``closed_ok``: or, the run having closed before the fault, writes its
    final anchor and pushes it)."""
    closed = any(e.get("event") == "close" for e in _on_disk(f.run_dir / "run.jsonl"))
    done = subprocess.run(
        [sys.executable, "-m", "confirmatory", "continue", str(f.run_dir), "--reason", "the disk was fixed", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rc, state, out = verify(f.run_dir)
    assert rc == 0 and state.startswith("state: complete"), out[:3000]
    assert "continued after a crash" in out or (closed_ok and closed), out[:3000]


# ------------------------------------------------------------------ ENOSPC


def test_a_disk_that_fills_mid_run_stops_it_naming_enospc_and_verify_says_so(tmp_path):
    with enospc_run(tmp_path) as f:
        assert_stopped_naming(f, "ENOSPC")
        assert_mid_run(f)
        assert_no_fsync_retried(f, "ENOSPC")
        assert_verify_honest(f)
        f.grow()  # the disk fixed: room again
        assert_continues(f)


# Each log in turn the first whose write meets a full disk (the disk filled
# just before that write), and two with a little room left, where small
# writes still go through and the runner-error stop may land in run.jsonl
# and be torn or missing in a model's log: whatever the failed write leaves,
# verify says crashed with no violation, and continue carries the run on once
# the disk has room.
FIRST_TO_FAIL = {
    "a model's run.jsonl": (r"/models/truncates/run\.jsonl\tattempt$", 3, 0),
    "a model's admission.jsonl": (r"/models/careful/admission\.jsonl\tdecision$", 3, 0),
    "host.jsonl": (r"/run-full/host\.jsonl\tsample$", 2, 0),
    "anchors.jsonl": (r"/run-full/anchors\.jsonl\tanchor$", 2, 0),
    "anchor-pushes.jsonl": (r"/run-full/anchor-pushes\.jsonl\tpush$", 1, 0),
    "a record": (r"/records/.*\tfile$", 6, 0),
    "the runner-error stop, a page left": (r"/models/sloppy/run\.jsonl\tattempt$", 3, 4096),
    "the runner-error stop, two pages left": (r"/models/careful/run\.jsonl\tattempt$", 2, 8192),
}


@pytest.mark.parametrize("case", list(FIRST_TO_FAIL))
def test_whichever_log_meets_the_full_disk_first_the_run_is_crashed_and_continued(tmp_path, case):
    at, count, leave = FIRST_TO_FAIL[case]
    with filled_run(tmp_path, at, count, leave=leave, witness_on_disk=True) as f:
        assert f.returncode == 4 and "ENOSPC" in f.stderr, f.stderr[-3000:]
        assert "Traceback" not in f.stderr, f.stderr[-3000:]
        # verify on the full disk: crashed, no violation; what it could not
        # check (a witness fetch that cannot write) is said, not failed
        clone = f.mount / "witness" / "clone"
        done = subprocess.run(
            [sys.executable, "-m", "confirmatory", "verify", str(f.run_dir), "--witness", str(clone)],
            capture_output=True,
            text=True,
            timeout=120,
            env=_env(),
        )
        assert done.returncode == 3, done.stdout[:3000]
        assert done.stdout.startswith("state: crashed") and "FAIL" not in done.stdout, done.stdout[:3000]
        (f.mount / "filler").unlink()
        f.grow()  # room again, above the runner's free-space floor
        assert_continues(f, closed_ok=True)


# ------------------------------------------------------------------ EFBIG


def test_a_file_size_limit_stops_the_run_naming_efbig_and_verify_says_so(tmp_path):
    f = efbig_run(tmp_path)
    assert_stopped_naming(f, "EFBIG")
    assert_mid_run(f)
    assert_no_fsync_retried(f, "EFBIG", "write")
    assert_verify_honest(f)
    assert_continues(f)  # continue runs without the limit


# ------------------------------------------------------------------ EIO

# id: (the when-th fsync, of which file (None: every thread's))
EIO_CASES = {
    # The 10th line of a model's run.jsonl: its write went through, its
    # fsync failed; the writer fails for good.
    "log": (10, "models/truncates/run.jsonl"),
    # The directory of a record, after the rename: the name may not be
    # durable, so the record is removed again and counted as lost.
    "record-directory": (1, "models/truncates/records/m-04/alone"),
    # host.jsonl: a runner error like any log's, not a sampler failure.
    "host-log": (3, "host.jsonl"),
    # Every thread's 90th fsync (strace counts per thread). Only one thread
    # makes that many: the truncates model's one lane (about 130 in a run,
    # the spend journal's lines included), mid-run, at a record's temporary
    # file. The two lanes of each other model make about 70 each (56 was
    # the figure before the journal, when they made about 47), the main
    # thread at most 48, the host sampler one a second.
    "every-thread": (90, None),
}


@pytest.mark.parametrize("case", list(EIO_CASES))
def test_eio_on_an_fsync_stops_the_run_and_no_failed_descriptor_is_fsynced_again(tmp_path, case):
    when, only = EIO_CASES[case]
    f = eio_run(tmp_path, when, only=only)
    detail = assert_stopped_naming(f, "EIO")
    assert_mid_run(f)
    audit = assert_no_fsync_retried(f, "EIO", "fsync")
    rc, state = assert_verify_honest(f)
    if only is None:
        assert audit is not None and audit.fsyncs > 100, audit  # the log holds every fsync of the run
        # The truncates lane's, at a record's temporary file: the record is
        # not written, its spend is a late cost, and every log held.
        assert len(audit.failed) == 1 and re.search(
            r"/models/truncates/records/[^>]*\.tmp>\) += -1 EIO", audit.failed[0]
        ), audit.failed
        assert "fsync of /" in detail and "/records/" in detail, detail
    else:
        assert f"{f.run_dir / only}" in detail, detail
    if case == "record-directory":
        # the record it could not make durable is gone, and its spend is a late cost saying why
        assert not (f.run_dir / only / "0.json").exists()
        late = [e for e in _on_disk(f.run_dir / "models" / "truncates" / "run.jsonl") if e["event"] == "late-cost"]
        assert late and "fsync of the directory of" in late[-1]["reason"], late
    if case == "host-log":
        assert detail.startswith("sampler: ") and "host.jsonl" in detail, detail
    assert_continues(f)  # continue runs without strace's injected errors


def test_a_runner_error_stop_in_run_jsonl_only_explains_the_late_cost_of_the_record_it_lost(tmp_path):
    """The record's directory fsync fails (EIO): its spend is a late cost with
    a reason, and the run stops, cause runner-error, in run.jsonl first; the
    runner is killed right then, before any model's log has the stop. The
    late cost's reading finds the stop in run.jsonl (docs/RUN.md: a stop not
    yet copied into a model's log is the crash's): crashed, no violation,
    and continue carries the run on."""
    when, only = EIO_CASES["record-directory"]
    f = eio_run(tmp_path, when, only=only, env={"CONFIRMATORY_KILL_AT": r"/run-eio/run\.jsonl\tstop$"})
    assert f.returncode == -9, f.stderr[-3000:]
    late = [e for e in _on_disk(f.run_dir / "models" / "truncates" / "run.jsonl") if e["event"] == "late-cost"]
    assert late and late[-1].get("reason"), late
    stops = _run_stops(f.run_dir)
    assert [where for where, _ in stops] == ["run.jsonl"] and stops[0][1]["cause"] == "runner-error", stops
    rc, state, out = verify(f.run_dir)
    assert rc == 3 and state.startswith("state: crashed") and "FAIL" not in out, out[:3000]
    assert_continues(f)


def test_eio_on_the_final_anchor_leaves_a_run_verify_calls_crashed_and_push_anchor_finishes(tmp_path):
    """The main thread's 3rd fsync of anchors.jsonl (its open line, the first
    anchor, then the final anchor) fails, after every close line: the run is
    not stopped (its close says completed) but exits 4, saying the final
    anchor could not be written. Its line is on disk, never acknowledged:
    verify says crashed after the close line (exit 3) and names push-anchor,
    which pushes it; verify then passes."""
    f = eio_run(tmp_path, 3, only="anchors.jsonl")
    assert f.returncode == 4 and "Traceback" not in f.stderr, f.stderr[-3000:]
    # the final anchor is the file's last line; on a slow machine the anchor
    # thread may have written a periodic anchor before it (its own 1st fsync)
    anchors = _on_disk(f.run_dir / "anchors.jsonl")
    assert anchors[-1].get("final") is True, anchors[-1]
    assert (
        f"{END_FAILED} (1): the final anchor: {f.run_dir}/anchors.jsonl: fsync of line {len(anchors) - 1} failed: "
        "EIO (Input/output error)"
    ) in f.stderr, f.stderr[-3000:]
    assert _run_stops(f.run_dir) == []
    (close,) = [e for e in _on_disk(f.run_dir / "run.jsonl") if e["event"] == "close"]
    assert close["status"] == "completed"
    audit = assert_no_fsync_retried(f, "EIO", "fsync")
    assert audit is not None and len(audit.failed) == 1 and "anchors.jsonl" in audit.failed[0], audit
    rc, state, out = verify(f.run_dir)
    assert rc == 3 and state.startswith("state: crashed after its close line"), out[:3000]
    assert f"confirmatory push-anchor {f.run_dir}" in state, state
    pushed = subprocess.run(
        [sys.executable, "-m", "confirmatory", "push-anchor", str(f.run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert pushed.returncode == 0, pushed.stderr
    rc, state, out = verify(f.run_dir)
    assert rc == 0 and state.startswith("state: complete"), out[:3000]
