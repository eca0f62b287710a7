"""Helpers for tests of the commands the runner starts and must stop."""

from __future__ import annotations

import contextlib
import os
import signal
import time


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
