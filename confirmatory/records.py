"""Readers of a run directory (RECORDS.md): manifests, record files, host evidence.

Owns: where each file of the layout lives, which seed each log chains from,
reading a manifest or record together with the sha256 of its bytes, and an
index over host.jsonl that hands `hostrules.attempt_host_verdict` only the
lines that can matter for one attempt (the same verdict as the whole log,
without rescanning it for every attempt), and `HostSummary`, which gives the
same verdicts from what little of a regular host log can matter (its size
grows with the log's exceptions - gaps, pressure, evidence, clock steps - not
with its samples).

Pure readers: nothing here writes, and nothing imports the runner, litellm
or psutil. Logs themselves are streamed with `chain.iter_lines`.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confirmatory.chain import LogLine, iter_lines, log_seed
from confirmatory.hostrules import BASE_SLACK_S, NO_SAMPLE_AFTER, HostVerdict, _fmt_t, attempt_host_verdict

RUN_MANIFEST = "manifest.json"
DESIGN_COPY = "design.toml"
RUN_LEVEL_LOGS = ("run.jsonl", "host.jsonl", "resume.jsonl")
ANCHORS_LOG = "anchors.jsonl"
PUSHES_LOG = "anchor-pushes.jsonl"
MODEL_LOG_NAMES = ("run.jsonl", "admission.jsonl")


def model_dir(model: str) -> str:
    return f"models/{model}"


def model_log(model: str, name: str) -> str:
    return f"models/{model}/{name}"


def model_manifest(model: str) -> str:
    return f"models/{model}/manifest.json"


def record_relpath(household: str, arm: str, pass_index: int) -> str:
    """A record's path relative to its model's folder."""
    return f"records/{household}/{arm}/{pass_index}.json"


@dataclass(frozen=True, slots=True)
class JsonFile:
    """A JSON file as read: its object (None if unreadable), sha256, problem."""

    obj: Any
    sha256: str | None
    problem: str | None = None


def read_json(path: Path) -> JsonFile:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return JsonFile(None, None, f"cannot read: {exc.strerror or exc}")
    digest = hashlib.sha256(data).hexdigest()
    try:
        return JsonFile(json.loads(data), digest)
    except (ValueError, UnicodeDecodeError) as exc:
        return JsonFile(None, digest, f"not JSON: {exc}")


@dataclass(frozen=True, slots=True)
class LogSpec:
    """One log of the run: its relative path, the manifest it chains from, its seed."""

    relpath: str
    manifest: str
    seed: str


@dataclass
class RunLayout:
    """The manifests of a run directory and the logs they imply."""

    root: Path
    manifest: JsonFile
    models: dict[str, JsonFile] = field(default_factory=dict)

    @property
    def model_names(self) -> list[str]:
        return list(self.models)

    def logs(self) -> list[LogSpec]:
        """Every log the layout names, with its seed (None-safe: a missing
        manifest gives the seed of an empty hash, which no line matches)."""
        out = []
        run_sha = self.manifest.sha256 or ""
        for rel in (*RUN_LEVEL_LOGS, ANCHORS_LOG, PUSHES_LOG):
            out.append(LogSpec(rel, RUN_MANIFEST, log_seed(run_sha, rel)))
        for name, mf in self.models.items():
            for log in MODEL_LOG_NAMES:
                rel = model_log(name, log)
                out.append(LogSpec(rel, model_manifest(name), log_seed(mf.sha256 or "", rel)))
        return out


def load_layout(root: Path) -> RunLayout:
    """Read the run manifest and every model manifest it names or the tree holds."""
    root = Path(root)
    layout = RunLayout(root, read_json(root / RUN_MANIFEST))
    names: list[str] = []
    listed = (layout.manifest.obj or {}).get("models") if isinstance(layout.manifest.obj, dict) else None
    if isinstance(listed, list):
        names.extend(str(n) for n in listed)
    models_dir = root / "models"
    if models_dir.is_dir():
        names.extend(sorted(p.name for p in models_dir.iterdir() if p.is_dir() and p.name not in names))
    for name in names:
        layout.models[name] = read_json(root / model_manifest(name))
    return layout


def stream(path: Path) -> Iterator[LogLine]:
    """The lines of a log, one at a time (`chain.iter_lines`)."""
    return iter_lines(Path(path))


def record_files(model_root: Path) -> Iterator[str]:
    """Every file under a model's records/ folder, relative to the model folder."""
    base = Path(model_root) / "records"
    if not base.is_dir():
        return
    for hh in sorted(base.iterdir()):
        if not hh.is_dir():
            yield f"records/{hh.name}"
            continue
        for arm in sorted(hh.iterdir()):
            if not arm.is_dir():
                yield f"records/{hh.name}/{arm.name}"
                continue
            for f in sorted(arm.iterdir()):
                yield f"records/{hh.name}/{arm.name}/{f.name}"


class HostIndex:
    """host.jsonl's lines, indexed by time, for one verdict per attempt.

    `attempt_host_verdict` looks at the lines from the log's start up to the
    sample that completes an attempt's evidence. Of those, only the last time
    point before the attempt's widened window and everything after it can
    change the verdict, except for one thing: the slack grows with the largest
    backward clock step reported *anywhere* before. So the slice handed over
    starts at that time point, and its first sample carries the running
    maximum of ``clock_back_max_s`` up to it: the verdict is the same as on
    the whole log (tests compare both). Needs the log's times non-decreasing
    (the clock never goes backwards); `monotone` says whether they are, and
    when they are not every verdict is taken on the whole log.
    """

    _POINTS = ("open", "sample")

    def __init__(self, lines: Iterable[dict]) -> None:
        self.lines: list[dict] = []
        self.times: list[float] = []
        self.back_running: list[float] = []
        self.monotone = True
        back = 0.0
        last = float("-inf")
        for obj in lines:
            t = obj.get("t")
            if not isinstance(t, (int, float)):
                t = last if last != float("-inf") else 0.0
            if t < last:
                self.monotone = False
            last = max(last, t)
            if obj.get("event") == "sample":
                back = max(back, float(obj.get("clock_back_max_s") or 0.0))
            self.lines.append(obj)
            self.times.append(t)
            self.back_running.append(back)
        self.back_max = back

    def verdict(self, start: float, end: float, *, max_gap_s: float,
                pressure_threshold: float, limit: int | None = None) -> HostVerdict:
        """The verdict on the log's first ``limit`` lines (all when None).

        ``limit`` is the attempt line's ``host_lines``: how much of host.jsonl
        the lane had when it classified. A prefix without the completing
        sample can only add the reason "no sample after the attempt".
        """
        if limit is not None and limit < len(self.lines):
            lines = self.lines[:limit] if limit <= 0 or not self.monotone else self._cut(start, end, limit)
        else:
            lines = self.window(start, end)
        return attempt_host_verdict(lines, start, end, max_gap_s=max_gap_s,
                                    pressure_threshold=pressure_threshold)

    def _cut(self, start: float, end: float, limit: int) -> Sequence[dict]:
        """``window`` of the first ``limit`` lines only."""
        prefix = HostIndex.__new__(HostIndex)
        prefix.lines, prefix.times = self.lines[:limit], self.times[:limit]
        prefix.back_running, prefix.monotone = self.back_running[:limit], self.monotone
        prefix.back_max = prefix.back_running[-1] if limit else 0.0
        return prefix.window(start, end)

    def window(self, start: float, end: float) -> Sequence[dict]:
        if not self.monotone:
            return self.lines
        slack = BASE_SLACK_S + self.back_max
        # the last time point strictly before the widest possible window start
        i = bisect.bisect_left(self.times, start - slack) - 1
        while i >= 0 and self.lines[i].get("event") not in self._POINTS:
            i -= 1
        first = max(i, 0)
        # the first sample past the widest possible completion bound, inclusive
        j = bisect.bisect_right(self.times, end + slack)
        while j < len(self.lines) and self.lines[j].get("event") != "sample":
            j += 1
        out = self.lines[first: j + 1]
        carry = self.back_running[first - 1] if first > 0 else 0.0
        if carry > 0:
            for k, line in enumerate(out):
                if line.get("event") == "sample":
                    out = list(out)
                    own = float(line.get("clock_back_max_s") or 0.0)
                    out[k] = {**line, "clock_back_max_s": max(own, carry)}
                    break
            else:
                return self.lines  # no sample to carry the running maximum: use the whole log
        return out


_POINTS = frozenset({"open", "sample"})
_NUM = (int, float)


class HostSummary:
    """host.jsonl reduced to what can change a verdict, fed line by line.

    For one pair of rule parameters (the manifest's ``max_gap_s`` and
    ``pressure_threshold``), ``verdict`` returns exactly what
    `hostrules.attempt_host_verdict` returns on the whole log (tests compare
    both), while keeping only: the evidence lines and the samples above the
    pressure threshold (with their reasons), the gaps longer than
    ``max_gap_s`` between consecutive time points, the last time point, and
    per stretch of samples that share the running maximum backward clock
    step, that maximum and the stretch's last sample time.

    Why that is enough, on a log whose times never decrease: the completing
    sample of an attempt ending at ``end`` is the first sample with
    ``t > end + slack(its running maximum)``, so it lies in the first stretch
    whose last sample passes that bound, and the verdict's slack is that
    stretch's; every line after it lies beyond the window (``t`` past ``hi``),
    so the prefix rule drops nothing that could give a reason. A log that is
    not that regular (times going back, a time or value that is not a number:
    only an edited log is) is ``irregular``; `verify` then takes the verdicts
    from a `HostIndex` over the whole log instead.
    """

    def __init__(self, *, max_gap_s: float, pressure_threshold: float) -> None:
        self.max_gap_s = max_gap_s
        self.pressure_threshold = pressure_threshold
        self.monotone = True
        self.irregular = False
        self.back_max = 0.0
        self.lines = 0
        self._last = float("-inf")          # HostIndex's monotonicity test, same coercion
        self._prev_point: float | None = None
        self.last_point = float("-inf")
        self.stretches: list[list[float]] = []      # [running back max, last sample t]
        self.marks_t: list[float] = []              # evidence / pressure lines: t
        self.marks: list[tuple[int, int, str]] = []  # (line, 0, reason)
        self.gaps_end: list[float] = []             # gap (q, p): p
        self.gaps: list[tuple[float, int, str]] = []  # (q, line of p, reason)

    def add(self, obj: dict) -> None:
        i = self.lines
        self.lines += 1
        t = obj.get("t")
        num = isinstance(t, _NUM)
        ct = t if num else (self._last if self._last != float("-inf") else 0.0)
        if ct < self._last:
            self.monotone = False
            self.irregular = True
        if ct > self._last:
            self._last = ct
        event = obj.get("event")
        if event not in _POINTS and event != "evidence":
            return
        if not num:
            self.irregular = True
            return
        if event == "evidence":
            self.marks_t.append(t)
            self.marks.append((i, 0, f"evidence {obj.get('source')}: {obj.get('line')} at {_fmt_t(t)}"))
            return
        if event == "sample":
            back, pressure = obj.get("clock_back_max_s"), obj.get("mem_pressure")
            if not (back is None or isinstance(back, _NUM)) or not (pressure is None or isinstance(pressure, _NUM)):
                self.irregular = True
                return
            b = max(self.back_max, float(back or 0.0))
            if not self.stretches or b > self.back_max:
                self.stretches.append([b, t])
            else:
                self.stretches[-1][1] = t
            self.back_max = b
            if pressure is not None and pressure > self.pressure_threshold:
                self.marks_t.append(t)
                self.marks.append((i, 0, f"pressure {pressure:g} > {self.pressure_threshold:g} at {_fmt_t(t)}"))
        previous = self._prev_point
        if previous is not None and t - previous > self.max_gap_s:
            self.gaps_end.append(t)
            self.gaps.append((previous, i, f"gap of {t - previous:.3f} s between samples at "
                                           f"{_fmt_t(previous)} and {_fmt_t(t)}"))
        self._prev_point = t
        self.last_point = t

    def is_host(self, start: float, end: float) -> bool:
        """Whether the verdict has reasons (the hot path: no strings built)."""
        for b, last in self.stretches:
            if last > end + BASE_SLACK_S + b:
                slack, complete = BASE_SLACK_S + b, True
                break
        else:
            slack, complete = BASE_SLACK_S + self.back_max, False
        lo, hi = start - slack, end + slack
        if not complete and self.last_point <= hi:
            return True
        k = bisect.bisect_left(self.marks_t, lo)
        if k < len(self.marks_t) and self.marks_t[k] <= hi:
            return True
        k = bisect.bisect_left(self.gaps_end, lo)
        return k < len(self.gaps) and self.gaps[k][0] <= hi

    def verdict(self, start: float, end: float, *, max_gap_s: float | None = None,
                pressure_threshold: float | None = None) -> HostVerdict:
        if (max_gap_s is not None and max_gap_s != self.max_gap_s) or (
                pressure_threshold is not None and pressure_threshold != self.pressure_threshold):
            raise ValueError("HostSummary was built for other rule parameters")
        if self.irregular:
            raise ValueError("an irregular host log has no summary; use HostIndex")
        for b, last in self.stretches:
            if last > end + BASE_SLACK_S + b:
                slack, complete = BASE_SLACK_S + b, True
                break
        else:
            slack, complete = BASE_SLACK_S + self.back_max, False
        lo, hi = start - slack, end + slack
        hits = []
        k = bisect.bisect_left(self.marks_t, lo)
        while k < len(self.marks_t) and self.marks_t[k] <= hi:
            hits.append(self.marks[k])
            k += 1
        k = bisect.bisect_left(self.gaps_end, lo)
        while k < len(self.gaps) and self.gaps[k][0] <= hi:
            hits.append((self.gaps[k][1], 1, self.gaps[k][2]))
            k += 1
        reasons = [r for _, _, r in sorted(hits)]
        if not complete and self.last_point <= hi:
            reasons.append(NO_SAMPLE_AFTER)
        return HostVerdict(complete=complete, reasons=tuple(reasons))
