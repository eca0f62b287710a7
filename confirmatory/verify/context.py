"""What every check of one verification shares: the layout, the findings, the
log pass, the rules as the run manifest recorded them, the host evidence and
the run-level times (run stops, the ceiling's crossing)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confirmatory.core import rules
from confirmatory.core.hostrules import HostVerdict
from confirmatory.records.hostindex import HostSummary
from confirmatory.records.layout import RunLayout
from confirmatory.verify.logs import LogPass
from confirmatory.verify.report import Findings


@dataclass(frozen=True)
class RulesView:
    """The manifest's `rules`, the values the lanes decided with."""

    precedence: tuple[str, ...]
    max_reruns: int
    inconclusive_limit: int
    stop_follow_s: float
    class_lists: dict[str, Any]
    max_gap_s: float
    pressure_threshold: float
    attempt_deadline_s: float = 3600.0
    # the wait before a rerun pass (rules.rerun_wait_s); 0: a manifest
    # without it, made before the rule existed, whose lanes waited none
    rerun_wait_s: float = 0.0
    # the names of the design's [[host.evidence]] sources (None: design.toml unreadable)
    evidence_sources: frozenset[str] | None = None

    @classmethod
    def from_manifest(cls, manifest: Any, findings: Findings) -> RulesView:
        """The rules as the manifest gives them. A rule missing or not of its
        kind fails invariant 11, naming it, and the checks go on with the
        design format's default in its place: never a value made up from a
        wrong one (2.9 is not 2 reruns), never a traceback."""
        r = manifest.get("rules") if isinstance(manifest, dict) else None
        findings.check(11)
        if not isinstance(r, dict):
            findings.fail(11, "manifest.json", None, f"rules is {r!r}, not an object; the defaults used")
            r = {}
        host = r.get("host")
        if not isinstance(host, dict):
            findings.fail(11, "manifest.json", None, f"rules.host is {host!r}, not an object; the defaults used")
            host = {}

        def rule(table: dict[str, Any], key: str, ok: Callable[[Any], bool], kind: str, default: Any) -> Any:
            value = table.get(key, _MISSING)
            findings.check(11)
            try:
                good = value is not _MISSING and ok(value)
            except Exception:  # noqa: BLE001 - any value a forged manifest holds
                good = False
            if good:
                return value
            name = f"rules.{'host.' if table is host else ''}{key}"
            said = "missing" if value is _MISSING else f"{value!r}, not {kind}"
            findings.fail(11, "manifest.json", None, f"{name} is {said}; {default!r} used in the checks")
            return default

        return cls(
            tuple(rule(r, "precedence", _is_precedence, "each class once", rules.DEFAULT_PRECEDENCE)),
            rule(r, "max_reruns_per_arm", _is_count, "an integer >= 0", 2),
            rule(r, "inconclusive_household_limit", _is_count, "an integer >= 0", 5),
            float(rule(r, "stop_follow_s", _is_positive, "a number > 0", 5)),
            rule(r, "class_lists", _is_class_lists, "provider, model and operator lists of names", rules.CLASS_LISTS),
            float(rule(host, "max_gap_s", _is_positive, "a number > 0", 45)),
            float(rule(host, "pressure_threshold", _is_percent, "a number from 0 to 100", 10.0)),
            attempt_deadline_s=float(rule(r, "attempt_deadline_s", _is_positive, "a number > 0", 3600)),
            rerun_wait_s=float(
                rule(r, "rerun_wait_s", _is_non_negative, "a number >= 0", 0.0) if "rerun_wait_s" in r else 0.0
            ),
        )


_MISSING = object()


def _is_number(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _is_count(v: Any) -> bool:
    return type(v) is int and v >= 0


def _is_positive(v: Any) -> bool:
    return _is_number(v) and v > 0


def _is_non_negative(v: Any) -> bool:
    return _is_number(v) and v >= 0


def _is_percent(v: Any) -> bool:
    return _is_number(v) and 0 <= v <= 100


def _is_precedence(v: Any) -> bool:
    return isinstance(v, list) and all(type(c) is str for c in v) and sorted(v) == sorted(rules.DEFAULT_PRECEDENCE)


def _is_class_lists(v: Any) -> bool:
    return isinstance(v, dict) and all(
        isinstance(v.get(c), list) and all(type(n) is str for n in v[c]) for c in ("provider", "model", "operator")
    )


@dataclass
class RunContext:
    layout: RunLayout
    findings: Findings
    logs: LogPass
    rules: RulesView
    host: HostSummary
    arms: list[str]
    run_events: list[tuple[int, dict[str, Any]]]
    resume_requests: dict[tuple[str, float], int]  # (model, t) -> how many requests of resume.jsonl
    run_stop_ts: list[float] = field(default_factory=list)
    crash_windows: list[tuple[float, float]] = field(default_factory=list)
    crash_ts: set[float] = field(default_factory=set)
    # (cause, t) of run stops a continuation carried the run on from
    ended_stops: set[tuple[Any, Any]] = field(default_factory=set)
    ceiling_t: float = float("inf")
    clock_drift: Any = None  # clocks.ClockDrift of host.jsonl's samples (set once host.jsonl is read)
    design: Any = None  # design.toml's (bytes, table), or why it cannot be read (study.read_design)

    def host_verdict(self, start: float, end: float, limit: int | None = None) -> HostVerdict:
        """The verdict on host.jsonl's first ``limit`` lines (the attempt line's
        ``host_lines``: what the lane had when it classified; all when None)."""
        return self.host.verdict(
            start, end, max_gap_s=self.rules.max_gap_s, pressure_threshold=self.rules.pressure_threshold, limit=limit
        )

    def host_is(self, start: float, end: float, limit: int | None = None) -> bool:
        """Whether the host evidence makes an attempt `host` (its verdict has reasons)."""
        return self.host.is_host(start, end, limit)
