"""``confirmatory prove`` and ``confirmatory check-proof``: RFC 9162 proofs against the anchors' roots.

``prove`` reads a run's anchors.jsonl, builds the named log's Merkle tree
from the file once (each line's bytes without its newline a leaf), checks
that it gives the anchor's root, and prints the inclusion proof of one line
or the consistency proof between two anchors. ``check-proof`` verifies such
a proof from the proof alone (``core.merkle``'s two verifiers, RFC 9162
sections 2.1.3.2 and 2.1.4.2) and, given an anchors file (the witness's
copy, say), that an anchor in it fixes that root. docs/ANCHORS.md says
what a proof proves and how to check one without this project.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, cast

from confirmatory.core import merkle
from confirmatory.core.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from confirmatory.records.chain import open_regular
from confirmatory.records.reader import _batches


class ProofError(Exception):
    """Bad input or a proof that cannot be made: one line, and its exit status."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


def _anchors(path: Path) -> list[dict[str, Any]]:
    """The anchor lines of an anchors file, in order (read as JSON; verify checks their chain)."""
    try:
        data = open_regular(path).readall()
    except OSError as exc:
        raise ProofError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    out = []
    for k, raw in enumerate(data.split(b"\n")):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            raise ProofError(f"{path}: line {k} is not JSON") from None
        if isinstance(obj, dict) and obj.get("event") == "anchor" and isinstance(obj.get("logs"), dict):
            out.append(obj)
    return out


def _entry(anchors: list[dict[str, Any]], seq: int | None, log: str, where: Path) -> tuple[int, int, str]:
    """(anchor seq, lines, root) that anchor ``seq`` (the last when None) fixes for ``log``."""
    if not anchors:
        raise ProofError(f"{where}: no anchor line")
    anchor: dict[str, Any] | None
    if seq is None:
        anchor = anchors[-1]
    else:
        anchor = next((a for a in anchors if a.get("seq") == seq), None)
        if anchor is None:
            raise ProofError(
                f"{where}: no anchor line with seq {seq} (anchors: {', '.join(str(a.get('seq')) for a in anchors)})"
            )
    entry = anchor["logs"].get(log)
    if not isinstance(entry, dict):
        raise ProofError(
            f"{where}: anchor {anchor.get('seq')} does not anchor {log} "
            f"(it anchors {', '.join(sorted(anchor['logs']))})"
        )
    n, root = entry.get("lines"), entry.get("root")
    if type(n) is not int or n < 0:
        raise ProofError(f"{where}: anchor {anchor.get('seq')}: {log} has no line count")
    if root is None:
        raise ProofError(
            f"{where}: anchor {anchor.get('seq')} gives {log} no Merkle root (it was written "
            "before anchors had roots): there is no root to prove against",
            EXIT_FAILED,
        )
    if type(root) is not str or len(root) != 64:
        raise ProofError(f"{where}: anchor {anchor.get('seq')}: {log}'s root is not a sha256 in hex")
    return cast(int, anchor.get("seq")), n, root


def _ranges(path: Path, cuts: list[int], keep: int | None = None) -> tuple[list[merkle.Range], bytes | None]:
    """The tree of ``path``'s first ``cuts[-1]`` lines, read once, as the
    ranges between consecutive ``cuts`` (the first from 0), in O(log n)
    memory; and line ``keep``'s bytes."""
    ranges, at, kept = [merkle.Range(0)], 0, None
    bounds = iter(cuts)
    cut: int | None = next(bounds)
    try:
        with open_regular(path) as f:
            for _, parts, is_tail in _batches(f):
                if is_tail or cut is None:
                    break
                if keep is not None and at <= keep < at + len(parts):
                    kept = parts[keep - at]
                leaves = merkle.leaf_hashes(parts[: cuts[-1] - at])
                at += len(parts)
                done = 0
                while cut is not None and ranges[-1].end + len(leaves) - done >= cut:
                    take = cut - ranges[-1].end
                    ranges[-1].extend(leaves[done : done + take])
                    done += take
                    cut = next(bounds, None)
                    if cut is not None:
                        ranges.append(merkle.Range(ranges[-1].end))
                if cut is not None:
                    ranges[-1].extend(leaves[done:])
    except OSError as exc:
        raise ProofError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if cut is not None:
        got = ranges[-1].end
        raise ProofError(
            f"{path}: {got} complete lines, but the anchor counts {cuts[-1]}: the log was cut "
            "after it was anchored (verify says where)",
            EXIT_FAILED,
        )
    return ranges, kept


def _joined(*ranges: merkle.Range) -> merkle.Range:
    whole = ranges[0].copy()
    for r in ranges[1:]:
        whole.extend_range(r)
    return whole


def _same_root(tree: merkle.Range, root: str, log: str, seq: int) -> None:
    got = tree.root().hex()
    if got != root:
        raise ProofError(
            f"{log}: its first {tree.end} lines give the Merkle root {got}, anchor {seq} fixes "
            f"{root}: the log changed after it was anchored (verify says where)",
            EXIT_FAILED,
        )


def _safe_log(run_dir: Path, log: str) -> Path:
    if Path(log).is_absolute() or ".." in Path(log).parts:
        raise ProofError(f"LOG {log!r}: give a path relative to the run directory, as the anchors name it")
    return run_dir / log


def make_inclusion(run_dir: Path, log: str, index: int, anchor: int | None) -> dict[str, Any]:
    seq, n, root = _entry(_anchors(run_dir / "anchors.jsonl"), anchor, log, run_dir / "anchors.jsonl")
    if not 0 <= index < n:
        raise ProofError(f"INDEX {index}: anchor {seq} counts lines 0 to {n - 1} of {log}")
    (before, leaf, after), line = _ranges(_safe_log(run_dir, log), [index, index + 1, n], index)
    _same_root(_joined(before, leaf, after), root, log, seq)
    assert line is not None
    try:
        text = line.decode()
    except UnicodeDecodeError:
        raise ProofError(f"{log}: line {index} is not UTF-8 (verify says more)", EXIT_FAILED) from None
    path = merkle.inclusion_between(before, leaf, after)
    return {
        "log": log,
        "leaf_index": index,
        "tree_size": n,
        "root": root,
        "leaf": text,
        "path": [h.hex() for h in path],
        "anchor": seq,
        **_bound(run_dir, [seq]),
    }


def _bound(run_dir: Path, seqs: list[int]) -> dict[str, Any]:
    """The anchor lines and the signed checkpoint that fix the proof's size and root ({} when the run has none)."""
    from confirmatory.records.binding import BindingError, bind

    try:
        return bind(run_dir, seqs) or {}
    except BindingError as exc:
        raise ProofError(str(exc), exc.status) from None


def make_consistency(run_dir: Path, log: str, first: int, second: int) -> dict[str, Any]:
    anchors = _anchors(run_dir / "anchors.jsonl")
    seq1, m, root1 = _entry(anchors, first, log, run_dir / "anchors.jsonl")
    seq2, n, root2 = _entry(anchors, second, log, run_dir / "anchors.jsonl")
    if m > n:
        raise ProofError(
            f"--consistency {first} {second}: anchor {seq1} counts {m} lines of {log}, more than "
            f"anchor {seq2}'s {n}: give the earlier anchor first"
        )
    if m == 0:
        raise ProofError(
            f"anchor {seq1} counts no line of {log}: every tree extends the empty one, and RFC 9162 "
            "has no proof from it",
            EXIT_FAILED,
        )
    (first_tree, since), _ = _ranges(_safe_log(run_dir, log), [m, n])
    _same_root(first_tree, root1, log, seq1)
    _same_root(_joined(first_tree, since), root2, log, seq2)
    path = merkle.consistency_between(first_tree, since)
    return {
        "log": log,
        "first_size": m,
        "second_size": n,
        "first_root": root1,
        "second_root": root2,
        "path": [h.hex() for h in path],
        "first_anchor": seq1,
        "second_anchor": seq2,
        **_bound(run_dir, [seq1, seq2]),
    }


def prove_command(
    run_dir: Path, log: str, index: int | None, anchor: int | None, consistency: tuple[int, int] | None, as_json: bool
) -> int:
    try:
        if consistency is not None:
            if index is not None or anchor is not None:
                raise ProofError("--consistency SEQ1 SEQ2 takes no INDEX and no --anchor")
            proof = make_consistency(run_dir, log, *consistency)
        elif index is None:
            raise ProofError("give INDEX (the line's seq) or --consistency SEQ1 SEQ2")
        else:
            proof = make_inclusion(run_dir, log, index, anchor)
    except ProofError as exc:
        print(f"prove: {exc}", file=sys.stderr)
        return exc.status
    bound = (
        f"\nIts size and root are fixed by anchor {proof['checkpoint']['anchor']}'s signed checkpoint "
        "(in the proof's JSON: check-proof checks it)."
        if "checkpoint" in proof
        else "\nThe run has no signed checkpoint at or after it: the size and the root are the anchors' word "
        "(check them against the witness with check-proof --anchors)."
    )
    if as_json:
        print(json.dumps(proof, indent=1, ensure_ascii=False))
    elif "leaf" in proof:
        print(
            f"{log} line {proof['leaf_index']} is in anchor {proof['anchor']}'s tree of {proof['tree_size']:,} "
            f"lines, root {proof['root']}.\nThe line: {_short(proof['leaf'])}\n"
            f"The proof: {len(proof['path'])} hashes, leaf upward (RFC 9162 section 2.1.3). "
            "Save it with --json and check it with `confirmatory check-proof` (or docs/ANCHORS.md's "
            "few lines of Python)." + bound
        )
    else:
        print(
            f"{log}: anchor {proof['second_anchor']}'s tree ({proof['second_size']:,} lines, root "
            f"{proof['second_root']}) extends anchor {proof['first_anchor']}'s ({proof['first_size']:,} lines, root "
            f"{proof['first_root']}).\nThe proof: {len(proof['path'])} hashes (RFC 9162 section 2.1.4). "
            "Save it with --json and check it with `confirmatory check-proof`." + bound
        )
    return EXIT_OK


def _short(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[:width] + f"... ({len(text)} characters)"


# ------------------------------------------------------------------ check-proof


def _hex32(proof: dict[str, Any], key: str, where: Path) -> bytes:
    value = proof.get(key)
    if type(value) is not str or len(value) != 64:
        raise ProofError(f"{where}: {key} must be a sha256 in hex (64 digits)")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise ProofError(f"{where}: {key} must be a sha256 in hex (64 digits)") from None


def _size(proof: dict[str, Any], key: str, where: Path) -> int:
    value = proof.get(key)
    if type(value) is not int or value < 0:
        raise ProofError(f"{where}: {key} must be a whole number >= 0")
    return value


def check_proof(path: Path, anchors_file: Path | None, *, key: str | None = None, run_dir: Path | None = None) -> str:
    """What the proof proves, one line; ProofError (EXIT_FAILED) if it does not verify.

    A proof with a ``checkpoint`` (records.binding) is checked against it:
    the study's verifier key is ``key``, else the one ``run_dir``'s manifest
    pins, else the one the proof names (and the line says whose it is)."""
    try:
        proof = json.loads(open_regular(path).readall())
    except OSError as exc:
        raise ProofError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ProofError(f"{path}: not JSON ({exc})") from None
    if not isinstance(proof, dict) or type(proof.get("log")) is not str:
        raise ProofError(f"{path}: not a proof of `confirmatory prove --json` (no log)")
    hashes = proof.get("path")
    if not isinstance(hashes, list):
        raise ProofError(f"{path}: path must be a list of sha256 hashes in hex")
    steps = [_hex32({"path": h}, "path", path) for h in hashes]
    log = proof["log"]
    if "leaf_index" in proof:
        index, size = _size(proof, "leaf_index", path), _size(proof, "tree_size", path)
        root = _hex32(proof, "root", path)
        if type(proof.get("leaf")) is not str:
            raise ProofError(f"{path}: leaf must be the line's text")
        try:
            leaf = proof["leaf"].encode()
        except UnicodeEncodeError as exc:  # a lone surrogate ("\ud800" is valid JSON): no UTF-8 line holds it
            raise ProofError(
                f"{path}: leaf is no line a log can hold: character {exc.start} is "
                f"{proof['leaf'][exc.start : exc.end]!r}, a lone surrogate (a log line is UTF-8)"
            ) from None
        if not merkle.verify_inclusion(merkle.leaf_hash(leaf), index, size, steps, root):
            raise ProofError(
                f"{path}: the proof does not verify: line {index} of {log} is not shown to be in "
                f"the tree of {size} lines with root {root.hex()}",
                EXIT_FAILED,
            )
        said = f"line {index} of {log} is in the tree of {size:,} lines with root {root.hex()}"
        fixed = [(size, root, proof.get("anchor"))]
    elif "first_size" in proof:
        m, n = _size(proof, "first_size", path), _size(proof, "second_size", path)
        r1, r2 = _hex32(proof, "first_root", path), _hex32(proof, "second_root", path)
        if not merkle.verify_consistency(m, n, steps, r1, r2):
            raise ProofError(
                f"{path}: the proof does not verify: {log}'s tree of {n} lines (root {r2.hex()}) is "
                f"not shown to extend its tree of {m} lines (root {r1.hex()})",
                EXIT_FAILED,
            )
        said = f"{log}'s tree of {n:,} lines (root {r2.hex()}) extends its tree of {m:,} lines (root {r1.hex()})"
        fixed = [(m, r1, proof.get("first_anchor")), (n, r2, proof.get("second_anchor"))]
    else:
        raise ProofError(f"{path}: neither an inclusion proof (leaf_index) nor a consistency proof (first_size)")
    clauses = []
    if "checkpoint" in proof or "anchor_lines" in proof:
        from confirmatory.records.binding import BindingError, check_binding

        try:
            clauses.append(check_binding(proof, [(s, r) for s, r, _ in fixed], log, path, key=key, run_dir=run_dir))
        except BindingError as exc:
            raise ProofError(str(exc), exc.status) from None
    elif key is not None or run_dir is not None:
        raise ProofError(f"{path}: the proof holds no checkpoint for --key or --run to check", EXIT_FAILED)
    if anchors_file is not None:
        clauses.append(_by_anchors(fixed, anchors_file, log))
    if not clauses:
        return (
            f"OK: {said}, as the proof states them: the size and the root are the proof's own word (an RFC 9162 "
            "root does not commit to its tree's size); give --anchors, or prove from a run with signed "
            "checkpoints, to check them"
        )
    return f"OK: {said}; " + "; ".join(clauses)


def _by_anchors(fixed: list[tuple[int, bytes, Any]], anchors_file: Path, log: str) -> str:
    anchors = _anchors(anchors_file)
    found = []
    for size, root, named in fixed:
        seqs = [
            a.get("seq")
            for a in anchors
            if isinstance(a["logs"].get(log), dict)
            and a["logs"][log].get("lines") == size
            and a["logs"][log].get("root") == root.hex()
        ]
        if not seqs:
            raise ProofError(
                f"{anchors_file}: no anchor fixes {log} at {size} lines with the root "
                f"{root.hex()}: the proof verifies, but not against these anchors",
                EXIT_FAILED,
            )
        found.append(str(named if named in seqs else seqs[0]))  # the anchor the proof names, if it is one
    if len(found) == 1:
        return f"anchor {found[0]} of {anchors_file} fixes {log} at that size with that root"
    return f"anchors {' and '.join(found)} of {anchors_file} fix {log} at those sizes with those roots"


def check_proof_command(
    path: Path, anchors_file: Path | None, *, key: str | None = None, run_dir: Path | None = None
) -> int:
    try:
        print(check_proof(path, anchors_file, key=key, run_dir=run_dir))
    except ProofError as exc:
        print(f"check-proof: {exc}", file=sys.stderr)
        return exc.status
    return EXIT_OK
