"""The run's lock: a runner holds it from before its run directory exists to its end.

``run_command`` (runmain.py) takes ``lock_path(run_dir)`` with a zero timeout
and keeps it while the run runs; the operator commands ask ``held`` whether a
runner is still at work (``resume`` needs one, ``push-anchor`` must not run
beside one, ``verify`` of a live run is provisional).

The lock file lives *beside* the run directory, not in it: the run directory
must not exist when the lock is taken, and nothing but the run's own files
may be in it.
"""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock, Timeout


def lock_path(run_dir: Path | str) -> Path:
    """``<parent>/.<name>.lock``: the path ``run_command`` locks for ``run_dir``.

    Of the resolved path: ``.``, a relative path or a symlink to the run
    directory name the same lock as the path the runner was given."""
    run_dir = Path(run_dir).resolve()
    return run_dir.parent / f".{run_dir.name}.lock"


def held(run_dir: Path | str) -> bool:
    """Whether another process (or another lock object in this one) holds the run's lock.

    Tries to take it with a zero timeout; if that works, lets it go at once.
    The lock file stays (a lock file is never removed: a process that opened
    the old file and one that created a new one would both hold "the lock").
    While we hold it for that instant a runner could not take it, but a
    runner never starts into an existing run directory anyway."""
    path = lock_path(run_dir)
    if not path.parent.is_dir():
        return False  # nobody can hold a lock in a directory that does not exist
    existed = os.path.lexists(path)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    except OSError:
        # Cannot even open or create it (a read-only copy of the runs folder):
        # a lock file that does not exist is held by nobody; one we cannot
        # open we cannot clear, so it counts as held.
        return existed
    lock.release()
    return False
