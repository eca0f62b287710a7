"""Nothing the runner starts outlives it by more than a few seconds, even
when the runner is killed with SIGKILL (the OOM killer, kill -9): neither an
engine worker in the middle of a call, nor an anchor or evidence command,
nor a process such a command left running in the background."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import process_gone

HERE = Path(__file__).resolve().parent

# What the "runner" does: start an engine pool whose call never returns and a
# command (as the anchorer starts its own) that leaves a child behind; say
# every pid; then wait to be killed.
RUNNER = """
import os, sys, threading, time
sys.path[:0] = [{here!r}, {tests!r}]
from confirmatory.engine.pool import ProcessEnginePool
from confirmatory.runtime import children
out = sys.argv[1]
pool = ProcessEnginePool("test_orphans:write_pid_then_compute_forever", workers=2)
for i in range(2):
    threading.Thread(target=pool.call, args=("calculate", {{"out": out + ".w" + str(i)}}, {{}}), daemon=True).start()
import subprocess
cmd = children.start(["sh", "-c", "sleep 600 & echo $! > " + out + ".bg; exec sleep 600"],
                     cwd=".", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
with open(out + ".cmd", "w") as f:
    f.write(str(cmd.pid))
with open(out + ".reaper", "w") as f:
    f.write(str(children.reaper_pid()))
time.sleep(600)
"""


def write_pid_then_compute_forever(op, payload, features):
    with open(payload["out"], "w") as f:
        f.write(str(os.getpid()))
    while True:  # seconds of CPU a call, without end
        sum(range(10_000))


def _pids(base: Path, suffixes: tuple[str, ...], timeout_s: float = 60) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return {s: int(Path(f"{base}{s}").read_text()) for s in suffixes}
        except (FileNotFoundError, ValueError):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the runner did not say its children's pids: {sorted(base.parent.iterdir())}"
                ) from None
            time.sleep(0.05)


def _kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.mark.slow
def test_a_runner_killed_with_sigkill_leaves_no_engine_worker_or_command_running(tmp_path):
    base = tmp_path / "pids"
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER.format(here=str(HERE), tests=str(HERE.parent)), str(base)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids = {}
    try:
        pids = _pids(base, (".w0", ".w1", ".bg", ".cmd", ".reaper"))
        for pid in pids.values():
            assert not process_gone(pid, timeout=0), pid  # all running while the runner is
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(timeout=30)
        killed = time.monotonic()
        # Workers, the command, its background child and the reaper itself:
        # each gone within a few seconds (the reaper's grace is 2 s).
        left = {name: pid for name, pid in pids.items() if not process_gone(pid, timeout=8)}
        assert left == {}, f"still running {time.monotonic() - killed:.1f} s after the kill: {left}"
    finally:
        runner.kill()
        _kill_all(pids.values())


def test_the_reaper_forgets_a_command_that_ended_and_stops_one_left_at_the_runners_exit(tmp_path):
    # In this process: a command that ends by itself is forgotten (its group
    # empty); the reaper keeps running for the next one.
    from confirmatory.runtime import children

    done = children.start(["true"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done.wait(timeout=30)
    reaper = children.reaper_pid()
    assert reaper is not None and not process_gone(reaper, timeout=0)
    # A runner that exits normally while a command's background child still
    # runs: the reaper sees the pipe end and stops that child too.
    code = (
        "import subprocess, sys\nfrom confirmatory.runtime import children\n"
        f"p = children.start(['sh', '-c', 'sleep 600 & echo $! > {tmp_path}/bg'], cwd='.', "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\np.wait()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    bg = int((tmp_path / "bg").read_text())
    try:
        assert process_gone(bg, timeout=8), "a command's background child outlived the runner that started it"
    finally:
        _kill_all([bg])
