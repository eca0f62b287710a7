"""Hash-chained JSONL logs: the canonical encoding, the writer, the readers.

Owns RECORDS.md "Encoding": how a line is encoded and hashed, how a log's
seed is derived, what an append promises, and how a log is re-read.

* ``dumps``, ``sha256_hex``, ``log_seed`` are pure; ``verify`` may use them.
* ``ChainWriter`` is the only code that appends to a log. An append returns
  only after its line is on disk (one ``os.write`` of the whole line, then
  ``os.fsync``). A failed write or fsync ends the writer: after an fsync
  error the kernel may already have dropped the dirty pages and cleared the
  error, so a retried fsync can "succeed" for data that is gone. Nothing is
  therefore retried and nothing more is acknowledged.
* Reopening a log re-checks it from its seed. Damage is reported, never
  repaired: a bad earlier line is ``ChainBroken``; bad bytes after the last
  good line (the shape a write cut short by a crash leaves) are ``TornTail``
  with their exact offset, length and sha256, so that any recovery is an
  explicit, recorded decision of the operator's.
* ``iter_lines``, ``check_chain``, ``prefix_head`` are streaming readers:
  they read in binary chunks and never hold the whole file.
* ``write_json_durable`` writes one whole JSON file atomically (records,
  manifests).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20

# One shared encoder: json.dumps with non-default arguments builds a new
# JSONEncoder on every call, which costs as much as the encoding itself on
# short lines. Byte for byte the same output as RECORDS.md's json.dumps call.
# Sharing it between threads is safe: encode() keeps no state between calls.
_CANON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# The checker's hot loop calls the C scanner and encoder directly: json.loads
# and JSONEncoder.encode spend as long on argument handling and set-up as on
# a ~200-byte line itself. Same grammar and same output; the fallbacks keep
# the module working on an interpreter without the C accelerator.
try:
    from json.scanner import c_make_scanner as _c_make_scanner
    from json.encoder import c_make_encoder as _c_make_encoder, c_encode_basestring as _c_esc
except ImportError:  # pragma: no cover - CPython always has them
    _c_make_scanner = _c_make_encoder = _c_esc = None

if _c_make_scanner is not None and _c_make_encoder is not None and _c_esc is not None:
    _scan_once = _c_make_scanner(json.JSONDecoder())
    # markers=None: parsed JSON cannot be circular, so no cycle check is needed.
    _encode_fast = _c_make_encoder(None, _CANON.default, _c_esc, None, ":", ",", True, False, True)

    def _parse_line(text: str) -> Any:
        obj, end = _scan_once(text, 0)
        if end != len(text):
            raise ValueError("extra data after the JSON value")
        return obj

    def _canon_text(obj: Any) -> str:
        return "".join(_encode_fast(obj, 0))
else:  # pragma: no cover
    _parse_line = json.loads
    _canon_text = _CANON.encode


def dumps(obj: dict) -> bytes:
    """The canonical encoding of a line, without its newline."""
    return _CANON.encode(obj).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def log_seed(manifest_sha256: str, relpath: str) -> str:
    """The ``prev`` of a log's line 0: sha256 of ``"{manifest_sha256}:{relpath}"``."""
    return sha256_hex(f"{manifest_sha256}:{relpath}".encode())


# ---------------------------------------------------------------- errors


class ChainError(Exception):
    """Base of every chain error."""


class ChainWriteFailed(ChainError):
    """A write or fsync failed; the writer acknowledges nothing more."""


class ChainBroken(ChainError):
    """A line before the last one is not a valid link of the chain."""

    def __init__(self, path: Path | str, seq: int, offset: int, reason: str) -> None:
        super().__init__(f"{path}: chain broken at line {seq} (byte {offset}): {reason}")
        self.path = Path(path)
        self.seq = seq
        self.offset = offset
        self.reason = reason


class TornTail(ChainError):
    """Bytes after the last good line do not form a valid line."""

    def __init__(self, path: Path | str, torn: "TornInfo") -> None:
        super().__init__(
            f"{path}: torn tail of {torn.length} bytes at offset {torn.offset} "
            f"(sha256 {torn.sha256}): {torn.reason}; nothing was truncated"
        )
        self.path = Path(path)
        self.torn = torn
        self.offset = torn.offset
        self.length = torn.length
        self.sha256 = torn.sha256
        self.reason = torn.reason


# ---------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class LogLine:
    """One complete line. ``seq`` is its position (0-based), which equals its
    ``seq`` field in a valid chain; ``length`` counts the newline, so the next
    line starts at ``offset + length``."""

    seq: int
    obj: dict
    hash: str
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class TornInfo:
    """Everything after the last good line: ``length`` bytes from ``offset``
    to the end of the file, whose sha256 is ``sha256``."""

    offset: int
    length: int
    sha256: str
    reason: str


@dataclass(frozen=True, slots=True)
class ChainCheck:
    """The outcome of reading a log from its seed.

    ``lines``/``head`` cover the good lines before any problem; ``end`` is the
    byte offset where they end. ``problem_line`` is the position of the first
    bad line (also set for a torn tail, whose details are in ``torn``).
    """

    ok: bool
    lines: int
    head: str
    problem: str | None = None
    problem_line: int | None = None
    torn: TornInfo | None = None
    end: int = 0


# ---------------------------------------------------------------- readers


def _link_problem(line: bytes, n: int, head: str) -> tuple[str | None, str | None]:
    """(problem, hash) for a complete line at position n after ``head``.

    The slow path, used for the one line that the fast loop rejected, and for
    the unterminated tail, so that the reason is precise.
    """
    try:
        obj = _parse_line(line.decode())
    except (ValueError, RecursionError, StopIteration) as exc:
        return f"not a JSON line ({type(exc).__name__}: {exc})", None
    if not isinstance(obj, dict):
        return f"not a JSON object but {type(obj).__name__}", None
    seq = obj.get("seq")
    if type(seq) is not int or seq != n:
        return f"seq is {seq!r}, expected {n}", None
    if obj.get("prev") != head:
        return f"prev is {obj.get('prev')!r}, expected {head}", None
    try:
        canonical = dumps(obj)
    except ValueError as exc:
        return f"cannot be re-encoded ({exc})", None
    if canonical != line:
        return "not in canonical encoding (sorted keys, no spaces, UTF-8)", None
    return None, sha256_hex(line)


def _walk(path: Path, seed: str, limit: int | None = None) -> ChainCheck:
    """Check ``path`` from ``seed``; stop after ``limit`` good lines if given.

    The hot loop does the minimum per line (strict UTF-8 decode, one parse, two
    field checks, one re-encode, one sha256) with everything bound to locals;
    byte offsets are worked out per chunk, not per line. Whatever the loop
    rejects is re-examined by ``_link_problem`` for the reason.
    """
    parse = _parse_line
    canon = _canon_text
    sha256 = hashlib.sha256
    head = seed
    n = 0
    base = 0  # file offset of the first line of the current chunk's parts
    try:
        f = open(path, "rb", buffering=0)
    except FileNotFoundError:
        return ChainCheck(False, 0, seed, problem=f"{path}: no such file", problem_line=0)
    with f:
        rest = b""
        while limit is None or n < limit:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            buf = rest + chunk if rest else chunk
            parts = buf.split(b"\n")
            rest = parts.pop()
            if limit is not None and len(parts) > limit - n:
                del parts[limit - n :]
                rest = b""  # lines past the limit are not looked at
            first = n
            for line in parts:
                try:
                    text = line.decode()
                    obj = parse(text)
                    good = (
                        obj["prev"] == head
                        and obj["seq"] == n
                        and type(obj["seq"]) is int
                        and canon(obj) == text  # strict UTF-8 decode: same as comparing bytes
                    )
                except Exception:  # noqa: BLE001 - any failure takes the slow path
                    good = False
                if not good:
                    offset = base + sum(len(p) + 1 for p in parts[: n - first])
                    return _bad_line(f, path, line, n, head, offset)
                head = sha256(line).hexdigest()
                n += 1
            base += sum(len(p) + 1 for p in parts)
        if rest and (limit is None or n < limit):
            problem, _ = _link_problem(rest, n, head)
            reason = "no trailing newline" + (f"; {problem}" if problem else " (the line is otherwise whole)")
            torn = TornInfo(base, len(rest), sha256_hex(rest), reason)
            return ChainCheck(False, n, head, f"torn tail: {reason}", n, torn, base)
    return ChainCheck(True, n, head, end=base)


def _bad_line(f: Any, path: Path, line: bytes, n: int, head: str, offset: int) -> ChainCheck:
    problem, _ = _link_problem(line, n, head)
    problem = problem or "rejected"
    # Is this the last line of the file? Then it is a torn tail, else a break.
    f.seek(offset)
    tail = f.read(len(line) + 2)
    if len(tail) == len(line) + 1:
        torn = TornInfo(offset, len(tail), sha256_hex(tail), f"last line: {problem}")
        return ChainCheck(False, n, head, f"torn tail: {torn.reason}", n, torn, offset)
    return ChainCheck(False, n, head, f"line {n} at byte {offset}: {problem}", n, None, offset)


def check_chain(path: Path, seed: str) -> ChainCheck:
    """Read the whole log and check it from ``seed``; never raises for content."""
    return _walk(Path(path), seed)


def prefix_head(path: Path, seed: str, n: int) -> str | None:
    """The head after the first ``n`` lines, or None if there are fewer good lines."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    result = _walk(Path(path), seed, limit=n)
    return result.head if result.lines == n else None


def iter_lines(path: Path) -> Iterator[LogLine]:
    """Every complete line of ``path``, in order, one at a time.

    Does not check the links (``check_chain`` does). Raises ``ChainBroken``
    for a complete line that is not a JSON object and ``TornTail`` for bytes
    after the last newline: a reader never skips what it cannot read.
    """
    path = Path(path)
    n = 0
    offset = 0
    with open(path, "rb", buffering=0) as f:
        rest = b""
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            buf = rest + chunk if rest else chunk
            parts = buf.split(b"\n")
            rest = parts.pop()
            for line in parts:
                try:
                    obj = _parse_line(line.decode())
                except (ValueError, RecursionError, StopIteration) as exc:
                    raise ChainBroken(path, n, offset, f"not a JSON line ({exc})") from None
                if not isinstance(obj, dict):
                    raise ChainBroken(path, n, offset, "not a JSON object")
                yield LogLine(n, obj, sha256_hex(line), offset, len(line) + 1)
                n += 1
                offset += len(line) + 1
    if rest:
        raise TornTail(path, TornInfo(offset, len(rest), sha256_hex(rest), "no trailing newline"))


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


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``; a short write is continued, a zero write is an error."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "write returned 0 bytes")
        view = view[written:]


def write_json_durable(path: Path, obj: dict) -> str:
    """Write ``obj`` as canonical JSON + newline, atomically and durably.

    tmp file in the same directory (so the rename cannot cross filesystems)
    -> fsync it (its bytes are on disk before its name is) -> rename over the
    target (readers see the old file or the new one, never half) -> fsync the
    directory (the rename itself survives a crash). Returns the sha256 of the
    file's bytes.
    """
    path = Path(path)
    data = dumps(obj) + b"\n"
    _make_dirs_durable(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return sha256_hex(data)


# ---------------------------------------------------------------- the writer


class ChainWriter:
    """The one appender of one log; thread-safe (a lock per writer)."""

    def __init__(self, path: Path, seed: str) -> None:
        self.path = Path(path)
        self.seed = seed
        self._lock = threading.Lock()
        self.failed = False
        self._failure: str | None = None
        self._closed = False
        self.lines = 0
        self.head = seed
        self._fd = self._open()

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
                    f"{self.path}: created, but fsync of its directory failed ({exc}); not opened"
                ) from exc
            return fd
        result = _walk(self.path, self.seed)
        if result.torn is not None:
            raise TornTail(self.path, result.torn)
        if not result.ok:
            raise ChainBroken(self.path, result.problem_line or 0, result.end, result.problem or "")
        fd = os.open(self.path, flags)
        # Race: a second writer on the same log would be a bug elsewhere; if
        # the file grew between the check and the open, refuse rather than
        # chain onto lines nobody checked.
        size = os.fstat(fd).st_size
        if size != result.end:
            os.close(fd)
            raise ChainBroken(
                self.path, result.lines, result.end,
                f"file grew from {result.end} to {size} bytes while it was being opened",
            )
        self.lines = result.lines
        self.head = result.head
        return fd

    def append(self, obj: dict) -> str:
        """Add ``seq`` and ``prev``, write, fsync; return the line's hash."""
        if "seq" in obj or "prev" in obj:
            raise ValueError("append() adds seq and prev itself; the object must not carry them")
        with self._lock:
            if self.failed:
                raise ChainWriteFailed(
                    f"{self.path}: this writer failed earlier ({self._failure}); nothing more is acknowledged"
                )
            if self._closed:
                raise ChainWriteFailed(f"{self.path}: writer is closed")
            line = dumps({**obj, "seq": self.lines, "prev": self.head})  # caller's dict untouched
            digest = sha256_hex(line)
            try:
                _write_all(self._fd, line + b"\n")
            except OSError as exc:
                self._fail("write", exc)
            try:
                os.fsync(self._fd)
            except OSError as exc:
                self._fail("fsync", exc)
            self.lines += 1
            self.head = digest
            return digest

    def _fail(self, op: str, exc: OSError) -> None:
        """Enter the failed state (lock held) and raise; the fd is not fsynced again."""
        self.failed = True
        self._failure = (
            f"{op} of line {self.lines} failed: {exc}; the line is not acknowledged "
            "and the file may end in a torn or unconfirmed line"
        )
        try:
            os.close(self._fd)  # close() does not fsync; see the module docstring
        except OSError:
            pass
        raise ChainWriteFailed(f"{self.path}: {self._failure}") from exc

    def snapshot(self) -> tuple[int, str]:
        """(acknowledged lines, head): a consistent pair, taken under the lock."""
        with self._lock:
            return self.lines, self.head

    def close(self) -> None:
        """Idempotent; a failed writer's descriptor is already closed."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if not self.failed:
                os.close(self._fd)

    def __enter__(self) -> "ChainWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
