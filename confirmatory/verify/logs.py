"""Invariant 8 (chains, anchors, final push, witness) and the one streaming pass over each log.

Owns: reading anchors.jsonl first (it is small) to learn which line counts
every anchor fixes; then, for each log, one `chain.ChainReader` pass from the
seed its manifest gives it, which checks every link, hands each chain-valid
line (parsed once) to the invariant checks and keeps the hash at each
anchored count, so no log is read or parsed twice. Lines after the
final anchor's count are the "unanchored tail": a distinct status, never a
plain pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from confirmatory.chain import ChainReader, iter_lines
from confirmatory.records import ANCHORS_LOG, PUSHES_LOG, LogSpec, RunLayout, model_manifest
from confirmatory.verify.report import Findings

UNANCHORED_BY_DESIGN = (ANCHORS_LOG, PUSHES_LOG)


class LogPass:
    def __init__(self, layout: RunLayout, findings: Findings) -> None:
        self.layout = layout
        self.f = findings
        self.specs = {s.relpath: s for s in layout.logs()}
        self.valid_lines: dict[str, int] = {}
        self.heads: dict[str, dict[int, str]] = {}  # log -> anchored count -> head seen
        self.anchors: list[tuple[int, dict]] = []
        self.wanted: dict[str, set[int]] = {}
        self._read_anchors()

    # -- anchors.jsonl --------------------------------------------------------------
    def _read_anchors(self) -> None:
        for seq, obj in self.lines(ANCHORS_LOG):
            if obj.get("event") != "anchor":
                self.f.expect(8, seq == 0 and obj.get("event") == "open", ANCHORS_LOG, seq,
                              f"line of no known event ({obj.get('event')!r})")
                continue
            ok = isinstance(obj.get("logs"), dict) and isinstance(obj.get("manifests"), dict)
            if not self.f.expect(8, ok, ANCHORS_LOG, seq, "anchor without logs/manifests maps"):
                continue
            self.anchors.append((seq, obj))
            for rel, fixed in obj["logs"].items():
                n = fixed.get("lines") if isinstance(fixed, dict) else None
                if isinstance(n, int) and n >= 0:
                    self.wanted.setdefault(rel, set()).add(n)
                else:
                    self.f.fail(8, ANCHORS_LOG, seq, f"anchor entry for {rel} has no line count")

    # -- one log ------------------------------------------------------------------------
    def lines(self, rel: str) -> Iterator[tuple[int, dict]]:
        """(seq, obj) of the chain-valid lines of ``rel``, in order, each line
        parsed once (`chain.ChainReader`); chain problems are reported when
        the iteration ends, and the hash at every anchored count is kept."""
        spec = self.specs[rel]
        path = self.layout.root / rel
        if not path.exists():
            self.f.fail_root(8, rel, None, "log missing")
            self.valid_lines[rel] = 0
            return
        reader = ChainReader(path, spec.seed, heads_at=self.wanted.get(rel, ()))
        lines = iter(reader)
        for seq, obj in lines:  # line 0 only; the rest is handed on as it comes
            opened = obj.get("event") == "open"  # its prev is the seed: the reader checked it
            self.f.expect(11, opened, rel, 0, f"line 0 is not an open line chained from {spec.manifest}'s seed")
            yield seq, obj
            break
        yield from lines
        check = reader.result
        assert check is not None, "the log's lines were not all consumed"
        self.f.check(8)
        if not check.ok:
            self.f.fail_root(8, rel, check.problem_line, f"chain: {check.problem}")
        self.valid_lines[rel] = check.lines
        self.heads.setdefault(rel, {}).update(reader.heads)
        if check.lines == 0:
            self._check_open(spec, path)

    def _check_open(self, spec: LogSpec, path: Path) -> None:
        """Invariant 11's half that lives in the logs, when line 0 is not a
        valid link: it may still be an open line chained from the seed."""
        first = None
        try:
            for line in iter_lines(path):
                first = line.obj
                break
        except Exception:  # noqa: BLE001 - an unreadable line 0 is reported below
            first = None
        ok = first is not None and first.get("prev") == spec.seed and first.get("event") == "open"
        self.f.expect(11, ok, spec.relpath, 0,
                      f"line 0 is not an open line chained from {spec.manifest}'s seed")

    # -- after every log was read -------------------------------------------------------
    def finish(self, witness: Path | None) -> None:
        f = self.f
        anchored = [rel for rel in self.specs if rel not in UNANCHORED_BY_DESIGN]
        if not f.expect(8, bool(self.anchors), ANCHORS_LOG, None, "no anchor at all"):
            if witness is not None:
                f.witness, f.witness_problems = str(witness), 1
                f.fail(8, "witness", None, "not checked: the run has no anchor to look for")
            return
        last_counts: dict[str, int] = {}
        last_t = float("-inf")
        for seq, anchor in self.anchors:
            t = anchor.get("t") if isinstance(anchor.get("t"), (int, float)) else float("-inf")
            f.expect(8, t >= last_t, ANCHORS_LOG, seq, "anchor time goes backwards")
            last_t = max(t, last_t)
            missing = sorted(set(anchored) - set(anchor["logs"]))
            f.expect(8, not missing, ANCHORS_LOG, seq, f"anchor lacks logs {missing}")
            for rel, fixed in anchor["logs"].items():
                n = fixed.get("lines") if isinstance(fixed, dict) else None
                if rel not in self.specs or rel in UNANCHORED_BY_DESIGN:
                    f.fail(8, ANCHORS_LOG, seq, f"anchors a log the run does not have: {rel}")
                    continue
                if not isinstance(n, int):
                    continue
                f.check(8)
                if n < last_counts.get(rel, 0):
                    f.fail(8, ANCHORS_LOG, seq, f"{rel}: anchored line count went down to {n}")
                last_counts[rel] = max(n, last_counts.get(rel, 0))
                seen = self.heads.get(rel, {}).get(n)
                if n > self.valid_lines.get(rel, 0):
                    f.fail(8, ANCHORS_LOG, seq, f"{rel}: anchored {n} lines, the log has "
                                                f"{self.valid_lines.get(rel, 0)} valid")
                elif seen != fixed.get("head"):
                    f.fail(8, ANCHORS_LOG, seq, f"{rel}: head at line count {n} differs from the anchor")
            for rel, sha in anchor["manifests"].items():
                f.check(8)
                if self._manifest_sha(rel) != sha:
                    f.fail_root(8, ANCHORS_LOG, seq, f"manifest {rel} does not hash as anchored")
        seq, final = self.anchors[-1]
        f.expect(8, final.get("final") is True, ANCHORS_LOG, seq, "the last anchor is not final")
        f.expect(8, seq == self.valid_lines.get(ANCHORS_LOG, 0) - 1, ANCHORS_LOG, seq,
                 "lines follow the final anchor in anchors.jsonl")
        for s, a in self.anchors[:-1]:
            f.expect(8, a.get("final") is not True, ANCHORS_LOG, s, "a final anchor before the last one")
        for rel in ("manifest.json", *(model_manifest(m) for m in self.layout.models)):
            f.expect(8, rel in final["manifests"], ANCHORS_LOG, seq, f"final anchor lacks manifest {rel}")
        for rel in anchored:
            fixed = final["logs"].get(rel)
            if not f.expect(8, isinstance(fixed, dict), ANCHORS_LOG, seq, f"final anchor lacks {rel}"):
                continue
            tail = self.valid_lines.get(rel, 0) - int(fixed.get("lines") or 0)
            if tail > 0:
                self.f.unanchored += tail
                note = self.f.notes.get(8)
                self.f.notes[8] = f"{note}; {rel}: {tail}" if note else f"{rel}: {tail}"
        self._final_push(seq, final.get("final") is True)
        if witness is not None:
            from confirmatory.witness import check_witness  # git subprocesses: only when asked

            problems = check_witness(Path(witness), self.layout.root)
            f.check(8)
            f.witness, f.witness_problems = str(witness), len(problems)
            for p in problems:
                f.fail(8, "witness", None, p)

    def _manifest_sha(self, rel: str) -> str | None:
        if rel == "manifest.json":
            return self.layout.manifest.sha256
        for name, mf in self.layout.models.items():
            if rel == model_manifest(name):
                return mf.sha256
        from confirmatory.records import read_json

        return read_json(self.layout.root / rel).sha256

    def _final_push(self, final_seq: int, is_final: bool) -> None:
        """The last push line is the final anchor's, it returned 0, and every
        push names an anchor made before it."""
        anchor_t = {seq: a.get("t") for seq, a in self.anchors}
        last = None
        for seq, o in self.lines(PUSHES_LOG):
            if o.get("event") != "push":
                self.f.expect(8, seq == 0 and o.get("event") == "open", PUSHES_LOG, seq,
                              f"line of no known event ({o.get('event')!r})")
                continue
            last = (seq, o)
            self.f.expect(8, type(o.get("anchor_seq")) is int and (o.get("rc") is None or type(o.get("rc")) is int)
                          and type(o.get("output")) is str and type(o.get("t")) in (int, float), PUSHES_LOG, seq,
                          "push line: anchor_seq must be an integer, rc an integer or null, output a string, "
                          "t a number")
            made = anchor_t.get(o.get("anchor_seq")) if type(o.get("anchor_seq")) is int else None
            ok = isinstance(made, (int, float)) and isinstance(o.get("t"), (int, float)) and o["t"] >= made
            self.f.expect(8, ok, PUSHES_LOG, seq, f"push of anchor line {o.get('anchor_seq')}, "
                                                       "which does not precede it in anchors.jsonl")
        if last is None:
            self.f.fail(8, PUSHES_LOG, None, "no anchor was ever pushed" if not is_final
                        else "the final anchor was never pushed")
            return
        last_seq, o = last
        self.f.expect(8, o.get("anchor_seq") == final_seq and o.get("rc") == 0, PUSHES_LOG, last_seq,
                      f"the last push is of anchor line {o.get('anchor_seq')} with rc {o.get('rc')}; "
                      f"the final anchor is line {final_seq} and its push must return 0")
