"""What the reviewer's page shows, read from a run directory's files.

Owns `RunView` and `ModelView`: the manifests, config.json, the design's
ceiling table, and every log's lines as written (run-level events, host
evidence, anchors and their pushes, each model's attempts, households,
control events and admission decisions). Reading is tolerant: a line that is
not a JSON object is skipped and counted (`unread`), a torn last line is
left out, a missing file is said so; what the lines mean and whether they
can be trusted is verify's to say (the page shows its verdict above all
this). Pure reading: nothing here writes.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from confirmatory.records.layout import ANCHORS_LOG, PUSHES_LOG, load_layout, model_log

try:  # already a dependency (verify's parser); the standard one otherwise
    from orjson import loads as _loads
except ImportError:  # pragma: no cover
    _loads = json.loads  # type: ignore[assignment]  # called on bytes only, as orjson's is


def read_log(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    """A log's objects in line order, and what could not be read of it (None: all)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], "missing"
    except OSError as exc:
        return [], f"cannot be read: {exc.strerror or exc}"
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with its newline
    out: list[dict[str, Any]] = []
    bad = 0
    for raw in lines:
        try:
            obj = _loads(raw)
        except ValueError:
            bad += 1
            continue
        if type(obj) is dict:
            out.append(obj)
        else:
            bad += 1
    problems = []
    if bad:
        problems.append(f"{bad} line(s) not a JSON object, left out")
    if tail:
        problems.append(f"a torn last line of {len(tail)} bytes, left out")
    return out, "; ".join(problems) or None


def _num(v: Any) -> float | None:
    return float(v) if type(v) in (int, float) and v == v and abs(v) != float("inf") else None


@dataclass
class ModelView:
    name: str
    manifest: dict[str, Any]
    attempts: list[dict[str, Any]] = field(default_factory=list)
    households: list[dict[str, Any]] = field(default_factory=list)
    control: list[dict[str, Any]] = field(default_factory=list)  # every other event of its run.jsonl
    decisions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def lanes(self) -> list[int]:
        """Its manifest's lanes, and any other lane its lines name."""
        n = self.manifest.get("lanes")
        lanes = set(range(n)) if type(n) is int and 0 < n <= 4096 else set()
        lanes.update(a["lane"] for a in self.attempts if type(a.get("lane")) is int)
        return sorted(lanes)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [o for o in self.control if o.get("event") == name]

    @property
    def cap_nusd(self) -> int | None:
        v = self.manifest.get("cap_nusd")
        return v if type(v) is int else None


@dataclass
class RunView:
    root: Path
    manifest: dict[str, Any]
    config: dict[str, Any] | None
    config_problem: str | None
    overall_cap_nusd: int | None
    margin_nusd: int | None
    run_events: list[dict[str, Any]]
    host: list[dict[str, Any]]
    anchors: list[dict[str, Any]]
    pushes: list[dict[str, Any]]
    resume_requests: list[dict[str, Any]]
    models: dict[str, ModelView]
    unread: dict[str, str]  # log (relative path) -> what could not be read of it

    @property
    def ceiling_nusd(self) -> int | None:
        v = self.manifest.get("ceiling_nusd")
        return v if type(v) is int else None

    @property
    def spend_before_nusd(self) -> int:
        v = self.manifest.get("spend_before_nusd")
        return v if type(v) is int else 0

    def span(self) -> tuple[float, float]:
        """The run's time span: from its manifest (or first line) to its last time."""
        ts: list[float] = []
        created = _num(self.manifest.get("created_t"))
        if created is not None:
            ts.append(created)
        for objs in (self.run_events, self.anchors, self.pushes):
            ts.extend(t for t in (_num(o.get("t")) for o in objs) if t is not None)
        for m in self.models.values():
            for a in m.attempts:
                ts.extend(t for t in (_num(a.get("start")), _num(a.get("end"))) if t is not None)
            for objs in (m.households, m.control, m.decisions):
                ts.extend(t for t in (_num(o.get("t")) for o in objs) if t is not None)
        if self.host:
            first, last = _num(self.host[0].get("t")), _num(self.host[-1].get("t"))
            ts.extend(t for t in (first, last) if t is not None)
        if not ts:
            return 0.0, 1.0
        lo, hi = min(ts), max(ts)
        return lo, (hi if hi > lo else lo + 1.0)


def read_run(root: Path) -> RunView:
    root = Path(root)
    layout = load_layout(root)
    manifest = layout.manifest.obj if isinstance(layout.manifest.obj, dict) else {}
    unread: dict[str, str] = {}

    def log(rel: str) -> list[dict[str, Any]]:
        objs, problem = read_log(root / rel)
        if problem:
            unread[rel] = problem
        return objs

    config, config_problem = None, None
    try:
        loaded = json.loads((root / "config.json").read_text(encoding="utf-8"))
        config = loaded if isinstance(loaded, dict) else None
        config_problem = None if config is not None else "not a JSON object"
    except FileNotFoundError:
        config_problem = "missing"
    except (OSError, ValueError) as exc:
        config_problem = f"cannot be read: {exc}"
    overall = margin = None
    try:
        design = tomllib.loads((root / "design.toml").read_text(encoding="utf-8"))
        ceiling = cast(dict[str, Any], design.get("ceiling")) if isinstance(design.get("ceiling"), dict) else {}
        if _num(ceiling.get("overall_cap_usd")) is not None:
            overall = round(ceiling["overall_cap_usd"] * 10**9)
        if _num(ceiling.get("margin_usd")) is not None:
            margin = round(ceiling["margin_usd"] * 10**9)
    except (OSError, ValueError, UnicodeDecodeError):
        pass
    models: dict[str, ModelView] = {}
    for name, mf in layout.models.items():
        mv = ModelView(name, mf.obj if isinstance(mf.obj, dict) else {})
        for o in log(model_log(name, "run.jsonl")):
            ev = o.get("event")
            if ev == "attempt":
                mv.attempts.append(o)
            elif ev == "household":
                mv.households.append(o)
            elif ev != "open":
                mv.control.append(o)
        mv.decisions = [o for o in log(model_log(name, "admission.jsonl")) if o.get("event") == "decision"]
        models[name] = mv
    return RunView(
        root,
        manifest,
        config,
        config_problem,
        overall,
        margin,
        [o for o in log("run.jsonl") if o.get("event") != "open"],
        [o for o in log("host.jsonl") if o.get("event") != "open"],
        [o for o in log(ANCHORS_LOG) if o.get("event") == "anchor"],
        [o for o in log(PUSHES_LOG) if o.get("event") == "push"],
        [o for o in log("resume.jsonl") if o.get("event") == "resume-request"],
        models,
        unread,
    )
