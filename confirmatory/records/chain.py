"""The hash chain's format (RECORDS.md "Encoding"): how a line is encoded and hashed, how a
log's seed is derived, and the vocabulary its reader and writer share.

* ``dumps``, ``sha256_hex``, ``log_seed`` and ``parse_document`` are pure;
  ``verify`` may use them. ``_fast_canonical`` says when orjson's object and
  encoding provably agree with the standard library's.
* ``ChainError`` and its kinds: ``ChainWriteFailed`` (the writer ended),
  ``ChainBroken`` (a complete line that is not a valid link) and
  ``TornTail`` (bytes after the last newline: the shape an append cut short
  by a crash leaves), with their exact offset, length and sha256.
* ``LogLine``, ``TornInfo``, ``ChainCheck``: what a read of a log returns.
* ``open_regular`` opens a regular file and nothing else (no FIFO, device or
  directory), for every reader.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import c_encode_basestring, c_make_encoder  # type: ignore[attr-defined]  # not in typeshed
from json.scanner import c_make_scanner, py_make_scanner  # type: ignore[attr-defined]  # not in typeshed
from pathlib import Path
from typing import Any


class NotRegularFile(OSError):
    """A path a reader was to read is not a regular file (a FIFO, a device, a
    folder, a socket): reading it could block for ever or never end."""


def open_regular(path: Any, dir_fd: int | None = None) -> io.FileIO:
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
# The records' format name (RECORDS.md): every manifest and open line carries it.
RECORD_FORMAT = "confirmatory-run/1"

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
_canon_text: Callable[[Any], str]  # the C encoder's, else _CANON's own
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
_fast_loads: Callable[[bytes], Any] | None  # declared here, so that the readers may import it
try:  # pragma: no cover - depends on the environment
    from orjson import OPT_SORT_KEYS as _SORT_KEYS
    from orjson import dumps as _fast_dumps
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover
    _fast_loads = _fast_dumps = None  # type: ignore[assignment]  # _fast_dumps: called only where orjson is
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


def dumps(obj: dict[str, Any]) -> bytes:
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

    def __init__(self, path: Path | str, torn: TornInfo) -> None:
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
    obj: dict[str, Any]
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
