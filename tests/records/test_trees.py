"""The logs' RFC 9162 trees on the records side: the writer's frontier and the reader's cut tree.

Real files, real ChainWriters (fsync'd appends); every root is compared with
the tree built from the file's bytes by `core.merkle.root`.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from confirmatory.core import merkle
from confirmatory.records.chain import dumps, sha256_hex
from confirmatory.records.reader import ChainReader, prefix_tree
from confirmatory.records.writer import ChainWriter

SEED = "5" * 64


def file_root(path: Path, n: int) -> str:
    return merkle.root(merkle.leaf_hashes(path.read_bytes().split(b"\n")[:n])).hex()


def test_the_writers_frontier_gives_the_root_of_exactly_the_acknowledged_lines_and_survives_a_reopen(tmp_path):
    path = tmp_path / "log.jsonl"
    with ChainWriter(path, SEED) as w:
        assert w.anchor_snapshot() == (0, SEED, merkle.EMPTY_ROOT.hex())
        for i in range(37):
            w.append({"event": "x", "i": i})
            n, head, root = w.anchor_snapshot()
            assert (n, head) == w.snapshot() and root == file_root(path, n)
    with ChainWriter(path, SEED) as w:  # reopened: the frontier is rebuilt from the file's lines
        assert w.anchor_snapshot()[2] == file_root(path, 37)
        w.append({"event": "x", "i": 37})
        assert w.anchor_snapshot() == (38, w.head, file_root(path, 38))
    assert prefix_tree(path, 20).root().hex() == file_root(path, 20)


def _joined(trees: list[merkle.Range], counts: list[int]) -> dict[int, str]:
    """The root at each count, from the reader's pieces joined in order."""
    frontier, out = merkle.Range(), {}
    for piece in trees:
        frontier.extend_range(piece)
        out[frontier.end] = frontier.root().hex()
    return {c: out[c] for c in counts if c in out}


@settings(max_examples=15, deadline=None)
@given(
    st.integers(min_value=1, max_value=3000),
    st.lists(st.integers(min_value=0, max_value=3000), max_size=8),
    st.integers(min_value=1, max_value=3),
)
def test_the_readers_tree_cut_at_the_anchored_counts_gives_each_root_in_one_pass_or_in_spans(
    tmp_path_factory, n, counts, spans
):
    path = tmp_path_factory.mktemp("trees") / "log.jsonl"
    head, out = SEED, []
    for i in range(n):  # as ChainWriter writes them, without an fsync a line
        out.append(dumps({"event": "sample", "i": i, "pad": "x" * (i % 300), "seq": i, "prev": head}))
        head = sha256_hex(out[-1])
    path.write_bytes(b"".join(line + b"\n" for line in out))  # several of the reader's 256 KB batches
    counts = sorted({c for c in counts if c <= n} | {n})
    data = path.read_bytes()
    cuts = [0]
    for k in range(1, spans):  # spans starting at a line's first byte, as verify's workers read them
        at = data.find(b"\n", len(data) * k // spans) + 1
        if cuts[-1] < at < len(data):
            cuts.append(at)
    trees, last = [], None
    for start, stop in zip(cuts, [*cuts[1:], None]):
        reader = ChainReader(path, SEED, heads_at=counts, start=start, stop=stop, trees=True)
        for _ in reader:
            pass
        assert reader.result.ok
        assert last is None or reader.first == (last.lines, last.head)
        last = reader.result
        trees += reader.trees
    assert _joined(trees, counts) == {c: file_root(path, c) for c in counts if c}


def test_a_broken_line_ends_the_tree_at_the_last_good_line(tmp_path):
    path = tmp_path / "log.jsonl"
    with ChainWriter(path, SEED) as w:
        for i in range(10):
            w.append({"event": "x", "i": i})
    lines = path.read_bytes().split(b"\n")
    lines[6] = lines[6].replace(b'"i":6', b'"i":60')  # line 7's prev no longer links
    path.write_bytes(b"\n".join(lines))
    reader = ChainReader(path, SEED, heads_at=[3, 7, 9], trees=True)
    assert [seq for seq, _ in reader] == list(range(7))
    assert reader.result.lines == 7
    assert _joined(reader.trees, [3, 7]) == {3: file_root(path, 3), 7: file_root(path, 7)}
    assert reader.trees[-1].end == 7
