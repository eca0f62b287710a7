"""The kill suites' process server (tests/procserver.py) behaves as subprocess.Popen does where they use it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import procserver


def test_exit_codes_streams_environment_and_working_directory_are_a_popen_childs(tmp_path):
    code = "import os, sys; print(os.getcwd(), os.environ['MARK']); print('e' * 70000, file=sys.stderr); sys.exit(7)"
    proc = procserver.popen(
        [sys.executable, "-c", code],
        env={**os.environ, "MARK": "m-1"},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, len(err)) == (7, f"{tmp_path} m-1\n", 70001)
    assert procserver.run([sys.executable, "-c", "raise SystemExit('no')"], capture_output=True, text=True).stderr == (
        "no\n"
    )


def test_a_sigkill_is_minus_9_and_a_kill_after_the_end_reaches_no_other_process(tmp_path):
    proc = procserver.popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.DEVNULL)
    assert proc.poll() is None
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    ended = procserver.popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while not (os.path.exists(f"/proc/{ended.pid}") and open(f"/proc/{ended.pid}/stat").read().split()[2] == "Z"):
        assert time.monotonic() < deadline, "the child never ended"
        time.sleep(0.01)
    os.kill(ended.pid, signal.SIGKILL)  # its zombie, not reaped until the client is told: no error
    assert ended.wait(timeout=30) == 0
    ended.kill()  # told: nothing is sent
    try:
        procserver.popen([sys.executable, "-c", "import time; time.sleep(5)"]).wait(timeout=0.2)
    except subprocess.TimeoutExpired:
        pass
    else:
        raise AssertionError("wait did not time out")
