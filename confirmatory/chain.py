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
  repaired: a complete (newline-ended) line that is not a valid link is
  ``ChainBroken``; bytes after the last newline - the shape an append cut
  short by a crash leaves, whether a partial line, a whole line missing its
  newline or garbage - are ``TornTail`` with their exact offset, length and
  sha256, so that any recovery is an explicit, recorded operator decision.
* ``iter_lines``, ``check_chain``, ``prefix_head`` and ``ChainReader`` (one
  pass that checks the links and yields the parsed lines, for ``verify``) are
  streaming readers: they read in binary chunks and never hold the whole file.
  ``ChainReader`` takes orjson's object and encoding where they provably
  agree with the standard library's (see ``_fast_canonical``).
* ``write_json_durable`` writes one whole JSON file atomically (records,
  manifests).
"""

from __future__ import annotations

import errno
import hashlib
import io
import itertools
import json
import os
import re
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from json.encoder import c_encode_basestring, c_make_encoder
from json.scanner import c_make_scanner, py_make_scanner
from typing import Any

_CHUNK = 1 << 18  # readers hold one chunk (and its lines) at a time


class NotRegularFile(OSError):
    """A path a reader was to read is not a regular file (a FIFO, a device, a
    folder, a socket): reading it could block for ever or never end."""


def open_regular(path: Any, dir_fd: int | None = None) -> "io.FileIO":
    """``path`` opened for reading, unbuffered, once it is known to be a
    regular file: opened without blocking (a FIFO with no writer would block
    the open itself), then ``fstat``ed; anything else raises
    `NotRegularFile`. A symbolic link is followed (the contract does not
    forbid one) and judged by what it names."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        return io.FileIO(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise

# One shared encoder: json.dumps with non-default arguments builds a new
# JSONEncoder on every call, which costs as much as the encoding itself on
# short lines. Byte for byte the same output as RECORDS.md's json.dumps call.
# Sharing it between threads is safe: encode() keeps no state between calls.
# allow_nan=False: NaN and Infinity are not JSON; a reader in another language
# could not parse the line, so writing one is refused (ValueError).
_CANON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# The checker's hot loop calls the C scanner and encoder directly: json.loads
# and JSONEncoder.encode spend as long on set-up as on a ~200-byte line
# itself. Same grammar, same output (markers=None: parsed JSON has no cycles).
# The checker's encoder allows NaN (its last argument), unlike _CANON: the
# contract's line is json.dumps with its default allow_nan=True, which writes
# NaN and Infinity as such, so a line holding one is canonical by the contract
# and must be judged by the checks past the chain (this runner never writes
# one: its writer refuses them).
_scan_once = (c_make_scanner or py_make_scanner)(json.JSONDecoder())
if c_make_encoder is not None:
    _encode_c = c_make_encoder(None, _CANON.default, c_encode_basestring, None, ":", ",", True, False, True)

    def _canon_text(obj: Any) -> str:
        return "".join(_encode_c(obj, 0))
else:  # pragma: no cover - interpreters without the _json accelerator
    _canon_text = _CANON.encode


# A faster parser and encoder for the readers (orjson, a declared dependency;
# every reader also works without it). They never decide alone what a line is
# or what it holds: ``_fast_canonical`` accepts a line only when the standard
# library's canonical test would accept it with an equal object, and
# everything else goes to the standard parser and encoder.
try:  # pragma: no cover - depends on the environment
    from orjson import OPT_SORT_KEYS as _SORT_KEYS
    from orjson import dumps as _fast_dumps
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover
    _fast_loads = _fast_dumps = None
    _SORT_KEYS = 0


def _fast_canonical(obj: Any, line: bytes, guards_hold: bool = False) -> bool:
    """Whether ``line`` is, byte for byte, RECORDS.md's encoding of ``obj``,
    decided without the standard encoder; False means "ask the standard
    encoder", not "no". ``obj`` is the fast parser's object of ``line``.

    True only when all of these hold, and then ``dumps(obj) == line`` and the
    standard parser gives an object equal to ``obj``, value and type:

    * orjson's sorted compact encoding of ``obj`` is ``line`` itself. Then
      every key is unique and sorted (by code point, as ``sort_keys``: UTF-8
      byte order is code point order), there is no whitespace, every integer
      is exact, and every float is written as its shortest round-trip digits,
      so both parsers read the same double from it.
    * No backslash: no string has an escape, so both encoders write each
      string as its raw characters (neither escapes a character that needs
      no escape).
    * No float in exponent form and none written ``0.0000...``: orjson and
      ``repr`` differ only there (orjson writes ``1e-7`` for ``1e-07`` and
      ``0.00001`` for ``1e-05``; some versions ``1e16`` for ``1e+16``); for every other
      finite double both write the same plain digits (tests/test_chain_fast.py
      checks this over all magnitudes). In a compact encoding a number is
      always followed by ``,``, ``}`` or ``]``, so ``_EXPONENT`` finds every
      exponent (and perhaps text in a string that looks like one: then the
      standard encoder decides). Where orjson writes a sign in every
      exponent (``_SIGNED_EXPONENTS``), looking for ``e+`` and ``e-`` is
      enough, and cheaper.

    ``guards_hold``: the byte guards are already known to hold for ``line``
    (``ChainReader`` asks them once for a whole batch: ``_guards_hold``).
    """
    return _fast_dumps(obj, option=_SORT_KEYS) == line and (guards_hold or _guards_hold(line))


def _guards_hold(data: bytes) -> bool:
    """No backslash, no ``0.0000`` and no exponent anywhere in ``data``: the
    byte half of ``_fast_canonical``. None of the patterns holds a newline,
    so on a run of whole lines joined by newlines (a reader's batch) it
    holds exactly when it holds for every one of them: ``ChainReader`` asks
    once per batch, and per line only in a batch where it fails."""
    return b"\\" not in data and b"0.0000" not in data and _no_exponent(data)


_EXPONENT = re.compile(rb"e[-+]?[0-9]+[,}\]]").search
# Recent orjson writes 1e+16 (3.8 wrote 1e16); both write 1e-7.
# tests/test_chain_fast.py checks, for the orjson installed, that every
# exponent it writes has its sign when this says so.
_SIGNED_EXPONENTS = _fast_dumps is not None and _fast_dumps([1e16, 1e-7, 1.5e300]) == b"[1e+16,1e-7,1.5e+300]"


def _no_signed_exponent(line: bytes) -> bool:
    """No ``e+`` and no ``e-`` in the line: no exponent, where orjson signs
    every exponent. (A one-byte search is much cheaper than a two-byte one,
    and most lines have neither sign.)"""
    return (b"+" not in line or b"e+" not in line) and (b"-" not in line or b"e-" not in line)


def _no_exponent_found(line: bytes) -> bool:
    """No exponent, whether or not it is signed."""
    return _EXPONENT(line) is None


# No float in exponent form in an orjson-encoded line (text that looks like
# one inside a string also counts: a "no" only sends the line to the
# standard test).
_no_exponent = _no_signed_exponent if _SIGNED_EXPONENTS else _no_exponent_found


def parse_document(data: bytes) -> Any:
    """``json.loads(data)`` of a whole JSON file (a record), or ValueError.

    The fast parser's object is taken when orjson re-encodes it to exactly
    ``data`` (less one trailing newline): a text that is orjson's encoding of
    a value has unique keys, exact integers and shortest round-trip floats,
    so the standard parser reads the same value from it."""
    if _fast_loads is not None:
        body = data[:-1] if data[-1:] == b"\n" else data
        try:
            obj = _fast_loads(body)
            if _fast_dumps(obj) == body:
                return obj
        except Exception:  # noqa: BLE001 - the standard parser decides
            pass
    return json.loads(data)


def _parse_line(text: str) -> Any:
    obj, end = _scan_once(text, 0)  # StopIteration if no value starts at 0
    if end != len(text):
        raise ValueError(f"extra data after the JSON value at character {end}")
    return obj


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
    """A complete line is not a valid link of the chain."""

    def __init__(self, path: Path | str, seq: int, offset: int, reason: str) -> None:
        super().__init__(f"{path}: chain broken: {reason}")  # reason names line and byte
        self.path = Path(path)
        self.seq = seq
        self.offset = offset
        self.reason = reason


class TornTail(ChainError):
    """The file ends in bytes without a newline after its last complete line."""

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
    """The unterminated end of a file: ``length`` bytes from ``offset`` to the
    end, whose sha256 is ``sha256``; ``reason`` says what they look like."""

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


def _line_problem(line: bytes, n: int, head: str) -> str | None:
    """Why ``line`` is not a valid line ``n`` after ``head`` (None: it is).

    The slow path, for the one line the hot loop rejected and for an
    unterminated tail, so that the reason given is precise.
    """
    try:
        obj = _parse_line(line.decode())
    except (ValueError, RecursionError, StopIteration) as exc:
        return f"not a JSON line ({type(exc).__name__}: {exc})"
    if not isinstance(obj, dict):
        return f"not a JSON object but {type(obj).__name__}"
    if type(obj.get("seq")) is not int or obj["seq"] != n:
        return f"seq is {obj.get('seq')!r}, expected {n}"
    if obj.get("prev") != head:
        return (f"prev is {obj.get('prev')!r}, expected {head} (the sha256 of line {n - 1}: "
                f"line {n - 1} was changed, or this line's prev, or a line was removed or inserted here)"
                if n else f"prev is {obj.get('prev')!r}, expected the log's seed {head}")
    try:
        if dumps(obj) != line:
            return "not in canonical encoding (sorted keys, no spaces, UTF-8)"
    except ValueError as exc:
        return f"cannot be re-encoded ({exc})"
    return None


def _batches(f: Any, start: int = 0, stop: int | None = None, *, guard: Any = None) -> Iterator[tuple]:
    """(offset of the first, lines without their newline, is_tail) per chunk
    of the bytes from ``start`` to ``stop`` (the end when None); with
    ``guard``, a fourth item: ``guard`` of bytes that hold every line of the
    batch joined by newlines (and perhaps the start of the next line).

    The last batch, if those bytes do not end in a newline, is the
    unterminated tail alone with ``is_tail`` set.
    """
    base = start
    pieces: list[bytes] = []  # the line under way, chunk by chunk, until its newline comes
    if start:
        f.seek(start)
    left = None if stop is None else stop - start
    while chunk := f.read(_CHUNK if left is None else min(_CHUNK, left)):
        if left is not None:
            left -= len(chunk)
        if b"\n" not in chunk:
            # a line longer than a chunk: its bytes are joined, split and
            # guarded once, when it ends (not again with every chunk)
            pieces.append(chunk)
            continue
        data = b"".join([*pieces, chunk]) if pieces else chunk
        del chunk
        parts = data.split(b"\n")
        rest = parts.pop()
        pieces = [rest] if rest else []
        if guard is None:
            del data
            yield base, parts, False
        else:
            clean = guard(data)
            del data  # hold no more than the lines themselves
            yield base, parts, False, clean
        base += sum(map(len, parts)) + len(parts)
    if pieces:
        rest = b"".join(pieces)
        yield (base, [rest], True) if guard is None else (base, [rest], True, False)


def _links(obj: Any, text: str, head: str, n: int) -> bool:
    """Whether a parsed line is line ``n`` after ``head``, canonically encoded.

    Comparing the canonical re-encoding with the strictly decoded text is the
    same as comparing bytes.
    """
    return obj["prev"] == head and obj["seq"] == n and type(obj["seq"]) is int and _canon_text(obj) == text


def _torn_check(base: int, tail: bytes, n: int, head: str) -> ChainCheck:
    """The check of a log whose bytes after its last newline are a torn line."""
    problem = _line_problem(tail, n, head)
    reason = "no trailing newline" + (f"; {problem}" if problem else " (the line is otherwise whole)")
    torn = TornInfo(base, len(tail), sha256_hex(tail), reason)
    return ChainCheck(False, n, head, f"torn tail: {reason}", n, torn, base)


def _broken_check(base: int, parts: list[bytes], first: int, n: int, head: str) -> ChainCheck:
    """The check of a log whose line ``n`` (in a batch starting at line ``first``) is bad."""
    offset = base + sum(len(p) + 1 for p in parts[: n - first])
    problem = f"line {n} at byte {offset}: {_line_problem(parts[n - first], n, head) or 'rejected'}"
    return ChainCheck(False, n, head, problem, n, None, offset)


def _walk(path: Path, seed: str, limit: int | None = None) -> ChainCheck:
    """Check ``path`` from ``seed``; stop after ``limit`` good lines if given.

    The hot loop does the minimum per line (strict UTF-8 decode, one parse, two
    field checks, one re-encode, one sha256) with everything bound to locals;
    byte offsets are worked out per chunk, not per line.
    """
    parse, links, sha256 = _parse_line, _links, hashlib.sha256
    head, n, end = seed, 0, 0
    try:
        f = open_regular(path)
    except FileNotFoundError:
        return ChainCheck(False, 0, seed, problem=f"{path}: no such file", problem_line=0)
    except NotRegularFile:
        return ChainCheck(False, 0, seed, problem=f"{path}: not a regular file", problem_line=0)
    with f:
        for base, parts, is_tail in _batches(f):
            if limit is not None and not is_tail and len(parts) >= limit - n:
                del parts[limit - n :]  # lines past the limit are not looked at
            if is_tail:
                return _torn_check(base, parts[0], n, head)
            first = n
            for line in parts:
                try:
                    text = line.decode()
                    good = links(parse(text), text, head, n)
                except Exception:  # noqa: BLE001 - any failure takes the slow path
                    good = False
                if not good:
                    return _broken_check(base, parts, first, n, head)
                head = sha256(line).hexdigest()
                n += 1
            end = base + sum(map(len, parts)) + len(parts)
            if n == limit:
                break
    return ChainCheck(True, n, head, end=end)


def check_chain(path: Path, seed: str) -> ChainCheck:
    """Read the whole log and check it from ``seed``; never raises for content."""
    return _walk(Path(path), seed)


def prefix_head(path: Path, seed: str, n: int) -> str | None:
    """The head after the first ``n`` lines, or None if there are fewer good lines."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if n == 0:
        return seed
    result = _walk(Path(path), seed, limit=n)
    return result.head if result.lines == n else None


def iter_lines(path: Path) -> Iterator[LogLine]:
    """Every complete line of ``path``, in order, one at a time.

    Does not check the links (``check_chain`` does). Raises ``ChainBroken``
    for a complete line that is not a JSON object and, after the last complete
    line, ``TornTail`` for bytes without a newline: a reader never skips what
    it cannot read.
    """
    path = Path(path)
    n = 0
    with open_regular(path) as f:
        for offset, parts, is_tail in _batches(f):
            if is_tail:
                raise TornTail(path, TornInfo(offset, len(parts[0]), sha256_hex(parts[0]), "no trailing newline"))
            for line in parts:
                try:
                    obj = _parse_line(line.decode())
                except (ValueError, RecursionError, StopIteration) as exc:
                    raise ChainBroken(path, n, offset, f"line {n} at byte {offset}: not a JSON line ({exc})") from None
                if not isinstance(obj, dict):
                    raise ChainBroken(path, n, offset, f"line {n} at byte {offset}: not a JSON object")
                yield LogLine(n, obj, sha256_hex(line), offset, len(line) + 1)
                n += 1
                offset += len(line) + 1


class ChainReader:
    """One pass over a log that checks every link and hands out what it parsed.

    ``for seq, obj in ChainReader(path, seed, heads_at=...)`` yields every line
    that ``check_chain`` accepts, in order, as its position and parsed object
    (each line is parsed, re-encoded and hashed once: the checks are
    ``check_chain``'s). The parse is the fast parser's where one is installed
    and its object passes a canonical test (orjson's guarded one,
    ``_fast_canonical``, else the standard encoder's): then the standard
    parser would give an equal object. Otherwise it is the standard parser's,
    so what is accepted and yielded does not depend on orjson (the byte
    guards of ``_fast_canonical`` are asked once per batch of lines, and line
    by line only in a batch where they fail: ``_guards_hold``);
    ``fast_overruled`` counts the lines accepted only by the standard parser. Iteration ends at the first line
    that is not a valid link, or at a torn tail. Afterwards ``result`` is the
    ``ChainCheck`` that ``check_chain`` would have returned (None until the
    iteration has finished) and ``heads`` maps each count in ``heads_at`` that
    the good lines reach to the head after that many lines (0 -> the seed),
    ``times`` each such count (but 0) to the ``t`` of the line it ends at.
    """

    __slots__ = ("path", "seed", "heads_at", "heads", "times", "result", "fast_overruled", "start", "stop", "first")

    def __init__(self, path: Path, seed: str, heads_at: Any = (), *, start: int = 0, stop: int | None = None) -> None:
        self.path = Path(path)
        self.seed = seed
        self.heads_at = frozenset(heads_at)
        self.heads: dict[int, str] = {0: seed} if 0 in self.heads_at and not start else {}
        # ... and the `t` of the last of those lines (what it holds; absent: none)
        self.times: dict[int, Any] = {}
        self.result: ChainCheck | None = None
        # A span: the bytes from ``start`` (a line's first byte) to ``stop``
        # (just after a newline; None: the end). A span after the first
        # cannot know its first line's position or predecessor: it takes
        # them from that line, says so in ``first`` ((seq, prev), None if
        # the line has none), and checks every link after it. Whoever joins
        # the spans checks that each ``first`` is where the span before
        # ended (its ``result.lines`` and ``result.head``).
        self.start, self.stop = start, stop
        self.first: tuple[int, str] | None = None
        # lines the fast parser read but only the standard one accepted
        self.fast_overruled = 0

    def __iter__(self) -> Iterator[tuple[int, dict]]:
        parse, links, sha256, fast = _parse_line, _links, hashlib.sha256, _fast_loads
        fast_canonical, guards_hold = _fast_canonical, _guards_hold
        wanted, heads = self.heads_at, self.heads
        head, n, end = self.seed, 0, self.start
        try:
            f = open_regular(self.path)
        except FileNotFoundError:
            self.result = ChainCheck(False, 0, head, problem=f"{self.path}: no such file", problem_line=0)
            return
        except NotRegularFile:
            self.result = ChainCheck(False, 0, head, problem=f"{self.path}: not a regular file", problem_line=0)
            return
        with f:
            batches = _batches(f, self.start, self.stop, guard=guards_hold if fast is not None else None)
            if self.start:
                batch = next(batches, None)
                head, n = self._take_first(batch)
                if head is None:
                    return
                batches = itertools.chain([batch], batches)  # its first line is checked as a link too
            for base, parts, is_tail, *asked in batches:
                if is_tail:
                    self.result = _torn_check(base, parts[0], n, head)
                    return
                # The byte guards of _fast_canonical, asked once for the whole
                # batch (its lines joined by newlines, which no guard pattern
                # holds); where they fail, asked again line by line.
                clean = fast is not None and asked[0]
                first = n
                for line in parts:
                    good = proposed = False
                    if fast is not None:
                        try:  # the fast parser's object, accepted by one of the canonical tests
                            obj = fast(line)
                            proposed = True
                            good = (obj.__class__ is dict and obj.get("prev") == head and obj.get("seq") == n
                                    and type(obj["seq"]) is int
                                    and (fast_canonical(obj, line, clean) or links(obj, line.decode(), head, n)))
                        except Exception:  # noqa: BLE001 - decided by the standard parser below
                            good = False
                    if not good:
                        try:
                            text = line.decode()
                            obj = parse(text)
                            good = links(obj, text, head, n)
                        except Exception:  # noqa: BLE001 - any failure takes the slow path
                            good = False
                        if not good:
                            self.result = _broken_check(base, parts, first, n, head)
                            return
                        if proposed:
                            self.fast_overruled += 1
                    head = sha256(line).hexdigest()
                    n += 1
                    if n in wanted:
                        heads[n] = head
                        self.times[n] = obj.get("t")
                    yield n - 1, obj
                end = base + sum(map(len, parts)) + len(parts)
        self.result = ChainCheck(True, n, head, end=end)

    def _take_first(self, batch: tuple | None) -> tuple[str | None, int]:
        """A later span's first line: its (prev, seq) as the span's start, or
        (None, 0) with ``result`` set when it has none (the joiner then reads
        the log from its seed instead)."""
        obj = None
        if batch is not None and not batch[2] and batch[1]:
            try:
                obj = _parse_line(batch[1][0].decode())
            except Exception:  # noqa: BLE001 - no position to take
                obj = None
        if type(obj) is dict and type(obj.get("seq")) is int and type(obj.get("prev")) is str:
            self.first = (obj["seq"], obj["prev"])
            return obj["prev"], obj["seq"]
        self.result = ChainCheck(False, 0, "", problem="the span's first line has no seq and prev", end=self.start)
        return None, 0


def iter_objects(path: Path) -> Iterator[dict]:
    """The parsed objects of ``path``'s complete lines, in order, by the
    standard parser, without checking links, hashing or re-encoding; stops
    quietly at the first line that is not a JSON object and never yields an
    unterminated tail. For re-reading a prefix the chain pass has already
    accepted."""
    parse = _parse_line
    with open_regular(path) as f:
        for _, parts, is_tail in _batches(f):
            if is_tail:
                return
            for line in parts:
                try:
                    obj = parse(line.decode())
                except Exception:  # noqa: BLE001 - the chain check reports it
                    return
                if type(obj) is not dict:
                    return
                yield obj


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


def _guard(guard: Any) -> Any:
    if guard is None:
        from confirmatory.redaction import Guard  # lazily: verify never writes

        guard = Guard()
    return guard


def write_json_durable(path: Path, obj: dict, *, guard: Any = None) -> str:
    """Write ``obj`` as canonical JSON + newline, atomically and durably.

    tmp file in the same directory (so the rename cannot cross filesystems)
    -> fsync it (its bytes are on disk before its name is) -> rename over the
    target (readers see the old file or the new one, never half) -> fsync the
    directory (the rename itself survives a crash). Returns the sha256 of the
    file's bytes. No secret value is written (``redaction.Guard``; one from
    the current environment unless ``guard`` is given).
    """
    path = Path(path)
    data = _guard(guard).clean(obj, dumps(obj)) + b"\n"
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

    def __init__(self, path: Path, seed: str, *, guard: Any = None) -> None:
        self.path = Path(path)
        self.seed = seed
        self.guard = _guard(guard)  # no secret value is ever appended (redaction.Guard)
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
            raise ChainBroken(self.path, result.lines, result.end, result.problem or "")
        fd = os.open(self.path, flags)
        # Race: a second writer on the same log would be a bug elsewhere; if
        # the file grew between the check and the open, refuse rather than
        # chain onto lines nobody checked.
        size = os.fstat(fd).st_size
        if size != result.end:
            os.close(fd)
            raise ChainBroken(
                self.path, result.lines, result.end,
                f"line {result.lines} at byte {result.end}: the file grew to {size} bytes while it was being opened",
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
            full = {**obj, "seq": self.lines, "prev": self.head}  # caller's dict untouched
            line = self.guard.clean(full, dumps(full))
            digest = sha256_hex(line)
            try:
                _write_all(self._fd, line + b"\n")
            except OSError as exc:
                raise self._fail("write", exc) from exc
            try:
                os.fsync(self._fd)
            except OSError as exc:
                raise self._fail("fsync", exc) from exc
            self.lines += 1
            self.head = digest
            return digest

    def _fail(self, op: str, exc: OSError) -> ChainWriteFailed:
        """Enter the failed state (lock held); the fd is closed, never fsynced again."""
        self.failed = True
        self._failure = (
            f"{op} of line {self.lines} failed: {exc}; the line is not acknowledged "
            "and the file may end in a torn or unconfirmed line"
        )
        try:
            os.close(self._fd)  # close() does not fsync; see the module docstring
        except OSError:
            pass
        return ChainWriteFailed(f"{self.path}: {self._failure}")

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
