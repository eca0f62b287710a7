"""The run's lock: a runner holds it from before its run directory exists to its end.

``run_command`` (cli/run.py) takes ``lock_path(run_dir)`` with a zero timeout
and keeps it while the run runs; the operator commands ask ``held`` whether a
runner is still at work (``resume`` needs one, ``push-anchor`` must not run
beside one, ``verify`` of a live run is provisional).

The lock file lives *beside* the run directory, not in it: the run directory
must not exist when the lock is taken, and nothing but the run's own files
may be in it.
"""

from __future__ import annotations

import errno
import fcntl
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

    Reads, never writes: it opens an existing lock file read-only and asks
    for a shared ``flock`` without waiting (filelock's lock is an exclusive
    ``flock`` on that file, so a runner's lock refuses it), lets it go at
    once, and makes no file. So a reviewer can ask of a run they may not
    write to (another user's runs folder, a read-only copy or mount), and
    asking leaves nothing beside the run. A lock file that does not exist is
    held by nobody: a runner makes it before it makes the run directory.
    Where the file system has no ``flock``, filelock's own probe decides (it
    may make the file)."""
    path = lock_path(run_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):
        return False  # nobody can hold a lock whose file was never made
    except OSError:
        # Cannot even read it (another user's file of mode 0600): we cannot
        # clear it, so it counts as held.
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return True
            return _held_by_filelock(path)  # no flock here (ENOLCK, EOPNOTSUPP): filelock's fallback
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _held_by_filelock(path: Path) -> bool:
    """filelock's own answer: take the lock with a zero timeout and let it go at once."""
    existed = os.path.lexists(path)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    except OSError:
        return existed
    lock.release()
    return False
