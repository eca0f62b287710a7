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

Unset (as in every real run), each write costs one test of a module constant.
"""

from __future__ import annotations

import os
import re
import signal
import threading

AFTER = int(os.environ.get("CONFIRMATORY_KILL_AFTER_WRITES") or 0)
TRACE = os.environ.get("CONFIRMATORY_WRITE_TRACE") or ""
AT = re.compile(os.environ["CONFIRMATORY_KILL_AT"]) if os.environ.get("CONFIRMATORY_KILL_AT") else None
AT_COUNT = int(os.environ.get("CONFIRMATORY_KILL_AT_COUNT") or 1)
ACTIVE = bool(AFTER or TRACE or AT)

_lock = threading.Lock()
_count = 0
_matched = 0


def label(obj: dict) -> str:
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
