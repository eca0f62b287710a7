"""RFC 9162 Merkle trees (confirmatory.core.merkle): the published vectors, then properties.

The vectors are transparency-dev/merkle's (tests/data/merkle/README.md): the
RFC 6962 eight-leaf tree's roots at every size, and its inclusion and
consistency probes, negative ones included, each with the verdict expected.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from confirmatory.core import merkle as M

DATA = Path(__file__).resolve().parents[1] / "data" / "merkle"

# testonly/constants.go of transparency-dev/merkle: LeafInputs() and RootHashes().
LEAF_INPUTS = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]
ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def _b(value):
    return base64.b64decode(value) if value else b""


def _ref_root(leaves: list[bytes]) -> bytes:
    """Section 2.1.1 as written: the recursion, for the properties below."""
    if not leaves:
        return M.EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return M.node_hash(_ref_root(leaves[:k]), _ref_root(leaves[k:]))


def _leaves(n: int) -> list[bytes]:
    return [M.leaf_hash(b"line %d" % i) for i in range(n)]


# ------------------------------------------------------------------ the published vectors


@pytest.mark.parametrize("size", range(9))
def test_the_rfc_6962_eight_leaf_tree_has_the_published_root_at_every_size(size):
    leaves = [M.leaf_hash(bytes.fromhex(x)) for x in LEAF_INPUTS[:size]]
    assert M.root(leaves).hex() == ROOTS[size]
    frontier = M.Range()
    for h in leaves:
        frontier.append(h)
    assert frontier.root().hex() == ROOTS[size]


def test_the_vectors_are_all_there():
    inclusion = json.loads((DATA / "inclusion.json").read_text())
    consistency = json.loads((DATA / "consistency.json").read_text())
    assert len(inclusion) == 98 and len(consistency) == 98
    assert sum(not p["wantErr"] for p in inclusion) == 6 and sum(not p["wantErr"] for p in consistency) == 6


@pytest.mark.parametrize("probe", json.loads((DATA / "inclusion.json").read_text()), ids=lambda p: p["file"])
def test_every_published_inclusion_probe_gets_its_expected_verdict(probe):
    ok = M.verify_inclusion(
        _b(probe["leafHash"]),
        probe["leafIdx"],
        probe["treeSize"],
        [_b(p) for p in probe["proof"] or []],
        _b(probe["root"]),
    )
    assert ok is not probe["wantErr"]


@pytest.mark.parametrize("probe", json.loads((DATA / "consistency.json").read_text()), ids=lambda p: p["file"])
def test_every_published_consistency_probe_gets_its_expected_verdict(probe):
    ok = M.verify_consistency(
        probe["size1"], probe["size2"], [_b(p) for p in probe["proof"] or []], _b(probe["root1"]), _b(probe["root2"])
    )
    assert ok is not probe["wantErr"]


def test_the_happy_path_probes_are_the_proofs_this_module_makes():
    leaves = [M.leaf_hash(bytes.fromhex(x)) for x in LEAF_INPUTS]
    for probe in json.loads((DATA / "inclusion.json").read_text()):
        if not probe["wantErr"]:
            assert probe["treeSize"] <= 8
            made = M.inclusion_proof(leaves[: probe["treeSize"]], probe["leafIdx"])
            assert [base64.b64encode(h).decode() for h in made] == (probe["proof"] or [])
    for probe in json.loads((DATA / "consistency.json").read_text()):
        if not probe["wantErr"] and probe["size1"] < probe["size2"]:
            made = M.consistency_proof(leaves[: probe["size2"]], probe["size1"])
            assert [base64.b64encode(h).decode() for h in made] == probe["proof"]


# ------------------------------------------------------------------ properties

SIZES = st.integers(min_value=1, max_value=2000)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_every_inclusion_proof_verifies_and_any_flipped_bit_or_wrong_size_fails(data):
    n = data.draw(SIZES, "size")
    i = data.draw(st.integers(0, n - 1), "index")
    leaves = _leaves(n)
    root = M.root(leaves)
    assert root == _ref_root(leaves)
    path = M.inclusion_proof(leaves, i)
    assert M.verify_inclusion(leaves[i], i, n, path, root)
    # (against its own root with the size said to be n + 1 it may verify: the
    # path's shape from some leaves is the same in both trees; the size is
    # bound by the root)
    assert not M.verify_inclusion(leaves[i], i, n + 1, path, M.root(_leaves(n + 1)))
    bit = data.draw(st.integers(0, 255), "bit")

    def flip(h: bytes) -> bytes:
        if bit < 8:
            return bytes([h[0] ^ (1 << (bit % 8))]) + h[1:]
        return h[: bit // 8] + bytes([h[bit // 8] ^ (1 << (bit % 8))]) + h[bit // 8 + 1 :]

    assert not M.verify_inclusion(flip(leaves[i]), i, n, path, root)
    assert not M.verify_inclusion(leaves[i], i, n, path, flip(root))
    if path:
        k = data.draw(st.integers(0, len(path) - 1), "which hash")
        assert not M.verify_inclusion(leaves[i], i, n, [*path[:k], flip(path[k]), *path[k + 1 :]], root)
        assert not M.verify_inclusion(leaves[i], i, n, path[:-1], root)
    assert not M.verify_inclusion(leaves[i], i, n, [*path, root], root)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_every_consistency_proof_verifies_and_any_flipped_bit_or_wrong_size_fails(data):
    n = data.draw(SIZES, "second")
    m = data.draw(st.integers(1, n), "first")
    leaves = _leaves(n + 1)
    r1, r2 = M.root(leaves[:m]), M.root(leaves[:n])
    path = M.consistency_proof(leaves[:n], m)
    assert M.verify_consistency(m, n, path, r1, r2)
    assert not M.verify_consistency(m, n + 1, path, r1, M.root(leaves))
    bit = data.draw(st.integers(0, 255), "bit")

    def flip(h):
        return h[: bit // 8] + bytes([h[bit // 8] ^ (1 << (bit % 8))]) + h[bit // 8 + 1 :]

    assert not M.verify_consistency(m, n, path, flip(r1), r2)
    assert not M.verify_consistency(m, n, path, r1, flip(r2))
    if path:
        k = data.draw(st.integers(0, len(path) - 1), "which hash")
        assert not M.verify_consistency(m, n, [*path[:k], flip(path[k]), *path[k + 1 :]], r1, r2)
        assert not M.verify_consistency(m, n, path[:-1], r1, r2)
        assert not M.verify_consistency(m, n, [*path, r1], r1, r2)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_ranges_joined_in_any_cut_give_the_roots_and_proofs_of_the_whole(data):
    """What verify does: a frontier per anchored count, a range per span
    between cuts, joined; the consistency proof made from them alone."""
    n = data.draw(SIZES, "size")
    cuts = sorted(set(data.draw(st.lists(st.integers(1, n), max_size=6), "cuts")) | {n})
    leaves = _leaves(n)
    frontier, at = M.Range(), 0
    for cut in cuts:
        since = M.Range(at)
        half = (at + cut) // 2  # the range itself in two spans, one leaf at a time and in a batch
        first = M.Range(at)
        for h in leaves[at:half]:
            first.append(h)
        second = M.Range(half)
        second.extend(leaves[half:cut])
        since.extend_range(first)
        since.extend_range(second)
        if at:
            proof = M.consistency_between(frontier, since)
            assert proof == M.consistency_proof(leaves[:cut], at)
            assert M.verify_consistency(at, cut, proof, frontier.root(), _ref_root(leaves[:cut]))
        frontier.extend_range(since)
        assert frontier.end == cut and frontier.root() == _ref_root(leaves[:cut])
        at = cut
    i = data.draw(st.integers(0, n - 1), "index")  # an inclusion proof from three ranges alone
    parts = [M.Range(0), M.Range(i), M.Range(i + 1)]
    for part, (a, b) in zip(parts, ((0, i), (i, i + 1), (i + 1, n))):
        part.extend(leaves[a:b])
    assert M.inclusion_between(*parts) == M.inclusion_proof(leaves, i)
