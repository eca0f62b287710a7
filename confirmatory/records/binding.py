"""Proofs bound to a signed checkpoint: what ``prove --json`` adds, and what ``check-proof`` checks of it.

An RFC 9162 root does not commit to its tree's size: a proof's own
``tree_size`` and ``root`` are its word alone (a path may verify against a
root with the size raised by one). What fixes them is the anchor line that
holds the log's ``lines`` and ``root``, and what fixes that line is a
checkpoint of anchors.jsonl signed with the study's key (and cosigned by
witnesses). So a bound proof carries (docs/ANCHORS.md "Proofs bound to a
checkpoint"):

* ``anchor_lines``: each anchor line the proof's (size, root) pairs are
  read from (one for an inclusion proof, two for a consistency proof):
  ``{"seq", "index" (its line in anchors.jsonl), "line" (its text),
  "path" (its RFC 9162 inclusion proof in the checkpoint's tree, hex)}``;
* ``checkpoint``: the signed checkpoint of an anchor at or after them (the
  last one the run has): ``{"anchor", "note" (signed by the study, with
  every witness's cosignature line), "verifier_key", "witnesses" (the
  cosignatures' keys)}``.

``check_binding`` verifies the note with the study's key, each anchor
line's inclusion in the tree the note fixes (its size and root), and that
each anchor line holds exactly the proof's (size, root) for its log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from confirmatory.core import merkle
from confirmatory.core.checkpoint import open_checkpoint
from confirmatory.core.cosignature import CosignatureVerifier
from confirmatory.core.exits import EXIT_FAILED, EXIT_USAGE
from confirmatory.core.note import NoteError, NoteVerifier, Verifier
from confirmatory.records.checkpoints import CheckpointError, read_evidence, signed_checkpoint


class BindingError(Exception):
    """A binding that cannot be made or does not hold: one line, and its exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


def bind(run_dir: Path, seqs: list[int]) -> dict[str, Any] | None:
    """The ``anchor_lines`` and ``checkpoint`` that bind anchors ``seqs`` to
    the run's last signed checkpoint; None when the run has none at or after
    them (no evidence, or the anchors came after the last checkpoint)."""
    run = read_evidence(run_dir)
    if run.evidence is None:
        return None
    latest = max(seqs)
    with_cp = [a for a in run.anchors if a.checkpoint is not None and a.seq >= latest]
    if not with_cp:
        return None
    try:
        cp = signed_checkpoint(run_dir, with_cp[-1].seq, run)
    except CheckpointError as exc:
        raise BindingError(str(exc), exc.status) from None
    size = cp["tree_size"]
    if size > len(run.lines):
        raise BindingError(
            f"{run_dir}: anchor {cp['anchor']}'s checkpoint counts {size} lines of anchors.jsonl, which has "
            f"{len(run.lines)}: the file was cut after it was signed (verify says where)"
        )
    leaves = merkle.leaf_hashes(run.lines[:size])
    if merkle.root(leaves).hex() != _hex(cp["root"]):
        raise BindingError(
            f"{run_dir}: anchors.jsonl's first {size} lines are not the tree anchor {cp['anchor']}'s checkpoint "
            "signed: the file changed after it was signed (verify says where)"
        )
    lines = []
    for seq in seqs:
        found = run.anchor(seq)
        if found is None or found.index >= size:
            raise BindingError(f"{run_dir}: anchor {seq} is not in anchor {cp['anchor']}'s checkpoint")
        lines.append(
            {
                "seq": seq,
                "index": found.index,
                "line": run.lines[found.index].decode("utf-8", "replace"),
                "path": [h.hex() for h in merkle.inclusion_proof(leaves, found.index)],
            }
        )
    return {
        "anchor_lines": lines,
        "checkpoint": {
            "anchor": cp["anchor"],
            "note": cp["note"],
            "verifier_key": cp["verifier_key"],
            "witnesses": [c["key"] for c in cp["cosignatures"] if c["key"]],
        },
    }


def _hex(b64: str) -> str:
    import base64

    return base64.b64decode(b64).hex()


def _text(value: Any, what: str, where: Path) -> str:
    if type(value) is not str:
        raise BindingError(f"{where}: {what} must be text", EXIT_USAGE)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BindingError(f"{where}: {what} holds a lone surrogate at character {exc.start}", EXIT_USAGE) from None
    return value


def study_key(proof: dict[str, Any], key: str | None, run_dir: Path | None) -> tuple[str, str]:
    """The study's verifier key to check the checkpoint with, and whose word it is."""
    if key is not None:
        return key, "given with --key"
    if run_dir is not None:
        try:
            evidence = json.loads((run_dir / "manifest.json").read_bytes()).get("evidence") or {}
        except (OSError, ValueError, AttributeError):
            raise BindingError(f"{run_dir}: its manifest.json cannot be read", EXIT_USAGE) from None
        if not isinstance(evidence.get("verifier_key"), str):
            raise BindingError(f"{run_dir}: its manifest pins no verifier key (no evidence.verifier_key)", EXIT_USAGE)
        return evidence["verifier_key"], f"pinned by the manifest of {run_dir}"
    named = (proof.get("checkpoint") or {}).get("verifier_key")
    if type(named) is not str:
        raise BindingError("the proof's checkpoint names no verifier key: give --key or --run", EXIT_USAGE)
    return named, "named by the proof itself, its own word: compare it with the key the design pins, or give --key"


def check_binding(
    proof: dict[str, Any],
    fixed: list[tuple[int, bytes]],
    log: str,
    where: Path,
    *,
    key: str | None = None,
    run_dir: Path | None = None,
) -> str:
    """Check that the proof's (size, root) pairs ``fixed`` are the ones its
    anchor lines hold, those lines are in the tree its checkpoint fixes, and
    the checkpoint is signed by the study's key; what that rests on, one clause."""
    cp, anchor_lines = proof.get("checkpoint"), proof.get("anchor_lines")
    if not isinstance(cp, dict) or not isinstance(anchor_lines, list) or len(anchor_lines) != len(fixed):
        raise BindingError(
            f"{where}: checkpoint and anchor_lines (one per root the proof states) are not a binding", EXIT_USAGE
        )
    vkey, whose = study_key(proof, key, run_dir)
    try:
        study = NoteVerifier.parse(vkey)
    except NoteError as exc:
        raise BindingError(f"the study's verifier key ({whose}) cannot be read: {exc}", EXIT_USAGE) from None
    known: list[Verifier] = [study]
    witnesses = _witness_keys(proof, run_dir)
    for w in witnesses:
        try:
            known.append(CosignatureVerifier.parse(w))
        except NoteError:
            continue
    try:
        checkpoint, opened = open_checkpoint(_text(cp.get("note"), "checkpoint.note", where), known)
    except NoteError as exc:
        raise BindingError(
            f"{where}: the proof's checkpoint does not verify with the study's key {vkey} ({whose}): {exc}"
        ) from None
    if not any(s.name == study.name and s.key_id == study.key_id for s in opened.verified):
        raise BindingError(f"{where}: the proof's checkpoint is not signed by the study's key {vkey} ({whose})")
    for (size, root), entry in zip(fixed, anchor_lines):
        if not isinstance(entry, dict):
            raise BindingError(f"{where}: anchor_lines holds a non-object", EXIT_USAGE)
        line = _text(entry.get("line"), "an anchor line", where)
        index = entry.get("index")
        path = entry.get("path")
        if type(index) is not int or not isinstance(path, list) or not all(isinstance(h, str) for h in path):
            raise BindingError(f"{where}: an anchor line's index and path are a number and a list of hex", EXIT_USAGE)
        try:
            steps = [bytes.fromhex(h) for h in path]
        except ValueError:
            raise BindingError(f"{where}: an anchor line's path is not hex", EXIT_USAGE) from None
        if not merkle.verify_inclusion(merkle.leaf_hash(line.encode()), index, checkpoint.size, steps, checkpoint.root):
            raise BindingError(
                f"{where}: the anchor line given is not line {index} of the anchors.jsonl the checkpoint signs "
                f"({checkpoint.size} lines, root {checkpoint.root_b64})"
            )
        try:
            anchor = json.loads(line)
            entry_of_log = anchor["logs"][log]
        except (ValueError, KeyError, TypeError):
            raise BindingError(f"{where}: anchor line {index} of the checkpoint anchors no {log}") from None
        held = (entry_of_log.get("lines"), entry_of_log.get("root")) if isinstance(entry_of_log, dict) else None
        if held != (size, root.hex()):
            shown = f"{held[0]} lines, root {held[1]}" if held else "nothing"
            raise BindingError(
                f"{where}: the proof says {log} has {size} lines with root {root.hex()}, but the signed anchor "
                f"line {index} fixes {shown}: the proof's size or root is not the run's"
            )
    cosigned = [s.name for s in opened.verified if not (s.name == study.name and s.key_id == study.key_id)]
    source = "the run's manifest" if run_dir is not None else "named by the proof"
    said = (
        f"the signed checkpoint of anchors.jsonl at {checkpoint.size:,} lines (origin {checkpoint.origin}) "
        + (
            "holds the anchor lines that fix those sizes and roots"
            if len(fixed) > 1
            else "holds the anchor line that fixes that size and root"
        )
        + f"; it rests on the study's key {vkey} ({whose})"
    )
    if cosigned:
        said += f" and the cosignature{'s' if len(cosigned) > 1 else ''} of {', '.join(cosigned)} (keys from {source})"
    elif opened.unverified:
        said += f"; {len(opened.unverified)} other signature line(s) not checked (no key: give --run)"
    return said


def _witness_keys(proof: dict[str, Any], run_dir: Path | None) -> list[str]:
    if run_dir is not None:
        try:
            evidence = json.loads((run_dir / "manifest.json").read_bytes()).get("evidence") or {}
        except (OSError, ValueError, AttributeError):
            return []
        keys = [w.get("verifier_key") for w in evidence.get("witnesses") or [] if isinstance(w, dict)]
        return [k for k in keys if isinstance(k, str)]
    named = (proof.get("checkpoint") or {}).get("witnesses")
    return [k for k in named if isinstance(k, str)] if isinstance(named, list) else []
