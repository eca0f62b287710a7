"""The runner as a process: real signals from outside, and a hard kill.

SIGTERM must stop every lane and still leave a complete, verifiable run.
SIGKILL cannot be handled: every acknowledged line must still be on disk,
every chain intact, and verify must say what is missing, never pass.
"""

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

from confirmatory.records.chain import log_seed, sha256_hex
from confirmatory.records.reader import check_chain
from confirmatory.testing.designs import write_design
from confirmatory.verify import verify_run

ROOT = Path(__file__).resolve().parents[2]
FAST = {"engine_factory": "confirmatory.testing.fakes:null_engine"}


def start_run(tmp_path: Path, *, prefix: tuple[str, ...] = (), households: int = 40) -> tuple[subprocess.Popen, Path]:
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.05} for i in range(households)]
    design = write_design(tmp_path / "design", households=hh, models=2, **FAST)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            *prefix,
            sys.executable,
            str(ROOT / "scripts" / "confirmatory_run.py"),
            "run",
            str(design),
            "--out",
            str(run_dir),
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Wait until attempts are being recorded (records are fsynced as they end).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(list((run_dir / "models").glob("*/records/*/*/*.json"))) >= 6:
            return proc, run_dir
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the runner exited ({proc.returncode}) before recording attempts: {err[-2000:]}")
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("the run recorded no attempts")


INTERRUPTS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP"))
# What CPython prints when a signal is handled while its Python handler is
# SIG_IGN or SIG_DFL (set while the signal was pending), and what it prints
# for an exception raised where nothing can catch it.
RACE_NOISE = ("ignored due to race condition", "Exception ignored", "Traceback", "KeyboardInterrupt", "Aborted")


def flood(proc: subprocess.Popen, deadline: float, interval_s: float = 0.002) -> int:
    """Send SIGINT, SIGTERM and SIGHUP in turn every ``interval_s`` until the
    process has exited (or the deadline): what a person leaning on Ctrl-C, or
    a service manager and a closing terminal together, do. Returns how many."""
    sent = 0
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            proc.send_signal(INTERRUPTS[sent % len(INTERRUPTS)])
        except ProcessLookupError:
            break
        sent += 1
        time.sleep(interval_s)
    return sent


@pytest.mark.slow
def test_sigterm_from_outside_stops_every_lane_and_leaves_a_verifiable_run(tmp_path):
    proc, run_dir = start_run(tmp_path)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 4, err
    assert "interrupt" in err
    report = verify_run(run_dir)
    assert report.ok, report.to_table()
    stops = [json.loads(line) for line in (run_dir / "run.jsonl").read_text().splitlines()]
    assert [s["cause"] for s in stops if s["event"] == "stop"] == ["interrupt"]


def _caught_and_ignored(pid: int) -> tuple[int, int]:
    """The process's caught and ignored signal masks (/proc/PID/status)."""
    fields = dict(
        line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line
    )
    return int(fields["SigCgt"], 16), int(fields["SigIgn"], 16)


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("nohup") is None or not Path("/proc/self/status").exists(), reason="needs nohup and /proc"
)
def test_a_run_started_under_nohup_outlives_its_terminal(tmp_path):
    # README: run it under nohup on a remote machine. nohup's ignored SIGHUP
    # (the ssh session closed) must stay ignored; SIGTERM still stops the run.
    proc, run_dir = start_run(tmp_path, prefix=("nohup",), households=200)
    try:
        _outlives_its_terminal(proc, run_dir)
    finally:
        if proc.poll() is None:  # a failed check: the run would go on for its 200 households
            proc.kill()
            proc.communicate()


def _outlives_its_terminal(proc: subprocess.Popen, run_dir: Path) -> None:
    hup = 1 << (signal.SIGHUP - 1)
    caught, ignored = _caught_and_ignored(proc.pid)
    assert ignored & hup and not caught & hup
    assert caught & (1 << (signal.SIGTERM - 1)) and caught & (1 << (signal.SIGINT - 1))
    assert proc.poll() is None
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[1]  # the run goes on
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 4, err
    assert f"interrupt: signal {int(signal.SIGTERM)})" in err, err
    assert f"signal {int(signal.SIGHUP)})" not in err and f"signal {int(signal.SIGHUP)} " not in err, err
    report = verify_run(run_dir)
    assert report.ok, report.to_table()


@pytest.mark.slow
def test_a_hard_kill_loses_no_acknowledged_line_and_verify_says_crashed(tmp_path):
    proc, run_dir = start_run(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    manifest_sha = sha256_hex((run_dir / "manifest.json").read_bytes())
    logs = {rel: manifest_sha for rel in ("run.jsonl", "host.jsonl", "anchors.jsonl", "anchor-pushes.jsonl")}
    for model_dir in (run_dir / "models").iterdir():
        msha = sha256_hex((model_dir / "manifest.json").read_bytes())
        for name in ("run.jsonl", "admission.jsonl"):
            logs[f"models/{model_dir.name}/{name}"] = msha
    for rel, msha in logs.items():
        check = check_chain(run_dir / rel, log_seed(msha, rel))
        # Each append is one write: a kill leaves whole lines (a torn tail
        # would be reported with its offset, never dropped).
        assert check.ok, (rel, check.problem)
    report = verify_run(run_dir)
    # no final anchor, no close: the crash's, not violations; never complete
    assert report.ok and report.state == "crashed", report.to_table()
    assert report.exit_status() == 3


@pytest.mark.slow
def test_the_runner_process_exits_even_when_a_lane_is_stuck_in_a_call_forever(tmp_path):
    hh = [{"id": "hh-000", "plan": {"m0:alone/0": "stuck"}, "stuck_s": 600}, {"id": "hh-001"}]
    design = write_design(
        tmp_path / "design",
        households=hh,
        models=[{"name": "m0", "timeout_s": 0.2}],
        rules={"attempt_deadline_s": 0.3},
        **FAST,
    )
    run_dir = tmp_path / "run"
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "confirmatory_run.py"),
            "run",
            str(design),
            "--out",
            str(run_dir),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 4, proc.stderr
    assert "stuck in an abandoned call" in proc.stderr
    assert time.monotonic() - started < 60
    report = verify_run(run_dir)
    assert report.ok, report.to_table()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
@pytest.mark.parametrize("first", [("SIGTERM",), ("SIGTERM", "SIGHUP", "SIGINT")], ids=["one", "together"])
def test_signals_after_the_first_change_nothing_while_the_runner_stops_and_exits(tmp_path, first):
    """After the first signal the run stops, writes its close and final
    anchor, prints its summary, and the process still has its end to go
    through (its lock released, its threads joined, the interpreter torn
    down: a second or more). The runner used to put back the previous
    handlers when the run closed: a later signal then raised
    KeyboardInterrupt (a traceback, exit 130) or killed the process (rc 143,
    129) instead of exit 4. A signal pending while the exit path sets SIG_IGN
    would make CPython print "Signal 2 ignored due to race condition". And
    the stop line named the last signal handled before the stop, not the
    first. The first comes alone, or several together (sent while the
    process is stopped by SIGSTOP, then continued: handled in one pass,
    lowest number first, so the stop line must name SIGHUP). Then every
    interrupt signal in turn, every 2 ms, until the process has exited."""
    import threading

    proc, run_dir = start_run(tmp_path)
    err_lines: list[str] = []
    reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True)
    reader.start()
    signums = [getattr(signal, name) for name in first]
    if len(signums) > 1:
        proc.send_signal(signal.SIGSTOP)
    for signum in signums:
        proc.send_signal(signum)
    if len(signums) > 1:
        proc.send_signal(signal.SIGCONT)
    signum = min(signums)
    for s in signums:
        wait_delivered(proc.pid, s)
    sent = flood(proc, time.monotonic() + 60)
    proc.wait(timeout=30)
    reader.join(timeout=10)
    err = "".join(err_lines)
    assert sent > 10, f"the process exited before later signals could be sent: {err[-2000:]}"
    assert proc.returncode == 4, (proc.returncode, sent, err[-3000:])
    for noise in RACE_NOISE:
        assert noise not in err, (noise, err[-3000:])
    lines = [json.loads(line) for line in (run_dir / "run.jsonl").read_text().splitlines()]
    stops = [line for line in lines if line.get("event") == "stop"]
    assert [(stop["cause"], stop.get("detail")) for stop in stops] == [("interrupt", f"signal {int(signum)}")], stops
    report = verify_run(run_dir)
    assert report.ok, report.to_table()


def test_the_end_summary_says_when_a_model_has_no_observation_at_all(tmp_path, capsys):
    # A model whose provider fails every call (unreachable all run): each
    # failure is rerun, then kept, and the run completes (exit 0), as the
    # rules say. Before, the summary was only the spend: nothing told the
    # team that one model's results are all failures.
    from confirmatory.cli.run import run_command

    hh = [{"id": f"hh-{i:03d}", "plan": {"m1:alone/*": "provider", "m1:calculator/*": "provider"}} for i in range(4)]
    design = write_design(tmp_path / "design", households=hh, models=2, **FAST)
    assert run_command(design, tmp_path / "run", quiet=True) == 0
    err = capsys.readouterr().err.splitlines()
    assert "  m0: 8 arm results: ok 8" in err, err
    assert (
        "  m1: NO OBSERVATION: none of its 8 arm results is ok or the model's own (provider 8); see models/m1/run.jsonl"
    ) in err, err
    # verify's "the records say" line said only "completed; ...; m1: 4 of 4
    # households ended": a reviewer saw nothing of it. It says it now, too.
    report = verify_run(tmp_path / "run")
    assert report.ok
    assert report.outcome == (
        "completed; m0: 4 of 4 households ended; m1: 4 of 4 households ended, "
        "NO OBSERVATION: none of its 8 arm results is ok or the model's own"
    ), report.outcome


SLOW_IMPORT_HARNESS = """import os, time
open(os.environ["CONFIRMATORY_TEST_MARK"], "w").close()
time.sleep(60)

def run(model, household, arm, pool, spend, clock):
    return {"answer": None}
"""


def _start_importing(tmp_path: Path, *, demo: bool = False) -> tuple[subprocess.Popen, Path]:
    """A runner process (``demo``: a demo's) held in its preflight: its
    harness's import marks a file, then sleeps for a minute. Returns once
    the mark is there."""
    from runhelpers import minimal_design

    (tmp_path / "study").mkdir()
    design = minimal_design(tmp_path / "study", "slow_import_harness", SLOW_IMPORT_HARNESS)
    mark, run_dir = tmp_path / "importing", tmp_path / "runs" / "r1"
    command = ["demo", "--design", str(design)] if demo else ["run", str(design)]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "confirmatory_run.py"), *command, "--out", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"CONFIRMATORY_TEST_MARK": str(mark), "PYTHONPATH": str(tmp_path / "study")},
    )
    deadline = time.monotonic() + 60
    while not mark.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the harness was never imported: {proc.communicate()}")
        time.sleep(0.01)
    return proc, run_dir


def _early_line(name: str, run_dir: Path) -> str:
    return f"interrupted before the run started ({name}): {run_dir} was not created and nothing was spent"


def wait_delivered(pid: int, signum: int, timeout_s: float = 10.0) -> None:
    """Until the kernel has delivered ``signum`` to the process (it is no
    longer pending in /proc/PID/status), and 10 ms more for its handler."""
    bit = 1 << (signum - 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fields = dict(
            line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line
        )
        if not (int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)) & bit:
            break
        time.sleep(0.001)
    time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_before_the_run_starts_ends_the_command_in_one_line_with_nothing_made(tmp_path, name):
    """The design is checked and the run set up before the Run takes the
    signals over: seconds (litellm's import, the harness's, the witness's
    probe). A signal then gave click's "Aborted!" and exit 1 (SIGINT), or
    killed the process without a word (SIGTERM rc -15, SIGHUP rc -1). Now it
    is one line and 128 + the signal's number, and the signals after it
    change nothing: every interrupt signal in turn, every 2 ms, from its
    delivery until the process has exited."""
    proc, run_dir = _start_importing(tmp_path)
    signum = getattr(signal, name)
    sent, out, err = _signal_then_flood(proc, signum)
    assert proc.returncode == 128 + signum, (proc.returncode, sent, err[-3000:])
    # (after the line the command starts with, saying what it checks while litellm loads)
    lines = err.strip().splitlines()
    assert (
        lines[-1:] == [_early_line(name, run_dir)]
        and all(line.startswith("starting: checking ") for line in lines[:-1])
        and len(lines) <= 2
    ), err
    for noise in RACE_NOISE:
        assert noise not in err, (noise, err)
    assert not run_dir.exists()


def _signal_then_flood(proc: subprocess.Popen, signum: int) -> tuple[int, str, str]:
    """Send ``signum``; from its delivery on, every interrupt signal in turn
    every 2 ms until the process exits. The signals flooded, its stdout and
    its stderr."""
    try:
        proc.send_signal(signum)
        wait_delivered(proc.pid, signum)
        sent = flood(proc, time.monotonic() + 30)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return sent, out, err


@pytest.mark.slow
@pytest.mark.parametrize("names", [("SIGTERM", "SIGINT"), ("SIGTERM", "SIGHUP", "SIGINT")])
def test_signals_that_arrive_together_before_the_run_starts_end_it_in_one_line(tmp_path, names):
    """Signals pending at once are handled in one pass, lowest number first.
    The early handler used to set SIG_IGN for the others as it handled the
    first, and CPython then printed a traceback for each of them ("OSError:
    Signal 15 ignored due to race condition"). They are made to arrive
    together by sending them while the process is stopped (SIGSTOP), then
    continuing it: the kernel delivers them all at once. The process cannot
    tell which came first: the lowest-numbered is taken."""
    proc, run_dir = _start_importing(tmp_path)
    try:
        proc.send_signal(signal.SIGSTOP)
        for name in names:
            proc.send_signal(getattr(signal, name))
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    first = min(names, key=lambda n: getattr(signal, n))
    assert proc.returncode == 128 + getattr(signal, first), (proc.returncode, err[-3000:])
    lines = err.strip().splitlines()
    assert (
        lines[-1:] == [_early_line(first, run_dir)]
        and all(line.startswith("starting: checking ") for line in lines[:-1])
        and len(lines) <= 2
    ), err
    assert not run_dir.exists()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_before_the_demos_run_starts_ends_the_demo_as_it_ends_run(tmp_path, name):
    """The demo runs `run` in-process, without its early handler: a Ctrl-C
    during the run's preflight gave click's "Aborted!" and exit 1 (SIGTERM:
    killed without a word, rc -15). Now the run's one line, the demo's own,
    and 128 + the signal's number; the signals after it change nothing."""
    proc, run_dir = _start_importing(tmp_path, demo=True)
    signum = getattr(signal, name)
    sent, out, err = _signal_then_flood(proc, signum)
    assert proc.returncode == 128 + signum, (proc.returncode, sent, err[-3000:])
    assert err.strip().splitlines()[-2:] == [
        _early_line(name, run_dir),
        f"confirmatory demo: the run did not start (exit status {128 + signum})",
    ], err
    for noise in RACE_NOISE:
        assert noise not in err, (noise, err)
    assert not run_dir.exists() and out == ""


GIT_FETCH_MARKS = """#!/bin/sh
# git, except that asking origin's tip (ls-remote: verify --witness asks it
# first, and fetches only a clone behind it) or a fetch first marks a file
# and waits: the demo's verify step held
case " $* " in
  *" ls-remote "*|*" fetch "*) touch "$CONFIRMATORY_TEST_FETCH_MARK"; sleep 5 ;;
esac
exec {git} "$@"
"""


@pytest.mark.slow
def test_a_signal_while_the_demo_verifies_is_not_called_one_before_the_run(tmp_path):
    """The run puts back, as it closes, the handlers it found; for the demo
    those were the early handler's, and a Ctrl-C while the demo verifies
    would then be said to have come before the run started, its run
    directory "not created". The demo's witness check (its git fetch) is
    held here by a git that waits first."""
    import shutil

    real_git = shutil.which("git")
    assert real_git
    bin_dir, mark = tmp_path / "bin", tmp_path / "fetching"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(GIT_FETCH_MARKS.format(git=real_git))
    (bin_dir / "git").chmod(0o755)
    run_dir = tmp_path / "runs" / "r1"
    design = ROOT / "confirmatory" / "demo" / "minimal.toml"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "scripts" / "confirmatory_run.py"),
            "demo",
            "--design",
            str(design),
            "--out",
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=os.environ | {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CONFIRMATORY_TEST_FETCH_MARK": str(mark)},
    )
    try:
        deadline = time.monotonic() + 120
        while not mark.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "confirmatory demo: verifying the run records and the witness" in err, err[-3000:]
    assert "before the run started" not in err and "was not created" not in err, err[-3000:]
    # as a Ctrl-C in the demo's verify step always ended it (click's word)
    assert proc.returncode == 1 and err.splitlines()[-1] == "Aborted!", (proc.returncode, err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    assert (run_dir / "manifest.json").is_file()


@pytest.mark.slow
def test_a_signal_as_the_demos_run_closes_is_not_called_one_before_the_run(tmp_path):
    """The Run puts back, as the last step of its close, the handlers it
    found, and in the demo those are the early handler's: from then until
    the demo puts back its own (the simulator stopping, the end summary:
    tens of ms) a Ctrl-C would be said to have come before the run started,
    its run directory "not created". SIGINT every 2 ms, from the progress
    table the run prints as it ends (just before its close) until the demo
    has said something of it."""
    import re
    import threading

    run_dir = tmp_path / "runs" / "r1"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "scripts" / "confirmatory_run.py"),
            "demo",
            "--design",
            str(ROOT / "confirmatory" / "demo" / "minimal.toml"),
            "--out",
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    said = ("Aborted!", "before the run started", "confirmatory demo: verifying")
    try:
        deadline = time.monotonic() + 120
        while not any(re.match(r"\[\d+:\d\d:\d\d\] run spend ", line) for line in list(lines)):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            time.sleep(0.001)
        sent = 0
        while proc.poll() is None and not any(s in line for line in list(lines) for s in said):
            proc.send_signal(signal.SIGINT)
            sent += 1
            time.sleep(0.002)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    reader.join(10)
    err = "".join(lines)
    assert sent and (run_dir / "manifest.json").is_file(), err[-3000:]
    assert "before the run started" not in err and "was not created" not in err, err[-3000:]
