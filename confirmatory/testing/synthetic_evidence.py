"""Signed checkpoints, stamps and cosignatures for synthetic runs (``rungen``), in docs/RECORDS.md's format.

``Plan(evidence=SyntheticEvidence(...))`` makes ``generate_run`` write the
run manifest's ``evidence`` and, per anchor, before its push line: the
``checkpoint`` of anchors.jsonl signed with the study's key (``core.note``),
a ``stamp`` per TSA (a real RFC 3161 reply from a running
``testing.tsa.LocalTsa``, its ``.tsr`` kept under ``evidence/stamps/``) and
a ``cosignature`` per witness key (``core.cosignature``), as the runner
writes them. A stamp's genTime is the machine's time, not the synthetic
run's (verify's genTime window fails it; the readers of the format do not
care). ``refused`` plants a refusal: those (anchor seq, witness index)
pairs get an ``ok: false`` cosignature line instead.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confirmatory.core.checkpoint import Checkpoint, sign_checkpoint
from confirmatory.core.cosignature import Cosigner
from confirmatory.core.note import NoteSigner

if TYPE_CHECKING:
    from confirmatory.testing.tsa import LocalTsa


@dataclass(frozen=True)
class SyntheticEvidence:
    signer: NoteSigner
    cosigners: tuple[Cosigner, ...] = ()
    tsas: tuple[LocalTsa, ...] = ()
    origin: str = "example.org/synthetic"
    refused: frozenset[tuple[int, int]] = frozenset()
    required: int | None = None  # cosignatures_required (default: every witness)
    stamps_required: int | None = None  # timestamps_required (default: every TSA)

    def manifest(self, root: Path) -> tuple[dict[str, Any], dict[str, str]]:
        """The manifest's ``evidence`` and the ``files`` it adds (the TSA copies), copied into ``root``."""
        files: dict[str, str] = {}
        stamps = []
        for i, tsa in enumerate(self.tsas):
            entry = {
                "url": tsa.url,
                "certificate": f"evidence/tsa-{i}.certificate.pem",
                "ca": f"evidence/tsa-{i}.ca.pem",
            }
            for src, rel in ((tsa.certificate, entry["certificate"]), (tsa.ca, entry["ca"])):
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, root / rel)
                files[rel] = hashlib.sha256((root / rel).read_bytes()).hexdigest()
            stamps.append(entry)
        evidence = {
            "origin": self.origin,
            "verifier_key": str(self.signer.verifier),
            "timestamps": stamps,
            "witnesses": [
                {"url": f"http://127.0.0.1:9/{c.name}", "verifier_key": str(c.verifier)} for c in self.cosigners
            ],
            "cosignatures_required": len(self.cosigners) if self.required is None else self.required,
            "timestamps_required": len(self.tsas) if self.stamps_required is None else self.stamps_required,
        }
        return evidence, files

    def lines(self, root: Path, seq: int, t: float, size: int, tree_root: bytes) -> list[dict[str, Any]]:
        """Anchor ``seq``'s lines of anchor-pushes.jsonl before its push (each without ``seq``/``prev``)."""
        from confirmatory.anchors.stamper import request_stamp
        from confirmatory.core.timestamps import verify_stamp

        cp = Checkpoint(self.origin, size, tree_root)
        body = cp.body()
        note = sign_checkpoint(cp, self.signer)
        out: list[dict[str, Any]] = [
            {
                "event": "checkpoint",
                "t": t,
                "anchor_seq": seq,
                "origin": cp.origin,
                "tree_size": size,
                "root": base64.b64encode(tree_root).decode(),
                "note": note,
            }
        ]
        for i, tsa in enumerate(self.tsas):
            tsr = request_stamp(tsa.url, body.encode(), 30.0)
            rel = f"evidence/stamps/{seq}.{i}.tsr"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(tsr)
            stamp = verify_stamp(tsr, body.encode(), tsa.certificate.read_bytes(), tsa.ca.read_bytes())
            out.append(
                {
                    "event": "stamp",
                    "t": t,
                    "anchor_seq": seq,
                    "tsa": i,
                    "ok": True,
                    "file": rel,
                    "sha256": hashlib.sha256(tsr).hexdigest(),
                    "gen_time": stamp.gen_time.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            )
        for i, cosigner in enumerate(self.cosigners):
            if (seq, i) in self.refused:
                out.append(
                    {
                        "event": "cosignature",
                        "t": t,
                        "anchor_seq": seq,
                        "witness": i,
                        "ok": False,
                        "status": 409,
                        "detail": "planted refusal",
                    }
                )
                continue
            cos = cosigner.cosign(body, int(t))
            out.append(
                {
                    "event": "cosignature",
                    "t": t,
                    "anchor_seq": seq,
                    "witness": i,
                    "ok": True,
                    "name": cosigner.name,
                    "time": int(t),
                    "line": cos.line().removesuffix("\n"),
                }
            )
        return out


def generate_evidence_run(
    root: Path,
    *,
    tsas: tuple[LocalTsa, ...] = (),
    witnesses: int = 2,
    refused: frozenset[tuple[int, int]] = frozenset(),
    **plan: Any,
) -> SyntheticEvidence:
    """A synthetic run (``rungen.generate_run``, ``plan`` its Plan's fields) with evidence; the evidence's keys."""
    from confirmatory.testing.rungen import Plan, generate_run

    evidence = SyntheticEvidence(
        NoteSigner.generate("example.org/study"),
        tuple(Cosigner.generate(f"witness-{i}.example.org") for i in range(witnesses)),
        tsas,
        refused=refused,
    )
    generate_run(
        Path(root), Plan(**{"households": 4, "anchor_every_s": 120.0, "cap_usd": 0.3, **plan}, evidence=evidence)
    )
    return evidence
