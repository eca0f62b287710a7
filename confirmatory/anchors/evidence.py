"""The evidence of each anchor: its signed checkpoint, its RFC 3161 stamps, its witnesses' cosignatures.

The runner's side of docs/EVIDENCE.md; the records are RECORDS.md's
"anchors.jsonl and anchor-pushes.jsonl". The push worker of the anchorer
(``anchors.anchorer``) calls ``Attester.attest`` for an anchor before it
runs that anchor's push, so none of it is on a lane's path: a lane never
waits on a TSA or a witness. For anchor ``k`` it appends to
anchor-pushes.jsonl, in this order:

- a ``checkpoint`` line: the C2SP checkpoint of anchors.jsonl's first
  ``k + 1`` lines (origin, size ``k + 1``, RFC 9162 root), signed with the
  study's key; every anchor since the last one with such a line gets its
  own first (an anchor a later one overtook, or one a crash left unsigned,
  which a continuation signs as it starts);
- a ``stamp`` line per TSA: the reply (``.tsr``) written durably first,
  then its name, sha256 and genTime; a failure is logged and the run goes on;
- a ``cosignature`` line per witness: the checkpoint posted with the
  consistency proof from the size the witness last cosigned (a 409 naming
  another size is answered by re-sending from it); a refusal is logged.

For the final anchor, a TSA that failed and a witness that refused are
asked once more (another line of the same kind) before its push, so the
log's last line stays the final anchor's push.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confirmatory.anchors.stamper import StampFailed, request_stamp
from confirmatory.anchors.tlogwitness import Conflict, Cosigned, add_checkpoint_from
from confirmatory.core.checkpoint import Checkpoint, sign_checkpoint
from confirmatory.core.cosignature import BadCosignature, CosignatureVerifier, verify_cosignature
from confirmatory.core.merkle import consistency_proof, leaf_hashes, root
from confirmatory.core.note import NoteError, NoteSigner
from confirmatory.core.timestamps import StampInvalid, verify_stamp
from confirmatory.records.layout import stamp_file
from confirmatory.records.reader import iter_lines
from confirmatory.records.writer import ChainWriter, write_bytes_durable
from confirmatory.runtime.clock import Clock

# How long one request to a TSA or a witness may take (its socket timeout).
REQUEST_TIMEOUT_S = 10.0
# The final anchor's failed stamps and refused cosignatures are asked again after this pause.
FINAL_RETRY_PAUSE_S = 1.0


@dataclass(frozen=True)
class Tsa:
    url: str
    certificate_pem: bytes  # the run directory's copy, which verify reads
    ca_pem: bytes


@dataclass(frozen=True)
class Witness:
    url: str
    key: CosignatureVerifier


class Attester:
    """Writes each anchor's evidence lines (the module docstring).

    ``witness_sizes``: the size each witness last cosigned, as far as the
    records say (``sizes_from_log``); ``checkpointed``: the last anchor seq
    that already has a checkpoint line (-1: none)."""

    def __init__(
        self,
        run_dir: Path,
        clock: Clock,
        *,
        origin: str,
        signer: NoteSigner,
        tsas: Sequence[Tsa],
        witnesses: Sequence[Witness],
        pushes: ChainWriter,
        anchors_path: Path,
        witness_sizes: Sequence[int] | None = None,
        checkpointed: int = 0,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self._run_dir = Path(run_dir)
        self._clock = clock
        self.origin = origin
        self._signer = signer
        self._tsas = tuple(tsas)
        self._witnesses = tuple(witnesses)
        self._pushes = pushes
        self._anchors_path = Path(anchors_path)
        self._sizes = list(witness_sizes) if witness_sizes is not None else [0] * len(self._witnesses)
        self._checkpointed = checkpointed
        self._timeout = float(timeout_s)

    def attest(self, seq: int, *, final: bool = False, evidence: bool = True) -> None:
        """The lines of anchor ``seq`` (and the checkpoint lines of every
        anchor before it that lacks one). ``evidence`` False: its checkpoint
        line only (the run's end gave up on its pushes)."""
        leaves = self._leaves(seq + 1)
        note = ""
        for k in range(self._checkpointed + 1, seq + 1):
            note = self._checkpoint(k, leaves)
        if seq <= self._checkpointed:
            return  # already attested (never: the worker takes each seq once)
        self._checkpointed = seq
        if not evidence:
            return
        body = Checkpoint(self.origin, seq + 1, root(leaves[: seq + 1])).body()
        failed_tsas = [i for i in range(len(self._tsas)) if not self._stamp(seq, i, body)]
        failed_witnesses = [i for i in range(len(self._witnesses)) if not self._cosign(seq, i, note, body, leaves)]
        if final and (failed_tsas or failed_witnesses):
            time.sleep(FINAL_RETRY_PAUSE_S)
            for i in failed_tsas:
                self._stamp(seq, i, body)
            for i in failed_witnesses:
                self._cosign(seq, i, note, body, leaves)

    def _leaves(self, n: int) -> list[bytes]:
        """The leaf hashes of anchors.jsonl's first ``n`` lines (lines are only appended)."""
        with open(self._anchors_path, "rb") as fh:
            lines = fh.read().split(b"\n")
        if len(lines) - 1 < n:
            raise ValueError(f"{self._anchors_path}: fewer than {n} complete lines")
        return leaf_hashes(lines[:n])

    def _checkpoint(self, seq: int, leaves: list[bytes]) -> str:
        checkpoint = Checkpoint(self.origin, seq + 1, root(leaves[: seq + 1]))
        note = sign_checkpoint(checkpoint, self._signer)
        self._pushes.append(
            {
                "event": "checkpoint",
                "t": self._clock.now(),
                "anchor_seq": seq,
                "origin": checkpoint.origin,
                "tree_size": checkpoint.size,
                "root": checkpoint.root_b64,
                "note": note,
            }
        )
        return note

    def _stamp(self, seq: int, i: int, body: str) -> bool:
        tsa = self._tsas[i]
        line: dict[str, Any] = {"event": "stamp", "anchor_seq": seq, "tsa": i}
        try:
            tsr = request_stamp(tsa.url, body.encode(), self._timeout)
            stamp = verify_stamp(tsr, body.encode(), tsa.certificate_pem, tsa.ca_pem)
        except StampFailed as exc:
            self._pushes.append(
                {**line, "t": self._clock.now(), "ok": False, "failure": str(exc.failure), "detail": exc.detail}
            )
            return False
        except StampInvalid as exc:
            self._pushes.append(
                {**line, "t": self._clock.now(), "ok": False, "failure": str(exc.reason), "detail": exc.detail}
            )
            return False
        rel = stamp_file(seq, i)
        sha = write_bytes_durable(self._run_dir / rel, tsr)
        gen_time = stamp.gen_time.strftime("%Y-%m-%dT%H:%M:%SZ")
        self._pushes.append(
            {**line, "t": self._clock.now(), "ok": True, "file": rel, "sha256": sha, "gen_time": gen_time}
        )
        return True

    def _cosign(self, seq: int, i: int, note: str, body: str, leaves: list[bytes]) -> bool:
        w = self._witnesses[i]
        size = seq + 1
        line: dict[str, Any] = {"event": "cosignature", "anchor_seq": seq, "witness": i}

        def proof_from(m: int) -> list[bytes]:
            if m == 0 or m == size:
                return []
            if not 0 < m < size:
                raise ValueError(f"the witness holds size {m}, past this checkpoint's {size}")
            return consistency_proof(leaves[:size], m)

        result = add_checkpoint_from(w.url, note, self._sizes[i], proof_from, self._timeout, witness_key=w.key)
        if isinstance(result, Cosigned):
            for sig in result.signatures:
                try:
                    cos = verify_cosignature(w.key, body, sig)
                except (BadCosignature, NoteError):
                    continue
                self._sizes[i] = size
                self._pushes.append(
                    {
                        **line,
                        "t": self._clock.now(),
                        "ok": True,
                        "name": cos.name,
                        "time": cos.timestamp,
                        "line": cos.line().removesuffix("\n"),
                    }
                )
                return True
            status: int | None
            status, detail = 200, "no line of the answer is the witness key's cosignature"
        elif isinstance(result, Conflict):
            status, detail = 409, f"the witness holds size {result.size}"
        else:
            status, detail = result.status, result.reason
        self._pushes.append({**line, "t": self._clock.now(), "ok": False, "status": status, "detail": detail})
        return False


def progress_from_log(pushes_path: Path, n_witnesses: int) -> tuple[int, list[int]]:
    """From anchor-pushes.jsonl as a run left it: the last anchor seq with a
    checkpoint line (-1: none) and the size each witness last cosigned."""
    checkpointed, sizes = 0, [0] * n_witnesses
    try:
        for entry in iter_lines(pushes_path):
            obj = entry.obj
            seq = obj.get("anchor_seq")
            if type(seq) is not int:
                continue
            if obj.get("event") == "checkpoint":
                checkpointed = max(checkpointed, seq)
            elif obj.get("event") == "cosignature" and obj.get("ok") is True:
                i = obj.get("witness")
                if type(i) is int and 0 <= i < n_witnesses:
                    sizes[i] = max(sizes[i], seq + 1)
    except (OSError, ValueError):
        pass  # a torn or missing log: the witness's 409 names its size
    return checkpointed, sizes


def attester_for(
    run_dir: Path,
    clock: Clock,
    evidence: Mapping[str, Any] | None,
    signer: NoteSigner | None,
    pushes: ChainWriter,
    anchors_path: Path,
) -> Attester | None:
    """The attester of a run whose manifest has ``evidence`` (None without one),
    with the study's key ``signer`` (read from the design's key file)."""
    if not evidence or signer is None:
        return None
    run_dir = Path(run_dir)
    tsas = [
        Tsa(t["url"], (run_dir / t["certificate"]).read_bytes(), (run_dir / t["ca"]).read_bytes())
        for t in evidence.get("timestamps", [])
    ]
    witnesses = [Witness(w["url"], CosignatureVerifier.parse(w["verifier_key"])) for w in evidence.get("witnesses", [])]
    checkpointed, sizes = progress_from_log(run_dir / "anchor-pushes.jsonl", len(witnesses))
    return Attester(
        run_dir,
        clock,
        origin=evidence["origin"],
        signer=signer,
        tsas=tsas,
        witnesses=witnesses,
        pushes=pushes,
        anchors_path=anchors_path,
        witness_sizes=sizes,
        checkpointed=checkpointed,
    )
