"""The evidence of each anchor as the run's records hold it, and ``confirmatory checkpoint``.

A run whose manifest has ``evidence`` (docs/RECORDS.md) logs, per anchor,
in anchor-pushes.jsonl: its signed ``checkpoint`` of anchors.jsonl, a
``stamp`` line per time-stamping authority, a ``cosignature`` line per
witness, and its git ``push``. This module reads them back, per anchor:

* ``read_evidence(run_dir)``: the manifest's ``evidence`` and, per anchor
  line, its lines of each kind (``AnchorLines``), as written; nothing
  verified (``show`` uses it: a cheap read).
* ``signed_checkpoint(run_dir, anchor)``: one anchor's checkpoint as
  ``confirmatory checkpoint`` gives it: the signed note with every ok
  cosignature's line after the study's signature, each signature checked
  against the manifest's keys, each stamp read from its ``.tsr`` with
  ``core.timestamps`` (its TSA's name and genTime) against the run's copies
  of the TSA's certificate and CA.
* ``checkpoint_command(run_dir, anchor, as_json)``: the command.

What a reviewer may conclude from them is verify's (invariant 12): this
module shows, and says when a signature or a stamp does not verify.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confirmatory.core.checkpoint import Checkpoint
from confirmatory.core.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from confirmatory.core.note import NoteError, NoteVerifier, Signature, parse_note

ANCHORS = "anchors.jsonl"
PUSHES = "anchor-pushes.jsonl"
MANIFEST = "manifest.json"


class CheckpointError(Exception):
    """A checkpoint that cannot be shown: one line, and its exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class AnchorLines:
    """One anchor line of anchors.jsonl (its line ``index``) and the lines of
    anchor-pushes.jsonl that name it, each kind in the order written."""

    seq: int
    index: int
    anchor: dict[str, Any]
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    stamps: list[dict[str, Any]] = field(default_factory=list)
    cosignatures: list[dict[str, Any]] = field(default_factory=list)
    pushes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def checkpoint(self) -> dict[str, Any] | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def ok_stamps(self) -> list[dict[str, Any]]:
        """The ok stamp line of each TSA (its last, after a retry), in TSA order."""
        by_tsa = {s.get("tsa"): s for s in self.stamps if s.get("ok") is True}
        return [by_tsa[k] for k in sorted(by_tsa, key=_order)]

    def ok_cosignatures(self) -> list[dict[str, Any]]:
        """The ok cosignature line of each witness (its last), in witness order."""
        by_witness = {c.get("witness"): c for c in self.cosignatures if c.get("ok") is True}
        return [by_witness[k] for k in sorted(by_witness, key=_order)]

    def git(self) -> bool:
        """Whether a push of this anchor succeeded (its own push line, rc 0)."""
        return any(p.get("rc") == 0 for p in self.pushes)


def _order(k: Any) -> tuple[int, str]:
    return (k, "") if type(k) is int else (1 << 30, str(k))


@dataclass
class RunEvidence:
    """The manifest's ``evidence`` (None: the run has none) and every anchor's lines."""

    evidence: dict[str, Any] | None
    anchors: list[AnchorLines]
    lines: list[bytes]  # anchors.jsonl's complete lines, without their newlines

    def anchor(self, seq: int) -> AnchorLines | None:
        return next((a for a in self.anchors if a.seq == seq), None)


def _complete_lines(path: Path) -> list[bytes]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return data.split(b"\n")[:-1]  # an unterminated tail is no line


def _objects(lines: list[bytes]) -> list[dict[str, Any] | None]:
    out: list[dict[str, Any] | None] = []
    for raw in lines:
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = None
        out.append(obj if isinstance(obj, dict) else None)
    return out


def read_evidence(run_dir: Path | str) -> RunEvidence:
    """What the records say proves each anchor, as written (nothing verified)."""
    root = Path(run_dir)
    try:
        manifest = json.loads((root / MANIFEST).read_bytes())
    except (OSError, ValueError):
        manifest = {}
    evidence = manifest.get("evidence") if isinstance(manifest, dict) else None
    lines = _complete_lines(root / ANCHORS)
    anchors: list[AnchorLines] = []
    for k, obj in enumerate(_objects(lines)):
        if obj is not None and obj.get("event") == "anchor" and type(obj.get("seq")) is int:
            anchors.append(AnchorLines(obj["seq"], k, obj))
    by_seq = {a.seq: a for a in anchors}
    kinds = {"checkpoint": "checkpoints", "stamp": "stamps", "cosignature": "cosignatures", "push": "pushes"}
    for obj in _objects(_complete_lines(root / PUSHES)):
        if obj is None or obj.get("event") not in kinds:
            continue
        owner = by_seq.get(obj.get("anchor_seq"))  # type: ignore[arg-type]
        if owner is not None:
            getattr(owner, kinds[str(obj["event"])]).append(obj)
    return RunEvidence(evidence if isinstance(evidence, dict) else None, anchors, lines)


def _listed(evidence: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = evidence.get(key)
    return [x if isinstance(x, dict) else {} for x in items] if isinstance(items, list) else []


def _witness_key(evidence: dict[str, Any], index: Any) -> str | None:
    witnesses = _listed(evidence, "witnesses")
    if type(index) is int and 0 <= index < len(witnesses):
        key = witnesses[index].get("verifier_key")
        return key if isinstance(key, str) else None
    return None


def _line(text: Any) -> str:
    return (str(text).removesuffix("\n") + "\n") if isinstance(text, str) else ""


def _signature_ok(note: str, key: str | None) -> bool:
    """Whether ``note`` holds a signature by ``key`` that verifies (``open_note``'s rule)."""
    if not isinstance(key, str):
        return False
    from confirmatory.core.note import open_note

    try:
        open_note(note, [NoteVerifier.parse(key)])
    except (NoteError, ValueError):
        return False
    return True


def _cosignature_ok(body: str, line: str, key: str | None) -> bool:
    if not isinstance(key, str):
        return False
    from confirmatory.core.cosignature import CosignatureVerifier, verify_cosignature

    try:
        verify_cosignature(CosignatureVerifier.parse(key), body, Signature.parse_line(line))
    except (NoteError, ValueError):
        return False
    return True


def _stamp(root: Path, evidence: dict[str, Any], line: dict[str, Any], body: str) -> dict[str, Any]:
    """An ok stamp line's token read from its file with core.timestamps, against the run's copies of its TSA's PEMs."""
    from confirmatory.core.timestamps import StampInvalid, verify_stamp

    tsas = _listed(evidence, "timestamps")
    i = line.get("tsa")
    tsa = tsas[i] if type(i) is int and 0 <= i < len(tsas) else {}
    out: dict[str, Any] = {
        "tsa_index": i,
        "url": tsa.get("url"),
        "file": line.get("file"),
        "logged_gen_time": line.get("gen_time"),
    }
    rel = line.get("file")
    try:
        if not isinstance(rel, str) or Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise CheckpointError(f"the stamp line names no file of the run directory: {rel!r}")
        tsr = (root / rel).read_bytes()
        cert = (root / str(tsa.get("certificate"))).read_bytes()
        ca = (root / str(tsa.get("ca"))).read_bytes()
        stamp = verify_stamp(tsr, body.encode(), cert, ca)
    except (OSError, CheckpointError, StampInvalid) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return {**out, "tsa": None, "gen_time": None, "verified": False, "error": reason}
    gen = stamp.gen_time.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {**out, "tsa": stamp.tsa, "gen_time": gen, "verified": True}


def _pick(run: RunEvidence, anchor: int | None, where: Path) -> AnchorLines:
    if run.evidence is None:
        raise CheckpointError(
            f"{where}: the run has no signed checkpoints (its manifest has no evidence: its design names no "
            "signer, time-stamping authority or witness)"
        )
    if not run.anchors:
        raise CheckpointError(f"{where}: no anchor line in {ANCHORS}")
    if anchor is not None:
        found = run.anchor(anchor)
        if found is None:
            seqs = [a.seq for a in run.anchors]
            raise CheckpointError(
                f"--anchor {anchor}: {where} has no anchor line with seq {anchor} (its anchors: {seqs[0]} to {seqs[-1]})",
                EXIT_USAGE,
            )
        if found.checkpoint is None:
            raise CheckpointError(f"{where}: anchor {anchor} has no checkpoint line in {PUSHES}")
        return found
    with_cp = [a for a in run.anchors if a.checkpoint is not None]
    if not with_cp:
        raise CheckpointError(f"{where}: no anchor has a checkpoint line in {PUSHES}")
    if with_cp[-1] is not run.anchors[-1]:
        print(
            f"checkpoint: the last anchor ({run.anchors[-1].seq}) has no checkpoint line; "
            f"showing anchor {with_cp[-1].seq}'s",
            file=sys.stderr,
        )
    return with_cp[-1]


def signed_checkpoint(run_dir: Path | str, anchor: int | None = None, run: RunEvidence | None = None) -> dict[str, Any]:
    """One anchor's signed checkpoint (the last with one when ``anchor`` is None), as ``checkpoint --json`` gives it.

    ``note`` is the whole signed text: the checkpoint's body, a blank line,
    the study's signature line, then the line of each witness's ok
    cosignature. Raises ``CheckpointError`` (its ``status``) when there is none."""
    root = Path(run_dir)
    run = run if run is not None else read_evidence(root)
    picked = _pick(run, anchor, root)
    evidence = run.evidence or {}
    line = picked.checkpoint or {}
    try:
        note = parse_note(str(line.get("note")))
        checkpoint = Checkpoint.parse(note.text)
    except NoteError as exc:
        raise CheckpointError(
            f"{root}: anchor {picked.seq}'s checkpoint line holds no signed checkpoint: {exc}"
        ) from None
    verifier_key = evidence.get("verifier_key") if isinstance(evidence.get("verifier_key"), str) else None
    cosignatures: list[dict[str, Any]] = []
    for c in picked.ok_cosignatures():
        key = _witness_key(evidence, c.get("witness"))
        cosignatures.append(
            {
                "witness": c.get("witness"),
                "name": c.get("name"),
                "key": key,
                "time": c.get("time"),
                "line": _line(c.get("line")).removesuffix("\n"),
                "verified": _cosignature_ok(note.text, _line(c.get("line")), key),
            }
        )
    signed = str(note) + "".join(c["line"] + "\n" for c in cosignatures if c["line"])
    return {
        "anchor": picked.seq,
        "origin": checkpoint.origin,
        "tree_size": checkpoint.size,
        "root": checkpoint.root_b64,
        "body": note.text,
        "note": signed,
        "verifier_key": verifier_key,
        "signature_verified": _signature_ok(str(note), verifier_key),
        "cosignatures": cosignatures,
        "stamps": [_stamp(root, evidence, s, note.text) for s in picked.ok_stamps()],
    }


def checkpoint_command(run_dir: Path, anchor: int | None = None, as_json: bool = False) -> int:
    """Print an anchor's signed checkpoint (the note's text, or ``--json``); the exit status."""
    try:
        info = signed_checkpoint(run_dir, anchor)
    except CheckpointError as exc:
        print(f"checkpoint: {exc}", file=sys.stderr)
        return exc.status
    if as_json:
        sys.stdout.write(json.dumps(info, indent=1, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(info["note"])
    unverified = [] if info["signature_verified"] else ["the study's signature (with the manifest's verifier_key)"]
    unverified += [f"the cosignature by {c['name']}" for c in info["cosignatures"] if not c["verified"]]
    unverified += [f"the stamp {s['file']} ({s['error']})" for s in info["stamps"] if not s["verified"]]
    for what in unverified:
        print(f"checkpoint: warning: {what} does not verify (confirmatory verify says more)", file=sys.stderr)
    return EXIT_OK


def logged_evidence(run: RunEvidence) -> list[dict[str, Any]]:
    """Per anchor what its lines say proves it, unchecked, in the shape of verify's per-anchor evidence:
    ``{"seq", "t", "final", "evidence": {"git", "signature", "cosignatures": [{"witness", "name", "time"}],
    "stamps": [{"tsa", "url", "gen_time", "file"}]}}``. ``git``: a push of it or of a later anchor
    succeeded (one push carries every anchor before it); ``signature``: it has a checkpoint line."""
    pushed = [a.seq for a in run.anchors if a.git()]
    covered = max(pushed, default=None)
    tsas = _listed(run.evidence or {}, "timestamps")
    out = []
    for a in run.anchors:
        stamps = [
            {
                "tsa": s.get("tsa"),
                "url": tsas[s["tsa"]].get("url") if type(s.get("tsa")) is int and 0 <= s["tsa"] < len(tsas) else None,
                "gen_time": s.get("gen_time"),
                "file": s.get("file"),
            }
            for s in a.ok_stamps()
        ]
        cosignatures = [
            {"witness": c.get("witness"), "name": c.get("name"), "time": c.get("time")} for c in a.ok_cosignatures()
        ]
        out.append(
            {
                "seq": a.seq,
                "t": a.anchor.get("t"),
                "final": a.anchor.get("final") is True,
                "evidence": {
                    "git": covered is not None and a.seq <= covered,
                    "signature": a.checkpoint is not None,
                    "cosignatures": cosignatures,
                    "stamps": stamps,
                },
            }
        )
    return out
