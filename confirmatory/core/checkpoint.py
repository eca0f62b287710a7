"""C2SP tlog-checkpoint v1.0.0: a log's head as a signed note's text.

Pure: imports nothing of the package but ``core.note``. The body is

    <origin>
    <tree size in decimal, no leading zero>
    <base64 of the RFC 9162 root, 32 bytes>
    [extension lines, each non-empty]

each line ending in a newline (https://c2sp.org/tlog-checkpoint@v1.0.0).
The spec requires the origin to be non-empty and recommends it hold no
Unicode space and no ``+``; a checkpoint this package makes must keep that
recommendation (``check_origin``: ``Checkpoint.body`` and
``sign_checkpoint`` refuse otherwise), one it reads need only be non-empty
(clients MUST NOT assume the origin's format).

The names other modules use: ``Checkpoint`` (``parse``, ``body``),
``check_origin``, ``sign_checkpoint``, ``open_checkpoint``, ``MalformedCheckpoint``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass

from confirmatory.core.note import MalformedNote, NoteSigner, OpenedNote, Verifier, check_text, open_note, sign_note

ROOT_SIZE = 32
MAX_SIZE = 2**64 - 1  # a tree size is a u64 in every log implementation


class MalformedCheckpoint(MalformedNote):
    """A note text that is not a checkpoint body; the message names the line and what is wrong."""


def check_origin(origin: str) -> str:
    """An origin this package signs: non-empty, no Unicode space, no ``+``, no control character."""
    if not isinstance(origin, str) or not origin:
        raise MalformedCheckpoint("a checkpoint's origin is empty")
    if any(ch.isspace() for ch in origin):
        raise MalformedCheckpoint(f"the origin {origin!r} holds a space")
    if "+" in origin:
        raise MalformedCheckpoint(f"the origin {origin!r} holds a '+'")
    if any(ord(ch) < 0x20 for ch in origin):
        raise MalformedCheckpoint(f"the origin {origin!r} holds a control character")
    return origin


def _size(line: str) -> int:
    if not line or not line.isascii() or not line.isdigit():
        raise MalformedCheckpoint(f"a checkpoint's second line is the tree size in decimal, not {line[:80]!r}")
    if line != "0" and line.startswith("0"):
        raise MalformedCheckpoint(f"the tree size {line!r} has a leading zero")
    if len(line) > 20 or int(line) > MAX_SIZE:
        raise MalformedCheckpoint(f"the tree size {line[:80]} is more than 2^64 - 1")
    return int(line)


def _root(line: str) -> bytes:
    try:
        raw = base64.b64decode(line.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise MalformedCheckpoint(f"a checkpoint's third line is the root in base64, not {line[:80]!r}") from None
    if base64.b64encode(raw).decode() != line:
        raise MalformedCheckpoint(f"the root {line[:80]!r} is not canonical base64")
    if len(raw) != ROOT_SIZE:
        raise MalformedCheckpoint(f"the root is {len(raw)} bytes, not a SHA-256 hash's {ROOT_SIZE}")
    return raw


@dataclass(frozen=True)
class Checkpoint:
    """A log's head: its origin, its tree size and its RFC 9162 root (and opaque extension lines)."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.origin, str) or not self.origin or "\n" in self.origin:
            raise MalformedCheckpoint("a checkpoint's origin is one non-empty line")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or not 0 <= self.size <= MAX_SIZE:
            raise MalformedCheckpoint(f"a tree size is an integer from 0 to 2^64 - 1, not {self.size!r}")
        if not isinstance(self.root, bytes) or len(self.root) != ROOT_SIZE:
            raise MalformedCheckpoint(f"a checkpoint's root is {ROOT_SIZE} bytes")
        for ext in self.extensions:
            if not isinstance(ext, str) or not ext or "\n" in ext:
                raise MalformedCheckpoint(f"an extension line is one non-empty line, not {ext!r}")

    @property
    def root_b64(self) -> str:
        return base64.b64encode(self.root).decode()

    def body(self) -> str:
        """The note text: origin, size, root and each extension line, each with its newline."""
        check_origin(self.origin)
        text = "".join(f"{line}\n" for line in (self.origin, str(self.size), self.root_b64, *self.extensions))
        check_text(text)
        return text

    @classmethod
    def parse(cls, body: str | bytes) -> Checkpoint:
        """A checkpoint from its note text (the part before the blank line, final newline included)."""
        text = check_text(body).decode("utf-8")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise MalformedCheckpoint(
                f"a checkpoint has at least three lines (origin, size, root), this one {len(lines)}"
            )
        origin, size, root, *extensions = lines
        if not origin:
            raise MalformedCheckpoint("a checkpoint's origin (its first line) is empty")
        for k, ext in enumerate(extensions):
            if not ext:
                raise MalformedCheckpoint(f"extension line {k + 1} (line {k + 4}) is empty")
        return cls(origin, _size(size), _root(root), tuple(extensions))


def sign_checkpoint(checkpoint: Checkpoint, signer: NoteSigner) -> str:
    """The checkpoint as a signed note by ``signer`` (its origin must pass ``check_origin``)."""
    return sign_note(checkpoint.body(), signer)


def open_checkpoint(signed: str | bytes, known: Iterable[Verifier]) -> tuple[Checkpoint, OpenedNote]:
    """A signed checkpoint verified against ``known`` keys (``core.note.open_note``), and its body parsed."""
    opened = open_note(signed, known)
    return Checkpoint.parse(opened.text), opened
