"""A fault plan for the kill suite: SIGKILL this process right after a durable write.

``CONFIRMATORY_KILL_AFTER_WRITES=N`` makes the process kill itself with a
real SIGKILL as soon as its N-th durable write is on disk (a log line
appended and fsynced, a record file renamed into place and its directory
fsynced, a torn tail moved aside). A continuation writes its first lines
from one thread, in an order fixed by the records, so N names one step of
it: the kill suite (tests/engine/test_continue_again.py) stops a continuation
between any two of its writes this way. ``CONFIRMATORY_WRITE_TRACE=FILE``
appends one line per durable write to FILE (its number, the file written,
the line's event, and its round when not 0), so a test can choose N from
what each write was. ``CONFIRMATORY_KILL_AT=REGEX`` kills after the first
write whose trace text (``path<TAB>event``) the regular expression matches:
a step of the lanes' concurrent work ("the first round-1 household line")
has no stable number, but it has a name; ``CONFIRMATORY_KILL_AT_COUNT=K``
waits for its K-th match.

``CONFIRMATORY_FILL_AT=REGEX`` (with ``CONFIRMATORY_FILL_FILE=PATH``, a file
on the disk to fill) fills that disk just before the first write the
expression matches (``CONFIRMATORY_FILL_AT_COUNT=K``: the K-th): PATH grows
until the filesystem refuses (ENOSPC), leaving ``CONFIRMATORY_FILL_LEAVE``
bytes free (0 by default), so that this write is the one that fails first
(the disk-fault tests choose each log in turn).

``CONFIRMATORY_KILL_IN_FLIGHT=REGEX`` (with
``CONFIRMATORY_KILL_IN_FLIGHT_LOGS=K``) holds a batch in flight: the leader
of a batch of a log whose path the expression matches stops between its
write and its fsync (``ChainWriter``: written, not yet on disk, not
acknowledged) for up to ``CONFIRMATORY_KILL_IN_FLIGHT_HOLD_S`` seconds (0.5
by default), while the lines other threads append queue behind it; once K
distinct logs hold a batch at the same time, the process kills itself. Each
held batch is traced (``in-flight`` and its number of lines) before the
kill. ``CONFIRMATORY_KILL_IN_FLIGHT_AFTER=N`` holds nothing before the N-th
durable write (the run first gets going).

Unset (as in every real run), each write costs one test of a module constant.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from typing import Any

AFTER = int(os.environ.get("CONFIRMATORY_KILL_AFTER_WRITES") or 0)
TRACE = os.environ.get("CONFIRMATORY_WRITE_TRACE") or ""
AT = re.compile(os.environ["CONFIRMATORY_KILL_AT"]) if os.environ.get("CONFIRMATORY_KILL_AT") else None
AT_COUNT = int(os.environ.get("CONFIRMATORY_KILL_AT_COUNT") or 1)
FILL_AT = re.compile(os.environ["CONFIRMATORY_FILL_AT"]) if os.environ.get("CONFIRMATORY_FILL_AT") else None
FILL_AT_COUNT = int(os.environ.get("CONFIRMATORY_FILL_AT_COUNT") or 1)
FILL_FILE = os.environ.get("CONFIRMATORY_FILL_FILE") or ""
FILL_LEAVE = int(os.environ.get("CONFIRMATORY_FILL_LEAVE") or 0)
IN_FLIGHT = (
    re.compile(os.environ["CONFIRMATORY_KILL_IN_FLIGHT"]) if os.environ.get("CONFIRMATORY_KILL_IN_FLIGHT") else None
)
IN_FLIGHT_LOGS = int(os.environ.get("CONFIRMATORY_KILL_IN_FLIGHT_LOGS") or 1)
IN_FLIGHT_HOLD_S = float(os.environ.get("CONFIRMATORY_KILL_IN_FLIGHT_HOLD_S") or 0.5)
IN_FLIGHT_AFTER = int(os.environ.get("CONFIRMATORY_KILL_IN_FLIGHT_AFTER") or 0)
ACTIVE = bool(AFTER or TRACE or AT or (FILL_AT and FILL_FILE) or IN_FLIGHT)

_lock = threading.Lock()
_count = 0
_matched = 0
_fill_matched = 0
_held: dict[str, int] = {}  # log -> lines of the batch it holds in flight


def label(obj: dict[str, Any]) -> str:
    """A log line's label in the trace: its event, and its round when not 0."""
    r = obj.get("round")
    return f"{obj.get('event')}" + (f" r{r}" if r else "")


def wrote(path: object, event: object = None) -> None:
    """Count one durable write (called only when ``ACTIVE``)."""
    global _count, _matched
    with _lock:
        _count += 1
        text = f"{path}\t{event}"
        if TRACE:
            with open(TRACE, "a", encoding="utf-8") as fh:
                fh.write(f"{_count}\t{text}\n")
        if AT is not None and AT.search(text):
            _matched += 1
        if (AFTER and _count >= AFTER) or (AT is not None and _matched >= AT_COUNT):
            os.kill(os.getpid(), signal.SIGKILL)


def before(path: object, event: object = None) -> None:
    """Just before a durable write (called only when ``ACTIVE``): fill the disk if this is the write."""
    global _fill_matched
    if FILL_AT is None or not FILL_FILE:
        return
    with _lock:
        if not FILL_AT.search(f"{path}\t{event}"):
            return
        _fill_matched += 1
        if _fill_matched != FILL_AT_COUNT:
            return
        fill(FILL_FILE, FILL_LEAVE)


def in_flight(path: object, lines: int) -> None:
    """A batch of ``lines`` lines of ``path`` is written, not yet fsynced
    (called only when ``ACTIVE``): hold it there if the plan says so."""
    if IN_FLIGHT is None or not IN_FLIGHT.search(str(path)):
        return
    key = str(path)
    with _lock:
        if _count < IN_FLIGHT_AFTER or key in _held:
            return
        _held[key] = lines
        if len(_held) >= IN_FLIGHT_LOGS:
            if TRACE:
                with open(TRACE, "a", encoding="utf-8") as fh:
                    fh.writelines(f"in-flight\t{p}\t{n}\n" for p, n in sorted(_held.items()))
            os.kill(os.getpid(), signal.SIGKILL)
    try:
        time.sleep(IN_FLIGHT_HOLD_S)  # a batch in flight; other threads queue behind it
    finally:
        with _lock:
            del _held[key]


def fill(path: str, leave: int = 0) -> None:
    """Grow ``path`` until its filesystem is full, then give ``leave`` bytes back."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        for block in (1 << 20, 1 << 16, 1 << 12, 1 << 9, 1):
            chunk = b"\0" * block
            while True:
                try:
                    os.write(fd, chunk)
                except OSError:
                    break
        if leave:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
        os.fsync(fd)
    finally:
        os.close(fd)
