"""What the anchors fix about each log, kept compactly, and the Merkle roots checked against it.

Owns `Fixed` (one log's anchored counts, heads and roots, in arrays),
`settle_roots` (each anchor's RFC 9162 root against the log's tree at its
count, and each anchor's tree against the previous one's by a consistency
proof made from the log) and `witness_fixed` (the witness's own anchors,
read into the same arrays so they are checked like the run's). Used by
`logs.LogPass`; see docs/ANCHORS.md for what a root proves.
"""

from __future__ import annotations

import json
import re
from array import array

from confirmatory.core.merkle import EMPTY_ROOT, Range, consistency_between, verify_consistency
from confirmatory.verify.report import Findings

ANCHORS_LOG = "anchors.jsonl"

_HEX64 = re.compile(r"[0-9a-f]{64}")
_MAX_COUNT = (1 << 63) - 1


class Fixed:
    """One log's anchored line counts, heads and Merkle roots, in anchor
    order, in arrays (72 bytes an anchor, not a dictionary each): what verify
    keeps of anchors.jsonl must not grow by much with the number of anchors.
    A head or root that is not 64 lower-case hex digits cannot be any line's
    hash or any tree's root: it is kept as "matches nothing". An entry
    without a root (an anchor written before anchors had roots) is in
    ``rootless``: its root is not checked."""

    __slots__ = ("seqs", "counts", "heads", "odd", "big", "roots", "rootless", "odd_roots")

    def __init__(self) -> None:
        self.seqs = array("q")  # the anchor line of each entry
        self.counts = array("q")  # ... the line count it fixes
        self.heads = bytearray()  # ... and the head it gives (32 bytes each)
        self.odd: set[int] = set()  # entries whose head is not a sha256 in hex
        self.big: dict[int, int] = {}  # entries whose count is beyond 64 bits, as written
        self.roots = bytearray()  # ... and the root of the tree over those lines (32 bytes each)
        self.rootless: set[int] = set()  # entries with no root at all
        self.odd_roots: set[int] = set()  # entries whose root is not a sha256 in hex

    def add(self, seq: int, n: int, head: object, root: object = None) -> None:
        k = len(self.seqs)
        self.seqs.append(seq)
        if n > _MAX_COUNT:
            self.big[k] = n
        self.counts.append(min(n, _MAX_COUNT))
        if type(head) is str and _HEX64.fullmatch(head):
            self.heads += bytes.fromhex(head)
        else:
            self.heads += bytes(32)
            self.odd.add(k)
        if type(root) is str and _HEX64.fullmatch(root):
            self.roots += bytes.fromhex(root)
        else:
            self.roots += bytes(32)
            (self.rootless if root is None else self.odd_roots).add(k)

    def root(self, k: int) -> bytes | None:
        """Entry k's root (None: none, or not a sha256 in hex)."""
        return None if k in self.rootless or k in self.odd_roots else bytes(self.roots[32 * k : 32 * k + 32])

    @property
    def has_roots(self) -> bool:
        return len(self.rootless) < len(self.seqs)

    def count(self, k: int) -> int:
        return self.big.get(k, self.counts[k])

    def matches(self, k: int, seen: str | None) -> bool:
        return seen is not None and k not in self.odd and self.heads[32 * k : 32 * k + 32].hex() == seen


def settle_roots(
    rel: str, fixed: Fixed, valid: int, trees: list[Range], f: Findings, where: str = ANCHORS_LOG, whose: str = ""
) -> dict[int, bytes]:
    """Each anchor's root for ``rel`` against the tree over the log's first
    ``lines`` lines, and each anchor's stored root against the previous
    anchor's by an RFC 9162 consistency proof made from the log (so the
    anchors' roots, a witness's copy say, are shown to extend each other).

    ``trees``: the chain-valid lines' tree cut at every anchored count
    (``ChainReader.trees``, a span's joined after the one before), joined
    here count by count: O(log n) hashes an anchor. An entry without a root
    (written before anchors had roots) is counted in the report's note as
    not checked, never a violation. Returns the roots computed at the
    anchored counts the log reaches. ``where`` and ``whose`` name the anchors
    in a violation (the witness's: "witness", "the witness's ")."""
    own = not where.startswith("witness")  # the witness's copy of the same anchors is not counted twice
    if not fixed.has_roots:
        f.rootless += len(fixed.seqs) if own else 0
        return {}
    f.rootless += len(fixed.rootless) if own else 0
    cuts = sorted({fixed.count(k) for k in range(len(fixed.seqs))} - {0})
    computed: dict[int, bytes] = {0: EMPTY_ROOT}
    proofs: dict[tuple[int, int], list[bytes]] = {}
    frontier, segments, before = Range(), iter(trees), 0
    for cut in cuts:
        if cut > valid:
            break
        since = Range(before)
        try:
            while since.end < cut:
                since.extend_range(next(segments))
        except (StopIteration, ValueError):
            break  # the trees end short (a damaged span): the counts past are judged by their heads
        if since.end != cut:
            break
        if before:
            proofs[(before, cut)] = consistency_between(frontier, since)
        frontier.extend_range(since)
        computed[cut] = frontier.root()
        before = cut
    last: tuple[int, int, bytes] | None = None  # (seq, count, root) of the previous entry with a root
    for k, seq in enumerate(fixed.seqs):
        n, stored = fixed.count(k), fixed.root(k)
        if k in fixed.rootless:
            continue
        f.check(8)
        if stored is None:  # not a root at all: reported as the anchors were read
            last = None
            continue
        if n in computed and stored != computed[n]:
            f.fail(
                8,
                where,
                seq,
                f"{whose}anchor line {seq}: {rel}: root at line count {n} differs from the "
                "Merkle tree of the log's first lines (a line was changed, removed or inserted, or the root)",
            )
        if last is not None:
            f.check(8)
            seq0, m, root0 = last
            if m == n:
                ok = root0 == stored
            elif 0 < m < n:
                ok = (m, n) not in proofs or verify_consistency(m, n, proofs[(m, n)], root0, stored)
            else:
                ok = True  # from 0 lines any tree extends it; a count that went down is reported above
            if not ok:
                f.fail(
                    8,
                    where,
                    seq,
                    f"{whose}anchor line {seq}: {rel}: its tree ({n} lines) does not extend "
                    f"anchor line {seq0}'s ({m} lines): their roots fail the RFC 9162 consistency proof",
                )
        last = (seq, n, stored)
    return computed


def witness_fixed(held: list[bytes], anchored: set[str]) -> dict[str, Fixed]:
    """The witness's newest anchors (its file's complete lines), per log of
    ``anchored``, in the arrays the run's own are kept in. A line that is
    not an anchor is skipped: the witness check says how the file differs
    from the run's anchors.jsonl."""
    out: dict[str, Fixed] = {}
    for k, raw in enumerate(held):
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        logs = obj.get("logs") if isinstance(obj, dict) and obj.get("event") == "anchor" else None
        for rel, entry in logs.items() if isinstance(logs, dict) else ():
            n = entry.get("lines") if isinstance(entry, dict) else None
            if rel in anchored and type(n) is int and n >= 0:
                out.setdefault(rel, Fixed()).add(k, n, entry.get("head"), entry.get("root"))
    return out
