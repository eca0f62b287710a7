"""Invariant 12: the evidence of each anchor (RECORDS.md, docs/EVIDENCE.md).

For a run manifest with ``evidence``: every anchor has a ``checkpoint``
line in anchor-pushes.jsonl whose origin, size and root are anchors.jsonl's
and whose note verifies with the study's verifier key; every ok ``stamp``
line's file exists with its sha256, verifies offline against the run's
copies of its TSA's certificate and CA, stamps the checkpoint's body and was
made within its anchor's window; the final anchor has ok stamps from at
least ``timestamps_required`` distinct TSAs (default every TSA); every ok
``cosignature`` verifies with its witness's key over the checkpoint's body
and its time; the final checkpoint has at least
``cosignatures_required`` of them, from distinct witnesses.

It also says, per anchor, what proves it (``anchor_evidence``): the git
witness (a push that returned 0 and covers it: the anchor's own or a later
one's, since a push sends the whole of anchors.jsonl), the study's
signature, each cosignature's witness and time, each stamp's TSA and
genTime. Each is counted only once checked.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from confirmatory.core.checkpoint import Checkpoint, open_checkpoint
from confirmatory.core.cosignature import BadCosignature, Cosignature, CosignatureVerifier, verify_cosignature
from confirmatory.core.merkle import leaf_hashes, root
from confirmatory.core.note import NoteError, NoteVerifier, Signature
from confirmatory.core.timestamps import StampInvalid, in_window, verify_stamp
from confirmatory.records.chain import ChainError, open_regular
from confirmatory.records.layout import ANCHORS_LOG, PUSHES_LOG, stamp_file
from confirmatory.records.reader import iter_lines
from confirmatory.verify.context import RunContext

# How long after the next anchor's t (the final anchor: after the close) a
# stamp of an anchor may be made. The push worker stamps an anchor as soon as
# it takes it, which it does while the anchor is the newest (so before the
# next anchor), then asks each TSA with a 10 s timeout; the final anchor's
# stamps come within the time for pushes at the end of the run (120 s), a
# retry included. 180 s covers both with room for a slow TSA's clock.
PUSH_SLACK_S = 180.0

INV = 12


def _lines(ctx: RunContext, rel: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        for line in iter_lines(ctx.layout.root / rel):
            out.append(line.obj)
    except (OSError, ChainError, ValueError):
        pass  # a torn or broken log: invariant 8 says so; the complete lines before it are read
    return out


def _raw_lines(ctx: RunContext) -> list[bytes]:
    try:
        with open_regular(ctx.layout.root / ANCHORS_LOG) as fh:
            data = fh.read()
    except OSError:
        return []
    return data.split(b"\n")[:-1]  # complete lines only


def _num(t: Any) -> bool:
    return type(t) in (int, float)


def _verifier(f: Any, text: Any, kind: type[Any], what: str) -> Any:
    try:
        return kind.parse(text)
    except (NoteError, TypeError, AttributeError) as exc:
        f.fail(INV, "manifest.json", None, f"evidence: {what} is not a verifier key ({exc})")
        return None


def check_evidence(ctx: RunContext, man: dict[str, Any]) -> list[dict[str, Any]]:
    """Invariant 12 (module docstring); returns the per-anchor evidence."""
    f, rootdir = ctx.findings, ctx.layout.root
    raw = _raw_lines(ctx)
    anchors: list[tuple[int, dict[str, Any]]] = []
    for k, line in enumerate(raw):
        try:
            obj = json.loads(line)
        except ValueError:
            break
        if isinstance(obj, dict) and obj.get("event") == "anchor":
            anchors.append((k, obj))
    pushes = [o for o in _lines(ctx, PUSHES_LOG) if isinstance(o, dict)]
    of: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for o in pushes:
        seq = o.get("anchor_seq")
        if type(seq) is int:
            of.setdefault(seq, {}).setdefault(str(o.get("event")), []).append(o)
    pushed = [
        o["anchor_seq"]
        for o in pushes
        if o.get("event") == "push" and o.get("rc") == 0 and type(o.get("anchor_seq")) is int
    ]
    covered = max(pushed, default=-1)
    evidence_list: list[dict[str, Any]] = [
        {
            "seq": k,
            "t": a.get("t"),
            "final": a.get("final") is True,
            "evidence": {"git": k <= covered, "signature": False, "cosignatures": [], "stamps": []},
        }
        for k, a in anchors
    ]
    ev = man.get("evidence")
    f.check(INV)
    if ev is None:
        f.notes[INV] = "no evidence: the run manifest names no signer, time stamp or witness (git witness only)"
        return evidence_list
    if not isinstance(ev, dict):
        f.fail(INV, "manifest.json", None, f"evidence is {str(ev)[:80]!r}, not an object")
        return evidence_list
    study = _verifier(f, ev.get("verifier_key"), NoteVerifier, "verifier_key")
    origin = ev.get("origin")
    tsas: list[Any] = ev["timestamps"] if isinstance(ev.get("timestamps"), list) else []
    witnesses_raw: list[Any] = ev["witnesses"] if isinstance(ev.get("witnesses"), list) else []
    witnesses = [
        _verifier(
            f,
            w.get("verifier_key") if isinstance(w, dict) else None,
            CosignatureVerifier,
            f"witnesses[{i}].verifier_key",
        )
        for i, w in enumerate(witnesses_raw)
    ]
    required = ev.get("cosignatures_required")
    if type(required) is not int or required < 0:
        f.fail(INV, "manifest.json", None, f"evidence: cosignatures_required is {required!r}, not a count")
        required = len(witnesses)
    # (absent from a manifest written before the design could say it: every TSA)
    stamps_required = ev.get("timestamps_required", len(tsas))
    if type(stamps_required) is not int or stamps_required < 0:
        f.fail(INV, "manifest.json", None, f"evidence: timestamps_required is {stamps_required!r}, not a count")
        stamps_required = len(tsas)
    elif stamps_required > len(tsas):
        f.fail(
            INV,
            "manifest.json",
            None,
            f"evidence: timestamps_required is {stamps_required}, more than its {len(tsas)} TSA(s)",
        )
    pems: list[Any] = []
    for i, t in enumerate(tsas):
        try:
            pems.append(((rootdir / t["certificate"]).read_bytes(), (rootdir / t["ca"]).read_bytes()))
        except (OSError, KeyError, TypeError) as exc:
            f.fail(
                INV, "manifest.json", None, f"evidence: timestamps[{i}]: its certificate copies cannot be read ({exc})"
            )
            pems.append(None)
    closes: list[float] = [o["t"] for _, o in ctx.run_events if o.get("event") == "close" and _num(o.get("t"))]
    leaves = leaf_hashes(raw)
    last = anchors[-1][0] if anchors else None
    for n, (k, anchor) in enumerate(anchors):
        rec: dict[str, Any] = evidence_list[n]["evidence"]
        final = anchor.get("final") is True
        lines = of.get(k, {})
        f.check(INV)
        cps = lines.get("checkpoint", [])
        if not cps:
            if k == last and not final and f.stage is not None:
                f.explain(INV, PUSHES_LOG, None, f"anchor {k} has no checkpoint line: the run was cut short after it")
            else:
                f.fail(INV, PUSHES_LOG, None, f"anchor {k} has no checkpoint line (every anchor is signed)")
            continue
        want = Checkpoint(str(origin), k + 1, root(leaves[: k + 1])) if isinstance(origin, str) and origin else None
        body = _check_checkpoint(f, k, cps[0], want, study)
        if body is None:
            continue
        rec["signature"] = True
        t = anchor.get("t")
        if final:
            before = float(max(closes) if closes else (t if _num(t) else 0.0)) + PUSH_SLACK_S  # type: ignore[arg-type]
        else:
            nxt = anchors[n + 1][1].get("t") if n + 1 < len(anchors) else None
            before = float(nxt) + PUSH_SLACK_S if _num(nxt) else float("inf")  # type: ignore[arg-type]
        stamped: set[int] = set()
        for s in lines.get("stamp", []):
            if s.get("ok") is not True:
                continue
            got = _check_stamp(ctx, k, s, body, tsas, pems, t, before)
            if got is not None:
                stamped.add(s["tsa"])
                rec["stamps"].append(got)
        cosigned: set[int] = set()
        for c in lines.get("cosignature", []):
            if c.get("ok") is not True:
                continue
            got = _check_cosignature(f, k, c, body, witnesses)
            if got is not None:
                cosigned.add(c["witness"])
                rec["cosignatures"].append(got)
        if final:
            f.check(INV)
            if len(stamped) < stamps_required:
                missing = ", ".join(f"{i} ({_url(tsas[i])})" for i in range(len(tsas)) if i not in stamped)
                f.fail(
                    INV,
                    PUSHES_LOG,
                    None,
                    f"the final anchor ({k}) has valid stamps from {len(stamped)} TSA(s), the manifest asks for "
                    f"{stamps_required}: none from TSA {missing}",
                )
            f.check(INV)
            if len(cosigned) < required:
                f.fail(
                    INV,
                    PUSHES_LOG,
                    None,
                    f"the final checkpoint (anchor {k}) has {len(cosigned)} valid cosignature(s) from distinct "
                    f"witnesses, the manifest asks for {required}",
                )
    return evidence_list


def _url(tsa: Any) -> str:
    return str(tsa.get("url")) if isinstance(tsa, dict) else "?"


def _check_checkpoint(f: Any, k: int, cp: dict[str, Any], want: Checkpoint | None, study: Any) -> str | None:
    """The checkpoint line of anchor ``k``: its body if it is anchors.jsonl's, signed by the study."""
    where = f"anchor {k}'s checkpoint"
    if want is None or study is None:
        f.fail(INV, PUSHES_LOG, None, f"{where}: not checked: the manifest's evidence has no origin or verifier key")
        return None
    fields = (cp.get("origin"), cp.get("tree_size"), cp.get("root"))
    if fields != (want.origin, want.size, want.root_b64):
        f.fail(
            INV,
            PUSHES_LOG,
            None,
            f"{where} says origin {fields[0]!r}, size {fields[1]!r}, root {fields[2]!r}; anchors.jsonl's first "
            f"{want.size} lines are {want.origin!r}, {want.size}, {want.root_b64}",
        )
        return None
    try:
        checkpoint, _ = open_checkpoint(str(cp.get("note")), [study])
    except NoteError as exc:
        f.fail(INV, PUSHES_LOG, None, f"{where}: its note does not verify with the study's key {study}: {exc}")
        return None
    if (checkpoint.origin, checkpoint.size, checkpoint.root) != (want.origin, want.size, want.root):
        f.fail(
            INV,
            PUSHES_LOG,
            None,
            f"{where}: its signed note is of another checkpoint ({checkpoint.size}, {checkpoint.root_b64})",
        )
        return None
    return want.body()


def _check_stamp(
    ctx: RunContext, k: int, s: dict[str, Any], body: str, tsas: list[Any], pems: list[Any], t: Any, before: float
) -> dict[str, Any] | None:
    f = ctx.findings
    f.check(INV)
    i = s.get("tsa")
    where = f"anchor {k}'s stamp by TSA {i}"
    if type(i) is not int or not 0 <= i < len(tsas):
        f.fail(INV, PUSHES_LOG, None, f"{where}: no such TSA in the manifest's evidence")
        return None
    if pems[i] is None:
        return None
    rel = s.get("file")
    if rel != stamp_file(k, i):
        f.fail(INV, PUSHES_LOG, None, f"{where}: names the file {str(rel)[:100]!r}, not {stamp_file(k, i)}")
        return None
    try:
        with open_regular(ctx.layout.root / rel) as fh:
            tsr = fh.read()
    except OSError as exc:
        f.fail(INV, rel, None, f"{where}: the stamp file cannot be read: {exc.strerror or exc}")
        return None
    sha = hashlib.sha256(tsr).hexdigest()
    if sha != s.get("sha256"):
        f.fail(INV, rel, None, f"{where}: the file's sha256 is {sha}, its stamp line says {s.get('sha256')}")
        return None
    try:
        stamp = verify_stamp(tsr, body.encode(), pems[i][0], pems[i][1])
    except StampInvalid as exc:
        f.fail(INV, rel, None, f"{where}: {exc.reason}: {exc.detail}")
        return None
    if not _num(t) or not in_window(stamp, after=float(t), before=before):
        f.fail(
            INV,
            rel,
            None,
            f"{where}: genTime {stamp.gen_time.isoformat()} is outside its anchor's window (after the anchor's t "
            f"{t}, before {before:.3f}): the anchor is dated after its stamp, or the stamp was made later",
        )
        return None
    return {"tsa": i, "gen_time": stamp.gen_time.strftime("%Y-%m-%dT%H:%M:%SZ"), "file": rel, "name": stamp.tsa}


def _check_cosignature(f: Any, k: int, c: dict[str, Any], body: str, witnesses: list[Any]) -> dict[str, Any] | None:
    f.check(INV)
    i = c.get("witness")
    where = f"anchor {k}'s cosignature by witness {i}"
    if type(i) is not int or not 0 <= i < len(witnesses):
        f.fail(INV, PUSHES_LOG, None, f"{where}: no such witness in the manifest's evidence")
        return None
    key = witnesses[i]
    if key is None:
        return None
    try:
        cos: Cosignature = verify_cosignature(key, body, Signature.parse_line(str(c.get("line"))))
    except (BadCosignature, NoteError) as exc:
        f.fail(INV, PUSHES_LOG, None, f"{where}: does not verify with the witness key {key}: {exc}")
        return None
    if cos.timestamp != c.get("time") or cos.name != c.get("name"):
        f.fail(
            INV,
            PUSHES_LOG,
            None,
            f"{where}: the line says {c.get('name')!r} at {c.get('time')!r}, the cosignature {cos.name!r} at {cos.timestamp}",
        )
        return None
    return {"witness": i, "name": cos.name, "time": cos.timestamp, "key": str(key)}
