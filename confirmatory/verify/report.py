"""What `verify` found: one result per invariant of RECORDS.md, as values.

Owns the invariant table (number, short name), the `Violation` record
(invariant, file, line, message), how results are collected (`Findings`:
counts every check, keeps the first violations of each invariant), the run's
state (complete, running or crashed, and what only the crash explains) and
the two renderings: a table for people and JSON for machines.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from confirmatory.core.money import format_usd
from confirmatory.verify.disagreements import listing_lines
from confirmatory.verify.outcome import _utc

INVARIANTS: dict[int, str] = {
    1: "one attempt line per record, hashes match",
    2: "classes and actions recomputed",
    3: "draw order, arm order, passes, no overlap, rerun limit",
    4: "admission decisions replayed",
    5: "call times within their attempt",
    6: "no start during pause, after stop or ceiling",
    7: "spend conserved",
    8: "chains, anchors, final push, witness",
    9: "triggers and stops",
    10: "accepted resumes after their pause",
    11: "manifest equals design; logs open from manifests",
    12: "evidence: signed checkpoints, time stamps, cosignatures",
}

KEEP_PER_INVARIANT = 20

# The run's state (docs/VERIFY.md "States"): one of these words.
COMPLETE = "complete"  # a close line and a pushed final anchor
RUNNING = "running"  # a live runner holds the run's lock
CRASHED = "crashed"  # nobody holds the lock, and the run is not complete

# How far a run that is not complete got (Findings.stage), which decides
# what its records may lack without a violation:
UNDER_WAY = "under way"  # no close line: households under way, lanes without a lane-end, no close, no final anchor
CLOSED = "closed"  # a close line, but no final anchor on the witness: the final anchor and its push only


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    UNANCHORED = "unanchored"  # chains and anchors hold, but lines follow the final anchor


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: int
    file: str
    line: int | None  # 0-based line (seq) of a log; None for a whole file
    message: str

    def where(self) -> str:
        """``file:N`` with N the 1-based line number editors count (``sed -n Np``): seq + 1."""
        return self.file if self.line is None else f"{self.file}:{self.line + 1}"


@dataclass(frozen=True, slots=True)
class Result:
    invariant: int
    name: str
    status: Status
    checked: int
    violations: int
    first: tuple[Violation, ...]
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Report:
    run_dir: str
    results: tuple[Result, ...]
    unanchored_tail: int  # lines after the final anchor, summed over logs
    # Violations other checks may follow from (a chain break: the checks
    # read only the lines before it; a missing log; a manifest that changed):
    # shown first, so a reviewer starts at the cause, not at its echoes.
    start_here: tuple[Violation, ...] = ()
    # None: no witness was asked (--witness); else the clone and how many
    # problems its check found (invariant 8 lists them).
    witness: str | None = None
    witness_problems: int = 0
    # What the run's own records say of how it ended (not a check): the
    # close line's status, the stops' causes, households ended per model.
    outcome: str | None = None
    # None: no households file was given (--households); else the file, how
    # many households it holds and how many problems its check found
    # (invariant 11 lists them).
    households: str | None = None
    households_count: int = 0
    households_problems: int = 0
    state: str = COMPLETE
    # For a run that is not complete: what only the crash (or the run still
    # being under way) explains, never a violation (Findings.crash_report).
    crash: dict[str, Any] | None = None
    # Per model, what verify counted of its ended households (the report's
    # tables; not in to_json): "results" (arm results by the class that
    # stands), "attempts" (by class), "reruns" (by the class of the attempt
    # each replaced), "households" (ended), "unfinished".
    tallies: dict[str, Any] | None = None
    # What the records hold, as the checks counted it (verification.run_figures)
    figures: dict[str, Any] | None = None
    # What of the witness could not be checked on this machine (a fetch that
    # failed: a full disk, a remote out of reach): said, never a violation
    witness_unchecked: tuple[str, ...] = ()
    # Per anchor, what proves it (verify.evidence): {"seq", "t", "final",
    # "evidence": {"git", "signature", "cosignatures", "stamps"}}
    anchors: tuple[dict[str, Any], ...] = ()

    @property
    def ok(self) -> bool:
        """Every invariant holds on what the records hold (a crashed run may be ok)."""
        return all(r.status is Status.PASS for r in self.results)

    @property
    def complete(self) -> bool:
        return self.state == COMPLETE

    def exit_status(self) -> int:
        """verify's exit status: 0 complete and every invariant holds; 1 a
        violation; 3 no violation, but not complete (crashed or running)."""
        if not self.ok:
            return 1
        return 0 if self.complete else 3

    def next_step(self) -> str | None:
        """The command that moves a run that is not complete on, if any."""
        if self.state != CRASHED or self.crash is None:
            return None
        if self.crash.get("stage") == CLOSED and self.crash.get("final_anchor"):
            return f"confirmatory push-anchor {self.run_dir}"
        if not self.crash.get("manifest", True):
            return None
        return f"confirmatory continue {self.run_dir} --reason TEXT"

    def report_command(self) -> str:
        """The command that draws this run's page, with the checks this report
        made (``--witness``, ``--households``): the page then shows them too."""
        words = ["confirmatory", "report", self.run_dir]
        if self.witness is not None:
            words += ["--witness", self.witness]
        if self.households is not None:
            words += ["--households", self.households]
        return shlex.join(words)

    def state_line(self) -> str:
        if self.state == COMPLETE:
            return "state: complete (a close line and a pushed final anchor)"
        if self.state == RUNNING:
            return "state: running (a runner holds the run's lock: what is read is a snapshot of a run under way)"
        c = self.crash or {}
        if not c.get("manifest", True):
            return (
                "state: crashed before its run manifest was written: nothing was started and nothing "
                "was spent; start the run anew in another directory"
            )
        step = self.next_step()
        if c.get("stage") == CLOSED and c.get("final_anchor"):
            return (
                f"state: crashed after its close line: the final anchor is written but not on the witness "
                f"yet; carry it on with: {step}"
            )
        if c.get("stage") == CLOSED:
            return f"state: crashed after its close line, before its final anchor was written; carry it on with: {step}"
        return (
            f"state: crashed (no close line, and no runner holds its lock); last durable line at "
            f"{_utc(c.get('last_durable_t'))}; carry it on with: {step}"
        )

    def spend_line(self) -> str:
        """The money as the records hold it (figures["spend"]; core.money's count and rounding)."""

        sp = (self.figures or {}).get("spend")
        if not isinstance(sp, dict):
            return ""
        parts = [
            f"{what} {format_usd(sp[k])}"
            for k, what in (
                ("recorded_nusd", "recorded"),
                ("late_nusd", "late"),
                ("lost_nusd", "lost"),
                ("in_flight_nusd", "in flight"),
                ("before_nusd", "before this stage"),
            )
            if sp.get(k) or k == "recorded_nusd"
        ]
        mark = "" if self.ok else " (read from records that FAIL verify)"
        return f"spend{mark}: {format_usd(self.figures['spend_total_nusd'])} = " + " + ".join(parts)  # type: ignore[index]

    def result(self, invariant: int) -> Result:
        return next(r for r in self.results if r.invariant == invariant)

    def failed(self) -> set[int]:
        return {r.invariant for r in self.results if r.status is not Status.PASS}

    def witness_line(self) -> str:
        if self.witness is None:
            return "witness: not checked (verify --witness CLONE checks that the witness holds every anchor, unchanged)"
        unchecked = "".join(f"; NOT CHECKED: {u}" for u in self.witness_unchecked)
        if self.witness_problems:
            return f"witness: {self.witness}: {self.witness_problems} problem(s), listed under invariant 8" + unchecked
        if self.witness_unchecked and "no earlier fetch" in unchecked:
            return f"witness: {self.witness}: NOT CHECKED: {'; '.join(self.witness_unchecked)}"
        return f"witness: {self.witness} holds every anchor of the run, unchanged" + unchecked

    def evidence_kinds(self) -> list[str]:
        """What kinds of evidence the final (else the last) anchor has, checked."""
        return evidence_kinds(list(self.anchors))

    def evidence_rows(self, shown: int = 3) -> list[str]:
        """Per anchor what proves it (short): the first and last ``shown`` when there are more."""
        if not self.anchors:
            return []
        picked = list(self.anchors)
        cut = len(picked) > 2 * shown
        if cut:
            picked = picked[:shown] + picked[-shown:]
        rows = ["what proves each anchor:"]
        for n, a in enumerate(picked):
            if cut and n == shown:
                rows.append(f"  ... {len(self.anchors) - 2 * shown} more (verify --json lists every one)")
            rows.append(f"  anchor {a['seq']}{' (final)' if a['final'] else ''}: {proves(a['evidence'])}")
        return rows

    def households_line(self) -> str:
        if self.households is None:
            return (
                "households: not checked (verify --households FILE checks that every model's draw is "
                "the study's households file, pinned in design.toml, in its seeded order)"
            )
        if self.households_problems:
            return f"households: {self.households}: {self.households_problems} problem(s), listed under invariant 11"
        return (
            f"households: every model's draw is {self.households}'s {self.households_count} households, "
            "in their seeded order"
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "run_dir": self.run_dir,
                "ok": self.ok,
                "unanchored_tail": self.unanchored_tail,
                "state": self.state,
                "crash": self.crash if self.state == CRASHED else None,
                "under_way": self.crash if self.state == RUNNING else None,
                "start_here": [asdict(v) for v in self.start_here],
                "witness": {
                    "checked": self.witness is not None,
                    "clone": self.witness,
                    "problems": self.witness_problems if self.witness is not None else None,
                    "unchecked": list(self.witness_unchecked),
                },
                "outcome": self.outcome,
                "figures": self.figures,
                "households": {
                    "checked": self.households is not None,
                    "file": self.households,
                    "count": self.households_count if self.households is not None else None,
                    "problems": self.households_problems if self.households is not None else None,
                },
                "anchors": list(self.anchors),
                "invariants": [
                    {**asdict(r), "status": str(r.status), "first": [asdict(v) for v in r.first]} for r in self.results
                ],
            },
            indent=2,
            sort_keys=True,
        )

    def to_table(self, shown: int = 3) -> str:
        rows = [self.state_line(), f"verify {self.run_dir}"]
        if self.outcome:
            rows.append(f"the records say: {self.outcome}")
        if self.spend_line():
            rows.append(self.spend_line())
        listing = (self.figures or {}).get("cost_disagreements")
        if listing and listing.get("count"):
            rows.extend(listing_lines(listing, shown))
        rows.append("")
        if self.start_here:
            rows.append(
                "START HERE (checks read each log only up to its first break; violations below may follow from these):"
            )
            rows.extend(f"  {v.where()}: {v.message}" for v in self.start_here[:shown])
            if len(self.start_here) > shown:
                rows.append(f"  ... {len(self.start_here)} in all")
            rows.append("")
        rows.append(f"{'#':>2}  {'invariant':<55} {'status':<10} {'checked':>9}  first violations (file:line, from 1)")
        for r in self.results:
            status = "UNANCHORED" if r.status is Status.UNANCHORED else r.status.value.upper()
            firsts = [f"{v.where()}: {v.message}" for v in r.first[:shown]]
            if r.note:
                firsts.insert(0, r.note)
            rows.append(f"{r.invariant:>2}  {r.name:<55} {status:<10} {r.checked:>9}  " + (firsts[0] if firsts else ""))
            pad = " " * (2 + 2 + 55 + 1 + 10 + 1 + 9 + 2)
            rows.extend(pad + f for f in firsts[1:])
            if r.violations > len(r.first[:shown]):
                rows.append(pad + f"... {r.violations} violations in all")
        rows.append("")
        rows.append(self.witness_line())
        rows.extend(self.evidence_rows())
        rows.append(self.households_line())
        if self.unanchored_tail:
            rows.append(f"unanchored tail: {self.unanchored_tail} lines")
        if self.crash is not None and self.state != COMPLETE:
            rows.extend(self._crash_rows(shown))
        rows.append(f"a page of this run for its reviewer: {self.report_command()}")
        if not self.ok:
            rows.append("VERIFY FAILED: " + ", ".join(str(i) for i in sorted(self.failed())))
        elif self.complete:
            rows.append(
                "ALL INVARIANTS HOLD" + (f"; evidence: {', '.join(self.evidence_kinds())}" if self.anchors else "")
            )
        else:
            rows.append(
                f"NO VIOLATION, BUT THE RUN IS NOT COMPLETE ({self.state})"
                + (f": {self.next_step()}" if self.next_step() else "")
            )
        return "\n".join(rows)

    def _crash_rows(self, shown: int) -> list[str]:
        c = self.crash or {}
        who = "the crash" if self.state == CRASHED else "the run being under way"
        rows = [f"what only {who} explains (not violations):"]
        for model, hh in sorted((c.get("under_way") or {}).items()):
            rows.append(f"  {model}: households under way: {', '.join(hh)}")
        for torn in c.get("torn_tails") or []:
            rows.append(
                f"  torn tail of {torn['log']}: {torn['length']} bytes at offset {torn['offset']} "
                f"(sha256 {torn['sha256']}), never acknowledged"
            )
        explained = c.get("explained") or []
        rows.extend(
            f"  {e['file']}{'' if e['line'] is None else ':' + str(e['line'] + 1)}: {e['message']}"
            for e in explained[: shown * 3]
        )
        if len(explained) > shown * 3:
            rows.append(f"  ... {len(explained)} in all")
        return rows


@dataclass
class Findings:
    """Collects checks and violations while the run is read."""

    checked: dict[int, int] = field(default_factory=lambda: dict.fromkeys(INVARIANTS, 0))
    count: dict[int, int] = field(default_factory=lambda: dict.fromkeys(INVARIANTS, 0))
    first: dict[int, list[Violation]] = field(default_factory=lambda: {i: [] for i in INVARIANTS})
    notes: dict[int, str] = field(default_factory=dict)
    unanchored: int = 0
    rootless: int = 0  # anchor entries without a Merkle root (written before roots): not checked
    root: list[Violation] = field(default_factory=list)  # Report.start_here
    witness: str | None = None
    witness_problems: int = 0
    outcome: str | None = None
    figures: dict[str, Any] | None = None
    households: str | None = None
    households_count: int = 0
    households_problems: int = 0
    witness_unchecked: list[str] = field(default_factory=list)
    # How far a run that is not complete got (UNDER_WAY, CLOSED; None: the
    # records must be whole), set before any check reads a log.
    stage: str | None = None
    explained: list[Violation] = field(default_factory=list)  # what the crash explains (all kept)
    under_way: dict[str, list[str]] = field(default_factory=dict)  # model -> its households under way
    torn_tails: list[dict[str, Any]] = field(default_factory=list)
    tallies: dict[str, dict[str, Any]] = field(default_factory=dict)  # model -> ModelState.tallies() (Report.tallies)
    anchors: list[dict[str, Any]] = field(default_factory=list)  # Report.anchors

    def explain(self, invariant: int, file: str, line: int | None, message: str) -> None:
        """What a run cut short at ``stage`` may lack: checked, kept for the
        report's crash object, not a violation."""
        self.checked[invariant] += 1
        self.explained.append(Violation(invariant, file, line, message))

    def check(self, invariant: int, n: int = 1) -> None:
        self.checked[invariant] += n

    def keeps(self, invariant: int) -> bool:
        """Whether a violation of ``invariant`` found now is kept in the report
        (a costly message is built only then)."""
        return len(self.first[invariant]) < KEEP_PER_INVARIANT

    def fail(self, invariant: int, file: str, line: int | None, message: str) -> None:
        self.count[invariant] += 1
        if len(self.first[invariant]) < KEEP_PER_INVARIANT:
            self.first[invariant].append(Violation(invariant, file, line, message))

    def tally(self, invariant: int, n: int) -> None:
        """``n`` more violations of ``invariant`` past the ones the report
        keeps (``keeps`` is false): counted, their messages never built."""
        self.count[invariant] += n

    def fail_root(self, invariant: int, file: str, line: int | None, message: str) -> None:
        """A violation other checks may follow from: counted as any, and shown first."""
        self.fail(invariant, file, line, message)
        # once per cause (a changed manifest fails every anchor that lists it)
        if len(self.root) < KEEP_PER_INVARIANT and all(v.message != message for v in self.root):
            self.root.append(Violation(invariant, file, line, message))

    def expect(self, invariant: int, ok: bool, file: str, line: int | None, message: str) -> bool:
        self.checked[invariant] += 1
        if not ok:
            self.fail(invariant, file, line, message)
        return ok

    def merge(self, other: Findings) -> None:
        """Add what ``other`` found after what this one found (as if one had
        gone on collecting): counts add up, first violations are kept in order."""
        for i in INVARIANTS:
            self.checked[i] += other.checked[i]
            self.count[i] += other.count[i]
            self.first[i].extend(other.first[i][: KEEP_PER_INVARIANT - len(self.first[i])])
        for i, note in other.notes.items():
            self.notes[i] = f"{self.notes[i]} {note}".strip() if i in self.notes else note
        self.unanchored += other.unanchored
        self.rootless += other.rootless
        self.witness_problems += other.witness_problems  # the witness's anchors, checked by the logs' passes
        self.witness_unchecked.extend(other.witness_unchecked)
        self.root.extend(other.root[: KEEP_PER_INVARIANT - len(self.root)])
        self.explained.extend(other.explained)
        for model, hh in other.under_way.items():
            self.under_way.setdefault(model, []).extend(hh)
        self.torn_tails.extend(other.torn_tails)

    def report(self, run_dir: str, state: str = COMPLETE, crash: dict[str, Any] | None = None) -> Report:
        results = []
        for i, name in INVARIANTS.items():
            if self.count[i]:
                status = Status.FAIL
            elif i == 8 and self.unanchored:
                status = Status.UNANCHORED
            else:
                status = Status.PASS
            note = self.notes.get(i)
            if i == 8 and self.rootless:
                rootless = (
                    f"Merkle roots not checked: {self.rootless} anchor entries have none "
                    "(anchors written before anchors had roots)"
                )
                note = f"{note}; {rootless}" if note else rootless
            if i == 8 and self.unanchored:
                note = f"unanchored tail: {self.unanchored} lines" + (f"; {note}" if note else "")
            results.append(Result(i, name, status, self.checked[i], self.count[i], tuple(self.first[i]), note))
        return Report(
            run_dir,
            tuple(results),
            self.unanchored,
            tuple(self.root),
            self.witness,
            self.witness_problems,
            self.outcome,
            self.households,
            self.households_count,
            self.households_problems,
            state,
            crash,
            dict(self.tallies),
            self.figures,
            tuple(self.witness_unchecked),
            tuple(self.anchors),
        )


def evidence_kinds(anchors: list[dict[str, Any]]) -> list[str]:
    """What kinds of evidence the run's final (else last) anchor has, for the verdict line."""
    if not anchors:
        return []
    e = anchors[-1]["evidence"]
    kinds = ["git witness"] if e["git"] else []
    if e["signature"]:
        kinds.append("the study's signature")
    if e["cosignatures"]:
        kinds.append(f"{len(e['cosignatures'])} witness cosignature(s)")
    if e["stamps"]:
        kinds.append(f"{len(e['stamps'])} RFC 3161 time stamp(s)")
    return kinds


def proves(e: dict[str, Any]) -> str:
    """One anchor's evidence, short: ``git, signed, cosigned by w0 at T, stamped by TSA 0 at G``."""
    parts = ["git" if e["git"] else "not pushed"]
    if e["signature"]:
        parts.append("signed")
    parts += [f"cosigned by {c['name']} at {c['time']}" for c in e["cosignatures"]]
    parts += [f"stamped by TSA {s['tsa']} at {s['gen_time']}" for s in e["stamps"]]
    return ", ".join(parts)
