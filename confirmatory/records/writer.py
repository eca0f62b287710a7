"""The only code that writes a run's files: ``ChainWriter`` appends to a log, ``write_json_durable``
writes one whole JSON file atomically (records, manifests), and ``Guard`` keeps every
secret value off disk.

An append returns only after its line is on disk (one ``os.write`` of the
lines of its batch, then one ``os.fsync``: lines that several threads append
together share it, ``ChainWriter``). A failed write or fsync ends the writer:
after an fsync error the kernel may already have dropped the dirty pages and
cleared the error, so a retried fsync can "succeed" for data that is gone.
Nothing is therefore retried and nothing more is acknowledged. Reopening a
log re-checks it from its seed (``reader``).
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confirmatory.core.merkle import Range, leaf_hash
from confirmatory.core.redaction import secret_values
from confirmatory.records import killpoint
from confirmatory.records.chain import ChainBroken, ChainWriteFailed, TornTail, dumps, sha256_hex
from confirmatory.records.reader import _walk, prefix_tree

# ---------------------------------------------------------------- the guard


class Guard:
    """The last line of defence at the writers: no secret *value* reaches disk.

    Built from the environment once (the secret values of ``secret_values``);
    ``clean(obj, line)`` returns ``line`` (the canonical encoding of ``obj``)
    when no secret value occurs in it, else the encoding of ``obj`` with each
    secret value replaced by ``[redacted:NAME]`` and nothing else changed.
    Every line and file the runner writes passes through one, whatever the
    code that built it forgot to redact (an exception's text in a stop's
    detail, a provider's echo in a record).
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._dumps = dumps
        # Longest first: one secret may contain another.
        self._values = sorted(
            secret_values(dict(os.environ if environ is None else environ)).items(), key=lambda kv: -len(kv[0])
        )
        # As each value appears inside a canonical JSON string.
        self._needles = tuple(dumps({"": value})[5:-2] for value, _ in self._values)

    def clean(self, obj: Any, line: bytes) -> bytes:
        for needle in self._needles:
            if needle in line:
                return self._dumps(self._scrub(obj))
        return line

    def _scrub(self, obj: Any) -> Any:
        """Only the secret values go, in strings and keys at any depth: the
        rest of a record is study data (no token patterns, no key rules)."""
        if isinstance(obj, str):
            for value, name in self._values:
                if value in obj:
                    marker = f"[redacted:{name}]"
                    obj = obj.replace(value, "***" if value in marker else marker)
            return obj
        if isinstance(obj, Mapping):
            return {self._scrub(str(k)) if isinstance(k, str) else k: self._scrub(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self._scrub(v) for v in obj]
        return obj


# ---------------------------------------------------------------- durability helpers


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dirs_durable(directory: Path) -> None:
    """Create ``directory`` and missing parents, fsyncing each new one's parent."""
    missing = []
    d = directory
    while not d.is_dir():
        missing.append(d)
        if d.parent == d:
            break
        d = d.parent
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:
            # Race: another writer made it first. Its parent is fsynced below
            # anyway, so we do not depend on that writer having done it yet.
            pass
        _fsync_dir(d.parent)


def errno_text(exc: BaseException) -> str:
    """An OS error as a reviewer searches for it: the errno's symbolic name,
    then the system's words (``ENOSPC (No space left on device)``); any other
    exception as ``str``."""
    code = getattr(exc, "errno", None)
    if not isinstance(exc, OSError) or code is None:
        return str(exc)
    return f"{errno.errorcode.get(code, f'errno {code}')} ({exc.strerror or os.strerror(code)})"


def _failed(op: str, path: Path, exc: OSError) -> OSError:
    """``exc`` again (same errno, hence the same OSError subclass), its text
    naming the step and the file: a bare ``os.write`` or ``os.fsync`` error
    names neither, and the stop line that reports it must."""
    return OSError(exc.errno, f"{op} {path} failed: {errno_text(exc)}")


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``; a short write is continued, a zero write is an error."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "write returned 0 bytes")
        view = view[written:]


def _guard(guard: Any) -> Any:
    if guard is None:
        guard = Guard()
    return guard


def write_json_durable(path: Path, obj: dict[str, Any], *, guard: Any = None) -> str:
    """Write ``obj`` as canonical JSON + newline, atomically and durably.

    tmp file in the same directory (so the rename cannot cross filesystems)
    -> fsync it (its bytes are on disk before its name is) -> rename over the
    target (readers see the old file or the new one, never half) -> fsync the
    directory (the rename itself survives a crash). Returns the sha256 of the
    file's bytes. No secret value is written (``writer.Guard``; one from
    the current environment unless ``guard`` is given).

    Any step that fails raises an ``OSError`` of the same errno whose text
    names the step, the file and the errno (``errno_text``); nothing is
    retried, and the file is not left under its name (a failed directory
    fsync removes it again: the caller counts it as not written).
    """
    path = Path(path)
    return write_bytes_durable(path, _guard(guard).clean(obj, dumps(obj)) + b"\n")


def write_bytes_durable(path: Path, data: bytes) -> str:
    """Write ``data`` to ``path`` as ``write_json_durable`` writes its JSON
    (tmp, fsync, rename, fsync of the directory); its sha256. For bytes that
    are not the run's JSON (a TSA's certificate, a time-stamp reply): no
    secret guard, since no environment value can be in them."""
    path = Path(path)
    if killpoint.ACTIVE:
        killpoint.before(path, "file")
    try:
        _make_dirs_durable(path.parent)
    except OSError as exc:
        raise _failed("making the directory of", path, exc) from exc
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise _failed("creating the temporary file of", path, exc) from exc
    try:
        try:
            try:
                _write_all(fd, data)
            except OSError as exc:
                raise _failed("write of", path, exc) from exc
            try:
                os.fsync(fd)  # once: a failed fsync is never retried (the module docstring)
            except OSError as exc:
                raise _failed("fsync of", path, exc) from exc
        finally:
            os.close(fd)
        try:
            os.replace(tmp, path)
        except OSError as exc:
            raise _failed("rename onto", path, exc) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        _fsync_dir(path.parent)
    except OSError as exc:
        # The file has its name, but the name may not survive a crash: not
        # acknowledged, and the caller counts the file as not written (a
        # record's spend goes to a late-cost line). So the name goes again,
        # rather than stay as a record no log line accounts for. The
        # directory is not fsynced again: its failed fsync is not retried.
        path.unlink(missing_ok=True)
        raise _failed("fsync of the directory of", path, exc) from exc
    if killpoint.ACTIVE:
        killpoint.wrote(path, "file")
    return sha256_hex(data)


# ---------------------------------------------------------------- the writer


class ChainWriter:
    """The one appender of one log; thread-safe, with group commit.

    Lines appended by several threads share an fsync (the WAL pattern of
    PostgreSQL and SQLite): the thread that finds no batch in flight becomes
    the *leader*, takes every line queued so far, writes them with one
    ``os.write`` and fsyncs once; lines appended meanwhile queue for the next
    batch. Each ``append`` returns only once the fsync that covers its line
    has returned, so nothing is acknowledged (``lines``, ``head``, the
    frontier, the killpoint's count) before it is on disk. A failed write or
    fsync fails the writer for good: every line of that batch and every line
    queued behind it is refused, and the descriptor is never fsynced again.

    It also keeps the log's RFC 9162 Merkle tree as its frontier (O(log n)
    hashes, one leaf hash and on average one node hash per append), so an
    anchor's root costs O(log n), never a re-read (``anchor_snapshot``). The
    leader hashes its batch into the frontier with the writer's lock released:
    no other lane waits on that hashing."""

    def __init__(self, path: Path, seed: str, *, guard: Any = None) -> None:
        self.path = Path(path)
        self.seed = seed
        self.guard = _guard(guard)  # no secret value is ever appended (writer.Guard)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self.failed = False
        self._failure: str | None = None
        self._closed = False
        self.lines = 0  # acknowledged: on disk, their fsync returned
        self.head = seed
        self._tree = Range()
        self._fd = self._open()
        # Lines given a seq but not yet acknowledged: the queue for the next
        # batch (encoded line, its hash, its killpoint label) ...
        self._queue: list[tuple[bytes, str, str]] = []
        self._next_seq = self.lines
        self._next_head = self.head
        self._flushing = False  # ... and whether a leader has a batch in flight
        self._readers = 0  # anchor snapshots waiting for the frontier to settle
        self.batches = 0  # batches written (fsyncs of this log), for the benchmarks

    def _open(self) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
        _make_dirs_durable(self.path.parent)
        try:
            # O_EXCL tells us whether *we* created it, hence owe the dir fsync.
            fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        else:
            try:
                _fsync_dir(self.path.parent)
            except OSError as exc:
                os.close(fd)
                raise ChainWriteFailed(
                    f"{self.path}: created, but fsync of its directory failed ({errno_text(exc)}); not opened"
                ) from exc
            return fd
        result = _walk(self.path, self.seed)
        if result.torn is not None:
            raise TornTail(self.path, result.torn)
        if not result.ok:
            raise ChainBroken(self.path, result.lines, result.end, result.problem or "")
        fd = os.open(self.path, flags)
        # Race: a second writer on the same log would be a bug elsewhere; if
        # the file grew between the check and the open, refuse rather than
        # chain onto lines nobody checked.
        size = os.fstat(fd).st_size
        if size != result.end:
            os.close(fd)
            raise ChainBroken(
                self.path,
                result.lines,
                result.end,
                f"line {result.lines} at byte {result.end}: the file grew to {size} bytes while it was being opened",
            )
        self.lines = result.lines
        self.head = result.head
        try:
            self._tree = prefix_tree(self.path, result.lines)  # the lines just checked: they cannot change under us
        except BaseException:
            os.close(fd)
            raise
        return fd

    def append(self, obj: dict[str, Any]) -> str:
        """Add ``seq`` and ``prev``, write, fsync; return the line's hash
        once the fsync covering the line has returned."""
        return self.append_many([obj])[0]

    def append_many(self, objs: list[dict[str, Any]]) -> list[str]:
        """``append`` of each object in turn, as consecutive lines that share
        a batch; returns their hashes once all are on disk. A failure
        acknowledges none of them (an earlier batch's lines stay acknowledged)."""
        for obj in objs:
            if "seq" in obj or "prev" in obj:
                raise ValueError("append() adds seq and prev itself; the object must not carry them")
        with self._cond:
            self._refuse()
            digests = []
            for obj in objs:
                full = {**obj, "seq": self._next_seq, "prev": self._next_head}  # caller's dict untouched
                line = self.guard.clean(full, dumps(full))
                digest = sha256_hex(line)
                self._queue.append((line, digest, killpoint.label(obj) if killpoint.ACTIVE else ""))
                self._next_seq += 1
                self._next_head = digest
                digests.append(digest)
            last = self._next_seq - 1
            while self.lines <= last:
                if self.failed:
                    raise ChainWriteFailed(f"{self.path}: {self._failure}")
                if self._flushing or self._readers:
                    self._cond.wait()  # a batch is in flight: ours joins the next one
                else:
                    self._lead()
            return digests

    def _refuse(self) -> None:
        if self.failed:
            raise ChainWriteFailed(
                f"{self.path}: this writer failed earlier ({self._failure}); nothing more is acknowledged"
            )
        if self._closed:
            raise ChainWriteFailed(f"{self.path}: writer is closed")

    def _lead(self) -> None:
        """Write and fsync every queued line as one batch (lock held on entry
        and on return, released while the batch is in flight)."""
        batch, self._queue = self._queue, []
        self._flushing = True
        first = self.lines
        self._lock.release()
        try:
            try:
                if killpoint.ACTIVE:
                    for _, _, label in batch:
                        killpoint.before(self.path, label)
                data = b"".join([line + b"\n" for line, _, _ in batch])
                try:
                    _write_all(self._fd, data)
                except OSError as exc:
                    raise self._fail("write", first, exc) from exc
                if killpoint.ACTIVE:
                    killpoint.in_flight(self.path, len(batch))  # written, not yet fsynced
                try:
                    os.fsync(self._fd)  # once: a failed fsync is never retried (the module docstring)
                except OSError as exc:
                    raise self._fail("fsync", first, exc) from exc
                self.batches += 1
                # On disk: into the frontier (only the leader touches it while
                # a batch is in flight), then the killpoint's count, in order.
                self._tree.extend([leaf_hash(line) for line, _, _ in batch])
                if killpoint.ACTIVE:
                    for _, _, label in batch:
                        killpoint.wrote(self.path, label)
            finally:
                self._lock.acquire()
        except ChainWriteFailed:
            self._flushing = False
            self._cond.notify_all()
            raise
        except BaseException as exc:  # not an OSError: the batch's state is unknown, so it is a failure
            self._fail_locked("write", first, exc)
            self._flushing = False
            self._cond.notify_all()
            raise
        self.lines = first + len(batch)
        self.head = batch[-1][1]
        self._flushing = False
        self._cond.notify_all()

    def _fail(self, op: str, first: int, exc: BaseException) -> ChainWriteFailed:
        """Enter the failed state (called by the leader, lock released)."""
        with self._lock:
            return self._fail_locked(op, first, exc)

    def _fail_locked(self, op: str, first: int, exc: BaseException) -> ChainWriteFailed:
        """Enter the failed state (lock held); the fd is closed, never fsynced again."""
        if not self.failed:
            self.failed = True
            self._failure = (
                f"{op} of line {first} failed: {errno_text(exc)}; the line is not acknowledged "
                "and the file may end in a torn or unconfirmed line"
            )
            self._queue = []
            try:
                os.close(self._fd)  # close() does not fsync; see the module docstring
            except OSError:
                pass
        return ChainWriteFailed(f"{self.path}: {self._failure}")

    def snapshot(self) -> tuple[int, str]:
        """(acknowledged lines, head): a consistent pair, taken under the lock."""
        with self._lock:
            return self.lines, self.head

    def anchor_snapshot(self) -> tuple[int, str, str]:
        """(acknowledged lines, head, root): ``snapshot`` and the lowercase hex
        RFC 9162 root of the tree over those lines, taken together under the
        lock once no batch is in flight (its leader may be hashing it into
        the frontier); no new batch starts while it waits."""
        with self._cond:
            self._readers += 1
            try:
                while self._flushing:
                    self._cond.wait()
                return self.lines, self.head, self._tree.root().hex()
            finally:
                self._readers -= 1
                self._cond.notify_all()

    def close(self) -> None:
        """Idempotent; waits for the batches in flight; a failed writer's
        descriptor is already closed."""
        with self._cond:
            while not self.failed and (self._flushing or self._queue):
                self._cond.wait()
            if self._closed:
                return
            self._closed = True
            if not self.failed:
                os.close(self._fd)

    def __enter__(self) -> ChainWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
