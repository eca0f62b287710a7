"""Helpers for tests of the commands the runner starts and must stop."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def process_gone(pid: int, timeout: float = 10) -> bool:
    """Whether process ``pid`` has ended within ``timeout`` s: no such process,
    or a zombie (dead, waiting for its new parent, maybe init, to reap it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


@contextlib.contextmanager
def killed_afterwards(pidfile):
    """Yield; then SIGKILL the process whose pid ``pidfile`` holds, if it is
    still there: a test that fails must not leave it running."""
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


# Holds the lock named by argv[1] until its stdin closes; says "held" once it does.
HOLDER = (
    "import sys\nfrom filelock import FileLock\nlock = FileLock(sys.argv[1])\nlock.acquire()\n"
    "print('held', flush=True)\nsys.stdin.read()\nlock.release()\n"
)


@contextmanager
def held_by_another_process(lock_file: Path) -> Iterator[subprocess.Popen]:
    """A second process that holds ``lock_file`` (as a runner holds its run's lock) until the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock_file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def as_a_user_who_may_not_write(argv: list[str]) -> list[str]:
    """``argv`` run without the right to write to files it does not own: as
    root (whom chmod does not stop) in a new user namespace, where root's
    files are another user's; skipped where there is none."""
    if os.geteuid() != 0:
        return argv
    probe = subprocess.run(["unshare", "-U", "true"], capture_output=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("running as root, and no user namespace to drop the right to write")
    return ["unshare", "-U", *argv]
