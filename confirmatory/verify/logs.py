"""Invariant 8 (chains, anchors, final push, witness) and the one streaming pass over each log.

Owns: reading anchors.jsonl first, in one pass that makes every check of an
anchor needing no other log and keeps, per log, the line counts and heads
the anchors fix (in arrays: `Fixed`); then, for each log, one
`chain.ChainReader` pass from the seed its manifest gives it, which checks
every link, hands each chain-valid line (parsed once) to the invariant
checks and keeps the hash at each anchored count, compared with the anchors
when the pass ends (`settle`), so no log is read or parsed twice and no
anchor line is kept. Lines after the final anchor's count are the
"unanchored tail": a distinct status, never a plain pass.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confirmatory.records.layout import (
    ANCHORS_LOG,
    PUSHES_LOG,
    LogSpec,
    RunLayout,
    model_manifest,
)
from confirmatory.records.reader import ChainReader, iter_lines
from confirmatory.verify.anchored import _HEX64, Fixed, settle_roots, witness_fixed
from confirmatory.verify.report import UNDER_WAY, Findings

if TYPE_CHECKING:
    from confirmatory.core.merkle import Range

UNANCHORED_BY_DESIGN = (ANCHORS_LOG, PUSHES_LOG)
RESUME_LOG = "resume.jsonl"  # appended by `confirmatory resume`, another process (confirmatory.engine.resume)


def still_making(stage: str | None, root: Path) -> bool:
    """Whether a run cut short may have been cut short while its directory
    was made: no close line and no anchor yet (anchors.jsonl looked at, not
    checked). The runner makes its manifests, design copy and logs, in that
    order, before its first anchor and before any thread starts."""
    if stage != UNDER_WAY:
        return False
    try:
        if not stat.S_ISREG(os.lstat(root / ANCHORS_LOG).st_mode):
            return False  # not a file the runner made: nothing here is the crash's
        with open(root / ANCHORS_LOG, "rb") as fh:
            return not any(b'"event":"anchor"' in line for line in fh)
    except OSError:
        return True


# anchor-pushes.jsonl's lines of each anchor's evidence, checked by invariant 12
_EVIDENCE_EVENTS = ("checkpoint", "stamp", "cosignature")


class LogPass:
    def __init__(
        self, layout: RunLayout, findings: Findings, stage: str | None = None, witness: Path | None = None
    ) -> None:
        self.layout = layout
        self.f = findings
        self.specs = {s.relpath: s for s in layout.logs()}
        self.valid_lines: dict[str, int] = {}
        self.broken: set[str] = set()  # logs whose chain breaks (read by this pass)
        # How far a run that is not complete got (report.UNDER_WAY, CLOSED;
        # None: whole), set by verify_run before any log is read.
        self.stage = stage
        # UNDER_WAY with no anchor yet: the run may have been cut short while
        # its directory was made (manifests, design copy and logs, in that
        # order, before the first anchor and before any thread started).
        self.making = still_making(stage, layout.root)
        # CLOSED: torn tails, judged at finish
        self.pending_torn: list[tuple[str, int | None, str, dict[str, Any]]] = []
        self.final_missing = False  # the final anchor, or its push, is what the crash left out
        self.crash_tail: dict[str, int] = {}  # per log, its lines past the last anchor of a run cut short
        # run.jsonl's close line (set once it is read): the one anchor that
        # may count it is the final one, so a run cut short after its close
        # has its last anchor before it
        self.close_seq: int | None = None
        # What stays of anchors.jsonl after its one pass: per anchored log its
        # counts and heads (compared once that log is read: ``settle``), each
        # anchor's time (for the pushes), the final-looking anchors and the
        # last anchor itself.
        self.fixed: dict[str, Fixed] = {}
        self.anchor_t: dict[int, object] = {}
        self.finals: list[int] = []
        self.last_anchor: tuple[int, dict[str, Any]] | None = None
        self.anchor_count = 0
        self.anchored = [rel for rel in self.specs if rel not in UNANCHORED_BY_DESIGN]
        # the manifests an anchor may name, and their hashes (None: unreadable).
        # Nothing else is read: an anchor names paths, and a forged one could
        # name any file (/dev/zero, a FIFO, another log).
        self._manifest_shas = {
            "manifest.json": layout.manifest.sha256,
            **{model_manifest(name): mf.sha256 for name, mf in layout.models.items()},
        }
        # The witness's own anchors, read before any log so that each log's
        # one pass checks their heads and roots too (``wfixed``), and the
        # witness check's problems, reported at the end (``_witness``).
        self.wfixed: dict[str, Fixed] = {}
        self._witness_problems: list[str] | None = None
        self._read_anchors()
        if witness is not None and self.last_anchor is not None:
            self._read_witness(Path(witness))

    # -- anchors.jsonl --------------------------------------------------------------
    def _read_anchors(self) -> None:
        """One pass over anchors.jsonl: every check of an anchor that needs no
        other log is made here, as it comes; its counts and heads are kept
        (``fixed``) for the pass over each log."""
        f = self.f
        last_counts: dict[str, int] = {}
        last_t = float("-inf")
        anchored = set(self.anchored)
        conts = 0  # continuation lines so far
        for seq, obj in self.lines(ANCHORS_LOG):
            if obj.get("event") == "continuation":
                conts += 1  # each also wrote a line to every admission log (docs/RUN.md)
                continue
            if obj.get("event") != "anchor":
                f.expect(
                    8,
                    seq == 0 and obj.get("event") == "open",
                    ANCHORS_LOG,
                    seq,
                    f"line of no known event ({obj.get('event')!r})",
                )
                continue
            ok = isinstance(obj.get("logs"), dict) and isinstance(obj.get("manifests"), dict)
            if not f.expect(8, ok, ANCHORS_LOG, seq, "anchor without logs/manifests maps"):
                continue
            self.last_anchor = (seq, obj)
            self.anchor_count += 1
            self.anchor_t[seq] = obj.get("t")
            if obj.get("final") is True:
                self.finals.append(seq)
            t = obj["t"] if isinstance(obj.get("t"), (int, float)) else float("-inf")
            f.expect(8, t >= last_t, ANCHORS_LOG, seq, "anchor time goes backwards")
            last_t = max(t, last_t)
            # how many logs it lacks, counted over its own entries; which
            # ones (every log of the run, sorted) only for a violation kept
            f.check(8)
            if sum(rel in anchored for rel in obj["logs"]) < len(anchored):
                if f.keeps(8):
                    f.fail(8, ANCHORS_LOG, seq, f"anchor lacks logs {sorted(anchored - set(obj['logs']))}")
                else:
                    f.tally(8, 1)
            for rel, fixed in obj["logs"].items():
                n = fixed.get("lines") if isinstance(fixed, dict) else None
                if not (isinstance(n, int) and n >= 0):
                    f.fail(8, ANCHORS_LOG, seq, f"anchor entry for {rel} has no line count")
                if rel not in self.specs or rel in UNANCHORED_BY_DESIGN:
                    f.fail(8, ANCHORS_LOG, seq, f"anchors a log the run does not have: {rel}")
                    continue
                if not isinstance(n, int):
                    continue
                f.check(8)
                if n < last_counts.get(rel, 0):
                    f.fail(8, ANCHORS_LOG, seq, f"{rel}: anchored line count went down to {n}")
                last_counts[rel] = max(n, last_counts.get(rel, 0))
                root = fixed.get("root")
                if root is not None and not (type(root) is str and _HEX64.fullmatch(root)):
                    f.fail(
                        8,
                        ANCHORS_LOG,
                        seq,
                        f"anchor entry for {rel}: root {str(root)[:80]!r} is not a "
                        "sha256 in lower-case hex (64 digits)",
                    )
                if n >= 0:
                    self.fixed.setdefault(rel, Fixed()).add(seq, n, fixed.get("head"), root)
                else:  # no such count: matched by no line (reported above)
                    f.fail(8, ANCHORS_LOG, seq, f"{rel}: head at line count {n} differs from the anchor")
                # The Run writes the first anchor before any lane makes an
                # admission decision (`Run._start_anchorer`): it counts no
                # decision of any model, only its admission log's open line.
                if self.anchor_count == 1 and n > 1 + conts and rel.endswith("/admission.jsonl"):
                    f.fail(
                        8,
                        ANCHORS_LOG,
                        seq,
                        f"the first anchor counts {n} lines of {rel}: it was made after "
                        "that model's first admission decision (the run anchors before any lane decides)",
                    )
            for rel, sha in obj["manifests"].items():
                f.check(8)
                if rel not in self._manifest_shas:
                    f.fail(8, ANCHORS_LOG, seq, f"anchors a manifest the run does not have: {rel}")
                elif self._manifest_shas[rel] != sha:
                    f.fail_root(8, ANCHORS_LOG, seq, f"manifest {rel} does not hash as anchored")

    def _read_witness(self, witness: Path) -> None:
        from confirmatory.anchors.check import (
            check_witness,  # git subprocesses: only when asked
        )

        held: list[bytes] = []
        try:
            self._witness_problems = check_witness(witness, self.layout.root, held=held)
        except Exception as exc:  # noqa: BLE001 - reported as the witness's problem, with the others
            self._witness_problems = [f"not checked: {type(exc).__name__}: {exc}"]
        self.wfixed = witness_fixed(held, set(self.anchored))

    def wants_trees(self, rel: str) -> bool:
        """Whether any anchor (the run's or the witness's) gives ``rel`` a
        root: only then is its tree built."""
        return any(fixed is not None and fixed.has_roots for fixed in (self.fixed.get(rel), self.wfixed.get(rel)))

    def heads_at(self, rel: str) -> frozenset[int]:
        """The line counts the anchors (the run's and the witness's) fix in
        ``rel``: where its reader keeps the head and cuts its tree."""
        return frozenset(
            c for fixed in (self.fixed.get(rel), self.wfixed.get(rel)) if fixed is not None for c in fixed.counts
        )

    def settle(
        self,
        rel: str,
        heads: dict[int, str],
        valid: int,
        f: Findings | None = None,
        times: dict[int, Any] | None = None,
        trees: list[Range] | None = None,
    ) -> None:
        """Compare every anchor's count and head for ``rel`` with what its one
        pass found (``heads`` at the anchored counts, ``valid`` chain-valid
        lines), in ``f`` (this pass's findings when None); then drop them.
        ``times``: the ``t`` of the line at each anchored count, which is not
        after the anchor's (below)."""
        f = self.f if f is None else f
        self._settle_witness(rel, heads, valid, f, trees)
        fixed = self.fixed.pop(rel, None)
        if fixed is None:
            return
        # An anchor's t is taken after its counts (`Anchorer.anchor`), from the
        # clock every line of the run's own logs takes its t from, which never
        # goes back: the last line it counts is dated no later than it. (Not
        # resume.jsonl: another process's wall time, which a step back of the
        # wall clock can put after the run's clock.)
        times = times if times is not None and rel != RESUME_LOG else {}
        anchor_t = self.anchor_t
        for k, seq in enumerate(fixed.seqs):
            n = fixed.count(k)
            if n > valid:
                f.fail(8, ANCHORS_LOG, seq, f"{rel}: anchored {n} lines, the log has {valid} valid")
            elif not fixed.matches(k, heads.get(n)):
                f.fail(8, ANCHORS_LOG, seq, f"{rel}: head at line count {n} differs from the anchor")
            else:
                lt, at = times.get(n), anchor_t.get(seq)
                if (type(lt) is float or type(lt) is int) and (type(at) is float or type(at) is int) and lt > at:
                    f.fail(
                        8,
                        ANCHORS_LOG,
                        seq,
                        f"{rel}: the anchor at {at} counts line {n - 1}, dated {lt}, after "
                        "it (an anchor's t is taken after its counts)",
                    )
        settle_roots(rel, fixed, valid, trees or [], f)

    def _settle_witness(
        self, rel: str, heads: dict[int, str], valid: int, f: Findings, trees: list[Range] | None
    ) -> None:
        """The witness's anchors of ``rel`` against the log, as the run's are:
        the witness, not the run's copy, is what a forger cannot rewrite."""
        fixed = self.wfixed.pop(rel, None)
        if fixed is None:
            return
        before = f.count[8]
        for k, seq in enumerate(fixed.seqs):
            n = fixed.count(k)
            f.check(8)
            if n > valid:
                f.fail(
                    8,
                    "witness",
                    seq,
                    f"the witness's anchor line {seq}: {rel}: anchored {n} lines, the log has {valid} valid",
                )
            elif not fixed.matches(k, heads.get(n)):
                f.fail(
                    8,
                    "witness",
                    seq,
                    f"the witness's anchor line {seq}: {rel}: head at line count {n} differs from the log's",
                )
        settle_roots(rel, fixed, valid, trees or [], f, where="witness", whose="the witness's ")
        f.witness_problems += f.count[8] - before  # added to the witness check's own at the end

    # -- one log ------------------------------------------------------------------------
    def lines(self, rel: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """(seq, obj) of the chain-valid lines of ``rel``, in order, each line
        parsed once (`chain.ChainReader`); chain problems are reported when
        the iteration ends, and the hash at every anchored count is kept."""
        spec = self.specs[rel]
        path = self.layout.root / rel
        if not path.exists() and self.making:
            # cut short while create_run_dir opened the logs, before any anchor
            self.f.explain(8, rel, None, "log not made yet: the run was cut short while its directory was made")
            self.valid_lines[rel] = 0
            self.settle(rel, {}, 0)
            return
        if not path.exists():
            self.f.fail_root(8, rel, None, "log missing")
            self.broken.add(rel)
            self.valid_lines[rel] = 0
            self.settle(rel, {}, 0)
            return
        reader = ChainReader(path, spec.seed, heads_at=self.heads_at(rel), trees=self.wants_trees(rel))
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
        if not check.ok and check.torn is not None and self.stage is not None:
            # The last line, cut short by the crash (no newline): never
            # acknowledged (an append returns only after its newline is on disk).
            torn = {
                "log": rel,
                "offset": check.torn.offset,
                "length": check.torn.length,
                "sha256": check.torn.sha256,
                "reason": check.torn.reason,
            }
            if self.stage == UNDER_WAY:
                self.f.check(8)
                self.f.torn_tails.append(torn)
            else:
                self.pending_torn.append((rel, check.problem_line, f"chain: {check.problem}", torn))
        elif not check.ok:
            self.f.fail_root(8, rel, check.problem_line, f"chain: {check.problem}")
            self.broken.add(rel)
        self.valid_lines[rel] = check.lines
        self.settle(rel, reader.heads, check.lines, times=reader.times, trees=reader.trees)
        if check.lines == 0 and self.making and not path.read_bytes().strip(b" "):
            self.f.explain(11, rel, 0, "no open line yet: the run was cut short while its directory was made")
        elif check.lines == 0 and self.making and check.torn is not None:
            pass  # its open line cut short: the torn tail above says so
        elif check.lines == 0:
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
        self.f.expect(11, ok, spec.relpath, 0, f"line 0 is not an open line chained from {spec.manifest}'s seed")

    # -- after every log was read -------------------------------------------------------
    def finish(self, witness: Path | None) -> None:
        f = self.f
        for rel in [*self.fixed, *(r for r in self.wfixed if r not in self.fixed)]:
            self.settle(
                rel, {}, self.valid_lines.get(rel, 0)
            )  # logs no pass read (a model whose manifest is unreadable)
        if self.last_anchor is None and self.stage == UNDER_WAY:
            f.explain(8, ANCHORS_LOG, None, "no anchor yet: the run was cut short before its first anchor")
            self.final_missing = True
            self.crash_tail = {rel: tail for rel in self.anchored if (tail := self.valid_lines.get(rel, 0)) > 0}
            self._settle_torn()
            self._witness(witness)
            return
        if not f.expect(8, self.last_anchor is not None, ANCHORS_LOG, None, "no anchor at all"):
            if witness is not None:
                f.witness, f.witness_problems = str(witness), 1
                f.fail(8, "witness", None, "not checked: the run has no anchor to look for")
            return
        assert self.last_anchor is not None  # (expect returned its ok)
        seq, final = self.last_anchor
        counts_close = False
        if self.close_seq is not None and isinstance(final.get("logs"), dict):
            entry = final["logs"].get("run.jsonl")
            n = entry.get("lines") if isinstance(entry, dict) else None
            counts_close = isinstance(n, int) and n > self.close_seq
        if final.get("final") is not True and self.stage is not None and not counts_close:
            # cut short before its final anchor: the lines after the last
            # anchor are the crash's unanchored tail
            f.explain(8, ANCHORS_LOG, seq, "the last anchor is not final: the run did not reach its end")
            self.final_missing = True
            self._crash_tail(final)
            self._final_push(seq, False)
            self._settle_torn()
            self._witness(witness)
            return
        f.expect(8, final.get("final") is True, ANCHORS_LOG, seq, "the last anchor is not final")
        f.expect(
            8,
            seq == self.valid_lines.get(ANCHORS_LOG, 0) - 1,
            ANCHORS_LOG,
            seq,
            "lines follow the final anchor in anchors.jsonl",
        )
        f.check(8, self.anchor_count - 1)  # every anchor before the last is not final
        for s in self.finals:
            if s != seq:
                f.fail(8, ANCHORS_LOG, s, "a final anchor before the last one")
        for rel in ("manifest.json", *(model_manifest(m) for m in self.layout.models)):
            f.expect(8, rel in final["manifests"], ANCHORS_LOG, seq, f"final anchor lacks manifest {rel}")
        tails = []  # "<log>: <lines>" each, joined into the note once
        try:
            for rel in self.anchored:
                fixed = final["logs"].get(rel)
                if not f.expect(8, isinstance(fixed, dict), ANCHORS_LOG, seq, f"final anchor lacks {rel}"):
                    continue
                tail = self.valid_lines.get(rel, 0) - int(fixed.get("lines") or 0)
                if tail > 0:
                    self.f.unanchored += tail
                    tails.append(f"{rel}: {tail}")
        finally:  # (a line count of the wrong kind raises: the tails found before it are noted)
            if tails:
                note = self.f.notes.get(8)
                self.f.notes[8] = "; ".join([note, *tails] if note else tails)
        self._final_push(seq, final.get("final") is True)
        self._settle_torn()
        self._witness(witness)

    def _witness(self, witness: Path | None) -> None:
        f = self.f
        if witness is not None:
            from confirmatory.anchors.check import (
                check_witness,  # git subprocesses: only when asked
            )

            problems = self._witness_problems
            if problems is None:  # not read up front (no anchor in the run): read now
                problems = check_witness(Path(witness), self.layout.root)
            from confirmatory.anchors.check import CANNOT_CHECK

            f.check(8)
            unchecked = [p[len(CANNOT_CHECK) :] for p in problems if p.startswith(CANNOT_CHECK)]
            problems = [p for p in problems if not p.startswith(CANNOT_CHECK)]
            f.witness, f.witness_problems = str(witness), len(problems) + f.witness_problems
            f.witness_unchecked.extend(unchecked)
            for p in problems:
                f.fail(8, "witness", None, p)

    def _crash_tail(self, last: dict[str, Any]) -> None:
        """The lines each log holds past the last anchor: what no anchor vouches for yet."""
        logs = last["logs"] if isinstance(last.get("logs"), dict) else {}
        self.crash_tail = {}
        for rel in self.anchored:
            fixed = logs.get(rel)
            n = fixed.get("lines") if isinstance(fixed, dict) else 0
            tail = self.valid_lines.get(rel, 0) - (n if isinstance(n, int) else 0)
            if tail > 0:
                self.crash_tail[rel] = tail

    def _settle_torn(self) -> None:
        """Torn tails of a closed run: the crash's while its final anchor is
        missing; after a final anchor pushed, nothing was left to cut short."""
        for rel, line, message, torn in self.pending_torn:
            if self.final_missing:
                self.f.check(8)
                self.f.torn_tails.append(torn)
            else:
                self.f.fail_root(8, rel, line, message)
                self.broken.add(rel)
        self.pending_torn = []

    def _final_push(self, final_seq: int, is_final: bool) -> None:
        """The last push line is the final anchor's, it returned 0, and every
        push names an anchor made before it."""
        anchor_t = self.anchor_t
        last = None
        for seq, o in self.lines(PUSHES_LOG):
            if o.get("event") == "continuation":
                continue
            if o.get("event") in _EVIDENCE_EVENTS:
                continue  # invariant 12's (verify.evidence)
            if o.get("event") != "push":
                self.f.expect(
                    8,
                    seq == 0 and o.get("event") == "open",
                    PUSHES_LOG,
                    seq,
                    f"line of no known event ({o.get('event')!r})",
                )
                continue
            last = (seq, o)
            self.f.expect(
                8,
                type(o.get("anchor_seq")) is int
                and (o.get("rc") is None or type(o.get("rc")) is int)
                and type(o.get("output")) is str
                and type(o.get("t")) in (int, float),
                PUSHES_LOG,
                seq,
                "push line: anchor_seq must be an integer, rc an integer or null, output a string, t a number",
            )
            made = anchor_t.get(o["anchor_seq"]) if type(o.get("anchor_seq")) is int else None
            ok = isinstance(made, (int, float)) and isinstance(o.get("t"), (int, float)) and o["t"] >= made
            self.f.expect(
                8,
                ok,
                PUSHES_LOG,
                seq,
                f"push of anchor line {o.get('anchor_seq')}, which does not precede it in anchors.jsonl",
            )
        if last is None:
            if self.stage is not None:
                # cut short before the first push had run (a short run can
                # close before its first periodic push ends)
                self.final_missing = True
                self.f.explain(8, PUSHES_LOG, None, "no anchor was pushed before the run was cut short")
                return
            self.f.fail(
                8,
                PUSHES_LOG,
                None,
                "no anchor was ever pushed" if not is_final else "the final anchor was never pushed",
            )
            return
        last_seq, o = last
        if not is_final:
            return  # cut short before its final anchor: no final push to look for
        if self.stage is not None and o.get("anchor_seq") != final_seq:
            # the final anchor's push not recorded: cut short before (or
            # while) it ran; a push of it that failed is a violation below
            self.final_missing = True
            self.f.explain(
                8,
                PUSHES_LOG,
                last_seq,
                f"the final anchor (line {final_seq}) is not on the witness: "
                f"the last push is of anchor line {o.get('anchor_seq')} with rc {o.get('rc')}",
            )
            return
        self.f.expect(
            8,
            o.get("anchor_seq") == final_seq and o.get("rc") == 0,
            PUSHES_LOG,
            last_seq,
            f"the last push is of anchor line {o.get('anchor_seq')} with rc {o.get('rc')}; "
            f"the final anchor is line {final_seq} and its push must return 0",
        )
