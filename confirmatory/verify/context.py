"""What every check of one verification shares: the layout, the findings, the
log pass, the rules as the run manifest recorded them, the host evidence and
the run-level times (run stops, the ceiling's crossing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from confirmatory import rules
from confirmatory.hostrules import HostVerdict
from confirmatory.records import HostSummary, RunLayout
from confirmatory.verify.logs import LogPass
from confirmatory.verify.report import Findings


@dataclass(frozen=True)
class RulesView:
    """The manifest's `rules`, the values the lanes decided with."""

    precedence: tuple[str, ...]
    max_reruns: int
    inconclusive_limit: int
    stop_follow_s: float
    class_lists: dict
    max_gap_s: float
    pressure_threshold: float
    attempt_deadline_s: float = 3600.0

    @classmethod
    def from_manifest(cls, manifest: Any, findings: Findings) -> "RulesView":
        r = manifest.get("rules") if isinstance(manifest, dict) else None
        ok = isinstance(r, dict) and isinstance(r.get("host"), dict) and all(
            k in r for k in ("precedence", "max_reruns_per_arm", "inconclusive_household_limit",
                             "stop_follow_s", "class_lists"))
        findings.expect(11, ok, "manifest.json", None, "rules incomplete; defaults used")
        r = r if ok else {"host": {}}
        return cls(tuple(r.get("precedence") or rules.DEFAULT_PRECEDENCE),
                   int(r.get("max_reruns_per_arm", 2)), int(r.get("inconclusive_household_limit", 5)),
                   float(r.get("stop_follow_s", 5)), r.get("class_lists") or rules.CLASS_LISTS,
                   float(r["host"].get("max_gap_s", 45)), float(r["host"].get("pressure_threshold", 10)),
                   attempt_deadline_s=float(r.get("attempt_deadline_s", 3600)))


@dataclass
class RunContext:
    layout: RunLayout
    findings: Findings
    logs: LogPass
    rules: RulesView
    host: HostSummary
    arms: list[str]
    run_events: list[tuple[int, dict]]
    resume_requests: set[tuple[str, float]]
    run_stop_ts: list[float] = field(default_factory=list)
    ceiling_t: float = float("inf")

    def host_verdict(self, start: float, end: float, limit: int | None = None) -> HostVerdict:
        """The verdict on host.jsonl's first ``limit`` lines (the attempt line's
        ``host_lines``: what the lane had when it classified; all when None)."""
        return self.host.verdict(start, end, max_gap_s=self.rules.max_gap_s,
                                 pressure_threshold=self.rules.pressure_threshold, limit=limit)

    def host_is(self, start: float, end: float, limit: int | None = None) -> bool:
        """Whether the host evidence makes an attempt `host` (its verdict has reasons)."""
        return self.host.is_host(start, end, limit)
