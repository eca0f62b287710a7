"""What one model's pass leaves for the timeline checks, the totals and the report.

Owns `ModelState` (its control lines, how each household ended, its spend,
its halts and pauses, the attempts with action stop, the counts of its
outcome line) and `HouseholdEnd`: the few numbers per household that are all
the admission replay (`timeline`) keeps of a household once it is checked.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class HouseholdEnd:
    seq: int
    lane: int
    t: float
    finished: bool
    spend: int
    first_start: float | None
    crash: bool = False  # cut short by a crash (`cut_by: crash`): its lane runs it again whole


def hkey(household: Any, round_index: Any) -> str:
    """A household's run as the checks key it: ``h`` for its first, ``h@r``
    for round r >= 1 (a continuation ran it again; ``@`` is in no slug)."""
    return household if not round_index else f"{household}@{round_index}"


def line_hkey(obj: dict[str, Any]) -> str:
    """``hkey`` of a line that names a household (its optional ``round``)."""
    return hkey(obj.get("household"), obj.get("round", 0))


@dataclass
class ModelState:
    """What one model's pass leaves for the timeline checks and the totals."""

    name: str
    manifest: dict[str, Any]
    control: list[tuple[int, dict[str, Any]]]
    ends: dict[str, HouseholdEnd] = field(default_factory=dict)
    attempt_cost: int = 0
    # (h, arm, pass) -> (seq, class, end, the rules' stop cause or None) of each attempt with action stop
    stop_attempts: dict[tuple[str, Any, Any], tuple[int, str, float, str | None]] = field(default_factory=dict)
    halt_t: float = float("inf")
    ended_halts: list[float] = field(
        default_factory=list
    )  # stops a continuation carried the run on from (crash, runner error)
    trigger_t: float = float("inf")
    pauses: list[tuple[float, float]] = field(default_factory=list)
    # the cost of this model's calls that ended before the ceiling event's t,
    # less the slack: counted before the crossing (ModelCheck.attempt)
    ceiling_known_nusd: int = 0
    # ... and of those that ended no later than the slack after it: at most
    # what can have been counted by the crossing (money.check_totals)
    ceiling_upper_nusd: int = 0
    outcome: str = ""  # how its households ended, for the report (outcome.model_outcome)
    # record folders of households without a household line, in a run cut
    # short: the crash's when the household was under way, else violations
    # (household, file, line, message)
    cut_short_records: list[tuple[str, str, int | None, str]] = field(default_factory=list)
    lost_nusd: int = 0  # the crashes' lost costs (continuation lines), part of its share
    # arm results (each ended household's arms, by the class of each arm's
    # last attempt) and how many of them are an observation (ok or model)
    results: int = 0
    observed: int = 0
    # the same arm results by class; every attempt of an ended household by
    # class; each rerun by the class of the attempt it replaced (the report's
    # tables: procedure.tally_classes)
    standing: Counter[str] = field(default_factory=Counter)
    attempt_classes: Counter[str] = field(default_factory=Counter)
    rerun_classes: Counter[str] = field(default_factory=Counter)
    tally: dict[str, Any] = field(
        default_factory=dict
    )  # tallies(), kept when the state is slimmed for the run-level checks

    def tallies(self) -> dict[str, Any]:
        """What the report shows of this model's counts (``Report.tallies``)."""
        return {
            "results": dict(self.standing),
            "attempts": dict(self.attempt_classes),
            "reruns": dict(self.rerun_classes),
            "households": sum(1 for e in self.ends.values() if not e.crash),
            "unfinished": sum(1 for e in self.ends.values() if not e.finished and not e.crash),
        }

    by_class: dict[str, int] = field(default_factory=dict)  # the arm results by class
    # what the report's figures take of this model (verification._check_one): households ended,
    # unfinished, arm results by class
    figures: dict[str, Any] = field(default_factory=dict)

    def events(self, name: str) -> list[tuple[int, dict[str, Any]]]:
        return [(s, o) for s, o in self.control if o.get("event") == name]
