"""Commands the runner starts and must be able to stop, whatever they do.

An evidence command (``confirmatory.host.sources``) and the anchor command
(``confirmatory.anchors.anchorer``) are the user's: one may hang, leave children
running behind it (a shell pipeline, the git processes under the witness
script), or print without end. Each runs here in a session of its own,
stdin closed, under a timeout and a bound on its output (read into memory
through pipes, ``run_captured``, or written to a file whose size is watched,
``wait_watching``); past either, its whole process group is stopped
(``kill_group``: SIGTERM, a grace, then SIGKILL), not just the command
itself. No psutil here.

None outlives the runner, even one killed with SIGKILL (the OOM killer, a
reboot's kill -9): each command's process group is told to a reaper, a small
process of its own started with the first command, that reads the runner
through a pipe. When the pipe ends (the runner is gone, however it went) the
reaper stops every group still there (SIGTERM, ``REAPER_GRACE_S``, SIGKILL)
and exits. It forgets a group once that group is empty, so the group's
number, free again, can never lead it to a stranger.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, cast

# SIGTERM first (git removes its lock files on SIGTERM), SIGKILL what is left this long after.
TERM_GRACE_S = 3.0
_READ_CHUNK = 1 << 16
_GROUP_POLL_S = 0.01  # how often kill_group looks whether the group is gone yet
# How often the size of a command's output file is looked at (wait_watching):
# it may pass its bound by what the command writes in that time.
FILE_POLL_S = 0.02

# Why a command was stopped (Finished.stopped).
TIMEOUT = "timeout"
OUTPUT = "output"  # its output passed the bound

_DONE = "done"  # what a supervise step says when the command has ended


@dataclass(frozen=True, slots=True)
class Finished:
    """How a command ended: its return code (negative: the signal that ended
    it), and why the runner stopped it (None: it ended by itself)."""

    rc: int
    stopped: str | None = None
    stdout: bytes = b""
    stderr: bytes = b""


# How long the reaper lets a group end after SIGTERM before SIGKILL.
REAPER_GRACE_S = 2.0

# The reaper: reads "+PGID" / "-PGID" lines on stdin; at EOF stops what is left.
# Isolated (-I): a study's directory on sys.path (a json.py) cannot break it.
_REAPER = r"""
import os, select, signal, sys, time
grace = float(sys.argv[1])
groups = set()
def alive(g):
    try:
        os.killpg(g, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
fd, buf = sys.stdin.fileno(), b""
while True:
    if select.select([fd], [], [], 0.5)[0]:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        *lines, buf = (buf + chunk).split(b"\n")
        for line in lines:
            n = int(line)
            (groups.add if n > 0 else groups.discard)(abs(n))
    groups = {g for g in groups if alive(g)}
def kill(gs, sig):
    for g in gs:
        try:
            os.killpg(g, sig)
        except OSError:
            pass
left = [g for g in groups if alive(g)]
kill(left, signal.SIGTERM)
end = time.monotonic() + grace
while left and time.monotonic() < end:
    time.sleep(0.02)
    left = [g for g in left if alive(g)]
kill(left, signal.SIGKILL)
"""

_reaper_lock = threading.Lock()
_reaper: subprocess.Popen[bytes] | None = None


def _tell_reaper(line: str) -> None:
    """Start the reaper on first use (after a fork, anew) and send it ``line``."""
    global _reaper
    with _reaper_lock:
        if _reaper is None or _reaper.poll() is not None or getattr(_reaper, "_owner", None) != os.getpid():
            _reaper = subprocess.Popen(
                [sys.executable, "-I", "-c", _REAPER, str(REAPER_GRACE_S)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            _reaper._owner = os.getpid()  # type: ignore[attr-defined]
        assert _reaper.stdin is not None
        try:
            _reaper.stdin.write(f"{line}\n".encode())
            _reaper.stdin.flush()
        except OSError:
            pass  # the reaper died: a later command starts another


def reaper_pid() -> int | None:
    """The reaper's pid while there is one (tests)."""
    return _reaper.pid if _reaper is not None and _reaper.poll() is None else None


def start(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None,
    stdout: int | IO[Any] | None,
    stderr: int | IO[Any] | None,
) -> subprocess.Popen[bytes]:
    """``argv`` in a session of its own, stdin closed: ``kill_group`` then
    reaches every process it starts, and the reaper stops its group if the
    runner dies first. Raises OSError when it cannot start."""
    proc = subprocess.Popen(
        list(argv), cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True
    )
    _tell_reaper(f"+{proc.pid}")
    return proc


def kill_group(proc: subprocess.Popen[bytes], grace: float = TERM_GRACE_S) -> None:
    """SIGTERM the command's process group, SIGKILL what is left of it after
    ``grace`` s (the command, or a child of it that outlived it); reap it.

    A command already reaped is left alone: once its group is empty, its pid
    (the group's id) may be given to a stranger."""
    if proc.returncode is not None:
        return
    # Race: the command may exit between the check and here; until it is
    # reaped its pid (the group's id) stays taken, so this cannot hit a stranger.
    if _signal_group(proc, signal.SIGTERM):
        deadline = time.monotonic() + grace
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        # The command is reaped now or still running; while any process of its
        # group is left (a zombie counts until its new parent reaps it), the
        # group's id stays taken.
        while _signal_group(proc, 0):
            if time.monotonic() >= deadline:
                _signal_group(proc, signal.SIGKILL)
                break
            time.sleep(_GROUP_POLL_S)
    proc.wait()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> bool:
    """Send ``sig`` to the command's process group; False when the group is gone."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return False
    return True


def _supervise(
    proc: subprocess.Popen[bytes], timeout: float | None, step: Callable[[float | None], str | None], grace: float
) -> str | None:
    """Call ``step(wait_s)`` (wait at most that long for the command, None:
    for as long as it takes) until it says the command is done; past
    ``timeout`` s, or when a step names another reason to stop it, stop its
    group. Returns why it was stopped (None: it ended by itself)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            wait_s = None
            if deadline is not None:
                wait_s = deadline - time.monotonic()
                if wait_s <= 0:
                    stopped = TIMEOUT
                    break
            said = step(wait_s)
            if said == _DONE:
                return None
            if said is not None:
                stopped = said
                break
    except BaseException:
        kill_group(proc, grace)  # nothing is left running behind an error
        raise
    kill_group(proc, grace)
    return stopped


class _Pipes:
    """A command's stdout and stderr read from pipes as they come: stdout
    up to ``max_stdout`` bytes (past it the step says OUTPUT), of stderr
    only its last ``stderr_tail`` bytes."""

    def __init__(self, proc: subprocess.Popen[bytes], max_stdout: int, stderr_tail: int):
        self._proc = proc
        self._selector = selectors.DefaultSelector()
        # (cast: its stdout and stderr are pipes, run_captured's)
        self._selector.register(cast(IO[bytes], proc.stdout), selectors.EVENT_READ, "stdout")
        self._selector.register(cast(IO[bytes], proc.stderr), selectors.EVENT_READ, "stderr")
        self._stdout: list[bytes] = []
        self._stdout_bytes = 0
        self._max_stdout = max_stdout
        self._stderr = b""
        self._stderr_tail = stderr_tail

    def step(self, wait_s: float | None) -> str | None:
        if not self._selector.get_map():
            # Both pipes are at their end: only the command's exit is awaited.
            # (Not before: a command reaped while a child of it still holds a
            # pipe would leave kill_group no safe group id to signal.)
            try:
                self._proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                return None
            return _DONE
        for key, _ in self._selector.select(wait_s):
            chunk = os.read(key.fd, _READ_CHUNK)
            if not chunk:
                self._selector.unregister(key.fileobj)
                continue
            if key.data == "stderr":
                self._stderr = (self._stderr + chunk)[-self._stderr_tail :]
                continue
            self._stdout.append(chunk)
            self._stdout_bytes += len(chunk)
            if self._stdout_bytes > self._max_stdout:
                self._stdout.clear()  # not wanted any more
                return OUTPUT
        return None

    def stdout(self) -> bytes:
        return b"".join(self._stdout)

    def stderr(self) -> bytes:
        return self._stderr

    def close(self) -> None:
        self._selector.close()
        cast(IO[bytes], self._proc.stdout).close()  # (pipes, as above)
        cast(IO[bytes], self._proc.stderr).close()


def run_captured(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None,
    timeout: float,
    max_stdout: int,
    stderr_tail: int,
    grace: float = TERM_GRACE_S,
) -> Finished:
    """Run ``argv`` to its end, its stdout and stderr read through pipes:
    ``stdout`` is all of it, ``stderr`` its last ``stderr_tail`` bytes.

    Past ``timeout`` s (counted until the pipes close too: a child that
    holds them counts as the command), or once stdout passes ``max_stdout``
    bytes, its process group is stopped (``stopped`` TIMEOUT or OUTPUT; then
    no stdout). Memory held: ``max_stdout`` plus one read. Raises OSError
    when it cannot start."""
    proc = start(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pipes = _Pipes(proc, max_stdout, stderr_tail)
    try:
        stopped = _supervise(proc, timeout, pipes.step, grace)
    finally:
        pipes.close()
    return Finished(proc.returncode, stopped, pipes.stdout(), pipes.stderr())


def wait_watching(
    proc: subprocess.Popen[bytes],
    out: IO[bytes],
    *,
    timeout: float | None,
    max_output: int,
    grace: float = TERM_GRACE_S,
) -> str | None:
    """Wait for a command started (``start``) with its output to the file
    ``out``: past ``timeout`` s (None: no limit), or once ``out`` holds more
    than ``max_output`` bytes (looked at every FILE_POLL_S), its process
    group is stopped. Why it was stopped: TIMEOUT, OUTPUT, or None (it ended
    by itself); its return code is then ``proc.returncode``."""

    def step(wait_s: float | None) -> str | None:
        try:
            proc.wait(timeout=FILE_POLL_S if wait_s is None else min(wait_s, FILE_POLL_S))
        except subprocess.TimeoutExpired:
            return OUTPUT if os.fstat(out.fileno()).st_size > max_output else None
        return _DONE

    return _supervise(proc, timeout, step, grace)
