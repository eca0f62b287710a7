"""RFC 9162 Merkle trees (section 2.1): hashes, roots, proofs and their two verifiers.

Pure: imports nothing of the package. Every log of a run is such a tree:
leaf i is the i-th line's bytes without its newline (docs/ANCHORS.md).

* ``leaf_hash`` (SHA-256 of 0x00 || data), ``node_hash`` (SHA-256 of
  0x01 || left || right), ``EMPTY_ROOT`` (SHA-256 of nothing).
* ``root``, ``inclusion_proof`` and ``consistency_proof`` over a list of
  leaf hashes (section 2.1.1, 2.1.3.1, 2.1.4.1).
* ``verify_inclusion`` and ``verify_consistency``: the RFC's algorithms of
  sections 2.1.3.2 and 2.1.4.2, step by step.
* ``Range``: a compact range of a tree, the O(log n) hashes that stand for
  the leaves [begin, end). From 0 it is the writer's *frontier*: ``append``
  and ``extend`` add leaves, ``root`` is the tree's root. A range of a later
  span (a worker's part of a log, or the leaves between two anchors) is
  joined onto the one before it with ``extend_range``; ``consistency_between``
  and ``inclusion_between`` make the proofs from such ranges alone, without
  the leaves (verify and ``confirmatory prove`` read a log once).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

_sha256 = hashlib.sha256
_digest = type(_sha256()).digest  # unbound: map() calls it in C
_LEAF, _NODE = b"\x00", b"\x01"
EMPTY_ROOT = _sha256(b"").digest()
HASH_SIZE = 32


def leaf_hash(data: bytes) -> bytes:
    """MTH of one entry: SHA-256(0x00 || data)."""
    return _sha256(_LEAF + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """An interior node: SHA-256(0x01 || left || right)."""
    return _sha256(_NODE + left + right).digest()


def leaf_hashes(lines: Iterable[bytes]) -> list[bytes]:
    """The leaf hash of each entry, in order (the loop runs in C)."""
    return list(map(_digest, map(_sha256, map(_LEAF.__add__, lines))))


def _pairs(hashes: list[bytes]) -> list[bytes]:
    """node_hash of each consecutive pair of an even-length list."""
    return list(map(_digest, map(_sha256, map(_NODE.__add__, map(bytes.__add__, hashes[0::2], hashes[1::2])))))


def _split(n: int) -> int:
    """The largest power of two smaller than n (n > 1): where the RFC splits n leaves."""
    return 1 << ((n - 1).bit_length() - 1)


class Range:
    """The compact range [begin, end) of a tree: its fewest whole subtrees.

    ``left`` holds the subtrees whose left neighbour is before ``begin`` (they
    never grow again), left to right as (level, hash); ``right[level]`` the
    subtree at that level that ends at ``end`` and may still be joined with
    what comes after. A subtree at level L holds 2**L leaves and starts at a
    multiple of 2**L. From begin 0, ``left`` stays empty and ``right`` is the
    frontier: one hash per set bit of ``end``."""

    __slots__ = ("begin", "end", "left", "right")

    def __init__(self, begin: int = 0) -> None:
        self.begin = self.end = begin
        self.left: list[tuple[int, bytes]] = []
        self.right: dict[int, bytes] = {}

    def copy(self) -> Range:
        other = Range(self.begin)
        other.end, other.left, other.right = self.end, list(self.left), dict(self.right)
        return other

    def append(self, leaf: bytes) -> None:
        """Add one leaf hash: O(log n), amortized one node hash."""
        level, pos, h = 0, self.end, leaf
        self.end += 1
        right, begin = self.right, self.begin
        while pos & 1:
            if (pos - 1) << level < begin:
                self.left.append((level, h))
                return
            h = _sha256(_NODE + right.pop(level) + h).digest()
            pos >>= 1
            level += 1
        right[level] = h

    def extend(self, leaves: list[bytes]) -> None:
        """Add many leaf hashes at once, a level at a time."""
        if leaves:
            self._carry(0, self.end, list(leaves))
            self.end += len(leaves)

    def _carry(self, level: int, pos: int, carry: list[bytes]) -> None:
        """Join ``carry``, consecutive subtrees at ``level`` whose first has
        index ``pos``, onto the range's right edge (``end`` not yet moved)."""
        right, begin = self.right, self.begin
        while carry:
            if pos & 1:
                if (pos - 1) << level >= begin:  # its left sibling is the pending subtree there
                    carry.insert(0, right.pop(level))
                    pos -= 1
                else:  # its sibling is before the range: it stays as it is
                    self.left.append((level, carry.pop(0)))
                    pos += 1
                    if not carry:
                        break
            if len(carry) & 1:
                right[level] = carry.pop()
            if len(carry) == 2:  # (a joined range's subtrees come one at a time)
                carry = [_sha256(_NODE + carry[0] + carry[1]).digest()]
            elif carry:
                carry = _pairs(carry)
            pos >>= 1
            level += 1

    def extend_range(self, other: Range) -> None:
        """Join the range that starts where this one ends onto it."""
        if other.begin != self.end:
            raise ValueError(f"a range from {other.begin} cannot follow one ending at {self.end}")
        for level, h in other.nodes():
            self._carry(level, self.end >> level, [h])
            self.end += 1 << level

    def nodes(self) -> list[tuple[int, bytes]]:
        """The range's subtrees, left to right, as (level, hash)."""
        return [*self.left, *((lv, self.right[lv]) for lv in sorted(self.right, reverse=True))]

    def spans(self) -> list[tuple[int, int, bytes]]:
        """The range's subtrees, left to right, as (first leaf, end, hash)."""
        out, at = [], self.begin
        for level, h in self.nodes():
            out.append((at, at + (1 << level), h))
            at += 1 << level
        return out

    def root(self) -> bytes:
        """The root of the tree of the leaves [0, end) (a range from 0 only)."""
        if self.begin:
            raise ValueError("only a range from leaf 0 has a root")
        acc = None
        for level in sorted(self.right):
            acc = self.right[level] if acc is None else _sha256(_NODE + self.right[level] + acc).digest()
        return EMPTY_ROOT if acc is None else acc


def root(leaves: Sequence[bytes]) -> bytes:
    """MTH of a list of leaf hashes."""
    r = Range()
    r.extend(list(leaves))
    return r.root()


def inclusion_proof(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """PATH(index, D[n]) of section 2.1.3.1, leaf upward, over n = len(leaves) leaf hashes."""
    n = len(leaves)
    if not 0 <= index < n:
        raise ValueError(f"leaf {index} is not in a tree of {n} leaves")
    return _path(index, n, lambda a, b: root(leaves[a:b]))


def consistency_proof(leaves: Sequence[bytes], first: int) -> list[bytes]:
    """PROOF(first, D[n]) of section 2.1.4.1 over n = len(leaves) leaf hashes."""
    return _subproof(first, len(leaves), lambda a, b: root(leaves[a:b]))


def _subproof(m: int, n: int, mth: Callable[[int, int], bytes]) -> list[bytes]:
    """SUBPROOF(m, D[0:n], true), with ``mth(a, b)`` giving MTH(D[a:b])."""
    if not 0 < m <= n:
        raise ValueError(f"no consistency proof from {m} to {n} leaves")
    out: list[bytes] = []
    lo, hi, whole = 0, n, True
    while True:
        size = hi - lo
        if m == size:
            if not whole:
                out.append(mth(lo, hi))
            break
        k = _split(size)
        if m <= k:
            out.append(mth(lo + k, hi))
            hi = lo + k
        else:
            out.append(mth(lo, lo + k))
            lo, m, whole = lo + k, m - k, False
    out.reverse()
    return out


def _oracle(*ranges: Range) -> Callable[[int, int], bytes]:
    """``mth(a, b)``: MTH(D[a:b]) for a subtree [a, b) that is one of the
    ranges' subtrees or is tiled by them (the only kind a proof between a
    frontier and the range after it asks for)."""
    spans = [span for r in ranges for span in r.spans()]
    known = {(a, b): h for a, b, h in spans}

    def mth(a: int, b: int) -> bytes:
        if (a, b) in known:
            return known[(a, b)]
        inside = [(s, e, h) for s, e, h in spans if a <= s and e <= b]
        if (
            not inside
            or inside[0][0] != a
            or inside[-1][1] != b
            or any(x[1] != y[0] for x, y in zip(inside, inside[1:]))
        ):
            raise ValueError(f"no subtree [{a}, {b}) in the ranges")
        acc = inside[-1][2]
        for _, _, h in reversed(inside[:-1]):
            acc = _sha256(_NODE + h + acc).digest()
        return acc

    return mth


def consistency_between(frontier: Range, since: Range) -> list[bytes]:
    """PROOF(m, D[n]) from the frontier of the first m leaves and the range
    [m, n) that follows it: every hash it needs is one of their subtrees or
    a join of the later one's (m > 0). No leaf is needed again."""
    if frontier.begin != 0 or since.begin != frontier.end:
        raise ValueError("the range must start where the frontier ends")
    return _subproof(frontier.end, since.end, _oracle(frontier, since))


def inclusion_between(frontier: Range, leaf: Range, after: Range) -> list[bytes]:
    """PATH(i, D[n]) from the frontier of the leaves before leaf i, the range
    of leaf i alone and the range of the leaves after it: a tree read once,
    in O(log n) memory (``confirmatory prove``)."""
    i = frontier.end
    if frontier.begin != 0 or (leaf.begin, leaf.end) != (i, i + 1) or after.begin != i + 1:
        raise ValueError("the ranges must be [0, i), [i, i + 1) and [i + 1, n)")
    return _path(i, after.end, _oracle(frontier, leaf, after))


def _path(index: int, n: int, mth: Callable[[int, int], bytes]) -> list[bytes]:
    """PATH(index, D[0:n]) of section 2.1.3.1 with ``mth(a, b)`` giving MTH(D[a:b]), leaf upward."""
    path: list[bytes] = []
    lo, hi = 0, n
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            path.append(mth(lo + k, hi))
            hi = lo + k
        else:
            path.append(mth(lo, lo + k))
            lo += k
    path.reverse()
    return path


# ------------------------------------------------------------------- the RFC's verifiers


def _hashes_ok(*hashes: object) -> bool:
    return all(isinstance(h, bytes) and len(h) == HASH_SIZE for h in hashes)


def verify_inclusion(leaf: bytes, index: int, size: int, path: Sequence[bytes], root_hash: bytes) -> bool:
    """RFC 9162 section 2.1.3.2: whether ``path`` proves leaf hash ``leaf``
    at ``index`` in the tree of ``size`` leaves whose root is ``root_hash``."""
    if not (_hashes_ok(leaf, root_hash, *path) and 0 <= index < size):
        return False
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = _sha256(_NODE + p + r).digest()
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            r = _sha256(_NODE + r + p).digest()
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root_hash


def verify_consistency(first: int, second: int, path: Sequence[bytes], first_root: bytes, second_root: bytes) -> bool:
    """RFC 9162 section 2.1.4.2: whether ``path`` proves that the tree of
    ``second`` leaves with root ``second_root`` extends the tree of ``first``
    leaves with root ``first_root``. Equal sizes need an empty path and
    equal roots; a proof from the empty tree is refused (as
    transparency-dev/merkle does: it would prove nothing)."""
    if not (
        _hashes_ok(*path) and isinstance(first_root, bytes) and isinstance(second_root, bytes) and 0 < first <= second
    ):
        return False
    if first == second:
        return not path and first_root == second_root
    if not path:
        return False
    path = list(path)
    if first & (first - 1) == 0:  # an exact power of two
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = _sha256(_NODE + c + fr).digest()
            sr = _sha256(_NODE + c + sr).digest()
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            sr = _sha256(_NODE + sr + c).digest()
        fn >>= 1
        sn >>= 1
    return fr == first_root and sr == second_root and sn == 0
