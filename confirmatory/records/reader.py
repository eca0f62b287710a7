"""Streaming readers of a hash-chained log: they read in binary chunks and never hold the whole file.

* ``iter_lines``, ``check_chain`` and ``prefix_head`` re-check a log from its
  seed; damage is reported, never repaired (``ChainBroken``, ``TornTail``).
* ``ChainReader`` is one pass that checks the links and yields the parsed
  lines, for ``verify``; it takes orjson's object and encoding where they
  provably agree with the standard library's (``chain._fast_canonical``).
* ``iter_objects`` yields the parsed objects of a log's complete lines.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confirmatory.core.merkle import Range, leaf_hashes
from confirmatory.records.chain import (
    ChainBroken,
    ChainCheck,
    LogLine,
    NotRegularFile,
    TornInfo,
    TornTail,
    _canon_text,
    _fast_canonical,
    _fast_loads,
    _guards_hold,
    _parse_line,
    dumps,
    open_regular,
    sha256_hex,
)

_CHUNK = 1 << 18  # readers hold one chunk (and its lines) at a time
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
        return (
            f"prev is {obj.get('prev')!r}, expected {head} (the sha256 of line {n - 1}: "
            f"line {n - 1} was changed, or this line's prev, or a line was removed or inserted here)"
            if n
            else f"prev is {obj.get('prev')!r}, expected the log's seed {head}"
        )
    try:
        if dumps(obj) != line:
            return "not in canonical encoding (sorted keys, no spaces, UTF-8)"
    except ValueError as exc:
        return f"cannot be re-encoded ({exc})"
    return None


def _batches(f: Any, start: int = 0, stop: int | None = None, *, guard: Any = None) -> Iterator[tuple[Any, ...]]:
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


def prefix_tree(path: Path, n: int) -> Range:
    """The RFC 9162 tree of the first ``n`` complete lines of ``path`` (each
    line's bytes without its newline a leaf), as its frontier: ``root()`` is
    its root. Links are not checked (``check_chain`` does); ValueError if the
    file has fewer than ``n`` complete lines."""
    tree = Range()
    if n <= 0:
        return tree
    with open_regular(Path(path)) as f:
        for _, parts, is_tail in _batches(f):
            if is_tail:
                break
            tree.extend(leaf_hashes(parts[: n - tree.end]))
            if tree.end >= n:
                return tree
    raise ValueError(f"{path}: {tree.end} complete lines, fewer than {n}")


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
    With ``trees``, ``trees`` is the good lines' RFC 9162 Merkle tree cut at
    those counts: a list of ``merkle.Range``, the first from the reader's
    first line, each ending at the next count in ``heads_at`` (or at the last
    good line, the list's last), which ``merkle.Range.extend_range`` joins
    into the frontier at each count (leaf hashes are made a batch at a time).
    """

    __slots__ = (
        "path",
        "seed",
        "heads_at",
        "heads",
        "times",
        "result",
        "fast_overruled",
        "start",
        "stop",
        "first",
        "trees",
        "_cuts",
    )

    def __init__(
        self, path: Path, seed: str, heads_at: Any = (), *, start: int = 0, stop: int | None = None, trees: bool = False
    ) -> None:
        self.path = Path(path)
        self.seed = seed
        self.heads_at = frozenset(heads_at)
        self.trees: list[Range] | None = [] if trees else None
        self._cuts = sorted(self.heads_at)
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

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        parse, links, sha256, fast = _parse_line, _links, hashlib.sha256, _fast_loads
        fast_canonical, guards_hold = _fast_canonical, _guards_hold
        wanted, heads = self.heads_at, self.heads
        head: str | None  # None only from a span's first line without a position (_take_first)
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
                if head is None or batch is None:  # (no batch: no head either)
                    return
                batches = itertools.chain([batch], batches)  # its first line is checked as a link too
            trees, tree = self.trees, None
            if trees is not None:
                cuts = iter([c for c in self._cuts if c > n])
                tree, cut = Range(n), next(cuts, None)
            for base, parts, is_tail, *asked in batches:
                if is_tail:
                    self._end_tree(tree)
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
                            good = (
                                obj.__class__ is dict
                                and obj.get("prev") == head
                                and obj.get("seq") == n
                                and type(obj["seq"]) is int
                                and (fast_canonical(obj, line, clean) or links(obj, line.decode(), head, n))
                            )
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
                            if tree is not None:
                                tree, cut = self._grow(tree, cut, cuts, parts[: n - first], n)
                                self._end_tree(tree)
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
                if tree is not None:  # the batch's lines, all good: into the tree
                    tree, cut = self._grow(tree, cut, cuts, parts, n)
                end = base + sum(map(len, parts)) + len(parts)
            self._end_tree(tree)
        self.result = ChainCheck(True, n, head, end=end)

    def _grow(
        self, tree: Range, cut: int | None, cuts: Iterator[int], lines: list[bytes], n: int
    ) -> tuple[Range, int | None]:
        """Add ``lines``, the good lines that end at line count ``n``, to the
        tree, cutting it at each count on the way; the range under way and
        the next cut."""
        assert self.trees is not None  # a tree grows only where trees are kept
        leaves = leaf_hashes(lines)
        at = 0
        while cut is not None and cut <= n:
            k = cut - tree.end
            tree.extend(leaves[at : at + k])
            at += k
            self.trees.append(tree)
            tree, cut = Range(cut), next(cuts, None)
        tree.extend(leaves[at:])
        return tree, cut

    def _end_tree(self, tree: Range | None) -> None:
        if tree is not None:
            assert self.trees is not None  # as in _grow
            self.trees.append(tree)

    def _take_first(self, batch: tuple[Any, ...] | None) -> tuple[str | None, int]:
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


def iter_objects(path: Path) -> Iterator[dict[str, Any]]:
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
